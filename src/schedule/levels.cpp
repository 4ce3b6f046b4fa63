// Level ordering: barriers cost about ten dispatches on a discrete GPU (DEVICE.md), so steps that
// do not depend on each other should share one. Each step gets the lowest level after every step
// it depends on: a read waits for the value's last writer, a write for its last writer and every
// reader before it. Steps are then stably sorted by level, so a barrier is needed only between
// levels. The memory planner works on levels too: values that share bytes never share a level.
#include <algorithm>
#include <numeric>

#include "schedule/schedule.hpp"

namespace mn::sched {

namespace {

// Levels steps [first, end) among themselves, as if every step before them had run (a level below base), and
// stably sorts them by level.
// A binding touches its storage (Schedule::storage): a part of its root's bytes (Value::part_at), or all of them. A
// part depends on the accesses to itself and to all of the root; all of the root on every access to it or a part.
void level_from(Schedule& s, size_t first, int32_t base) {
    const size_t n = s.values.size();
    // Per storage, its last level that wrote it and that read it; per root, the same over any of its parts.
    std::vector<int32_t> last_write(n, -1), last_read(n, -1), part_write(n, -1), part_read(n, -1);
    std::vector<int32_t> level(s.steps.size() - first, 0);
    for (size_t i = first; i < s.steps.size(); ++i) {
        const Step& step = s.steps[i];
        int32_t l = 0;
        for (size_t b = 0; b < step.values.size(); ++b) {
            const auto v = static_cast<size_t>(s.storage(step.values[b])), r = static_cast<size_t>(s.root(step.values[b]));
            const bool writes = step.kernel.iface.bindings[b].writes;
            l = std::max({l, last_write[v] + 1, v == r ? part_write[r] + 1 : last_write[r] + 1});
            if (writes) l = std::max({l, last_read[v] + 1, v == r ? part_read[r] + 1 : last_read[r] + 1});
        }
        for (size_t b = 0; b < step.values.size(); ++b) {
            const auto v = static_cast<size_t>(s.storage(step.values[b])), r = static_cast<size_t>(s.root(step.values[b]));
            const bool writes = step.kernel.iface.bindings[b].writes;
            std::vector<int32_t>& own = writes ? last_write : last_read;
            std::vector<int32_t>& of_parts = writes ? part_write : part_read;
            own[v] = std::max(own[v], l);
            if (v != r) of_parts[r] = std::max(of_parts[r], l);
        }
        level[i - first] = l;
    }
    std::vector<size_t> order(level.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return level[a] < level[b]; });
    std::vector<Step> steps;
    steps.reserve(order.size());
    s.step_level.resize(first);
    for (size_t i : order) {
        steps.push_back(std::move(s.steps[first + i]));
        s.step_level.push_back(base + level[i]);
    }
    std::move(steps.begin(), steps.end(), s.steps.begin() + static_cast<std::ptrdiff_t>(first));
}

}  // namespace

void order_by_level(Schedule& s) { level_from(s, 0, 0); }

// The steps after the moved ones are levelled again among themselves: what they read of the moved steps is
// there before any of them runs, so a step that waited a level for a moved one (a product for its hoisted
// stacked weight) no longer does.
size_t move_steps_first(Schedule& s, const std::vector<bool>& first) {
    std::vector<Step> steps;
    std::vector<int32_t> levels;
    int32_t top = -1;
    for (size_t i = 0; i < s.steps.size(); ++i) {
        if (!first[i]) continue;
        steps.push_back(std::move(s.steps[i]));
        levels.push_back(s.step_level[i]);
        top = std::max(top, s.step_level[i]);
    }
    const size_t moved = steps.size();
    for (size_t i = 0; i < s.steps.size(); ++i) {
        if (!first[i]) steps.push_back(std::move(s.steps[i]));
    }
    s.steps = std::move(steps);
    s.step_level = std::move(levels);
    level_from(s, moved, top + 1);
    return moved;
}

}  // namespace mn::sched
