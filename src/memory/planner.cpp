#include "memory/planner.hpp"

#include <algorithm>
#include <numeric>

namespace mn::memory {

namespace {
uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
}  // namespace

Plan plan_arena(const std::vector<Request>& requests, uint64_t alignment, bool alias) {
    Plan plan;
    plan.offsets.assign(requests.size(), 0);
    std::vector<uint64_t> sizes(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
        sizes[i] = align_up(std::max<uint64_t>(requests[i].bytes, 4), alignment);
        plan.logical_bytes += sizes[i];
    }
    if (!alias) {
        uint64_t at = 0;
        for (size_t i = 0; i < requests.size(); ++i) plan.offsets[i] = at, at += sizes[i];
        plan.physical_bytes = at;
        return plan;
    }
    std::vector<size_t> order(requests.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });

    std::vector<size_t> placed;
    for (size_t i : order) {
        // Placed values alive at the same time as i, by offset: take the first gap that fits.
        std::vector<size_t> live;
        for (size_t j : placed) {
            if (requests[j].first <= requests[i].last && requests[i].first <= requests[j].last) live.push_back(j);
        }
        std::sort(live.begin(), live.end(), [&](size_t a, size_t b) { return plan.offsets[a] < plan.offsets[b]; });
        uint64_t at = 0;
        uint64_t best = UINT64_MAX, best_gap = UINT64_MAX;
        for (size_t j : live) {
            if (plan.offsets[j] >= at + sizes[i]) {
                const uint64_t gap = plan.offsets[j] - at;
                if (gap < best_gap) best = at, best_gap = gap;
            }
            at = std::max(at, plan.offsets[j] + sizes[j]);
        }
        plan.offsets[i] = best != UINT64_MAX ? best : at;
        plan.physical_bytes = std::max(plan.physical_bytes, plan.offsets[i] + sizes[i]);
        placed.push_back(i);
    }
    return plan;
}

}  // namespace mn::memory
