#include "memory/placement.hpp"

#include <algorithm>

namespace mn::memory {

Placement place_values(const sched::Schedule& s, uint64_t alignment, bool alias) {
    const size_t nv = s.values.size();
    Placement p;
    p.first.assign(nv, -1);
    p.last.assign(nv, -1);
    p.pinned.assign(nv, false);
    p.offset.assign(nv, 0);
    for (size_t i = 0; i < s.steps.size(); ++i) {
        for (int32_t v : s.steps[i].values) {
            const auto r = static_cast<size_t>(s.root(v));
            if (p.first[r] < 0) p.first[r] = s.step_level[i];
            p.last[r] = s.step_level[i];
        }
    }
    std::vector<Request> requests;
    for (size_t v = 0; v < nv; ++v) {
        const sched::Value& val = s.values[v];
        if (val.view_of >= 0) continue;
        if (val.pinned) {
            p.pinned[v] = true;
            p.offset[v] = p.pinned_bytes;
            p.pinned_bytes += (std::max<uint64_t>(val.bytes(), 4) + alignment - 1) / alignment * alignment;
        } else if (p.first[v] >= 0) {
            requests.push_back({val.bytes(), p.first[v], p.last[v]});
            p.arena_values.push_back(static_cast<int32_t>(v));
        }
    }
    p.arena = plan_arena(requests, alignment, alias);
    for (size_t i = 0; i < p.arena_values.size(); ++i) p.offset[static_cast<size_t>(p.arena_values[i])] = p.arena.offsets[i];
    return p;
}

}  // namespace mn::memory
