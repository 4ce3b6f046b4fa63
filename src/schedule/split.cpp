// The update split off: in data-parallel training (CompileOptions::data_parallel) the optimizer update
// must read the gradients summed over every process, which the host reduces between two submits, so the
// step is two programs. The update's steps are those that read a reduced gradient (an input the host
// fills between the programs), or what such steps compute; they move behind every other step, the rest keeping
// its order and levels, the update's a level above it (move_steps_first). Moving a step of the first part
// ahead of update steps that came before it is sound when it neither reads what they write nor writes
// what they touch; by construction it reads nothing they compute, and the rest is checked here.
#include <algorithm>
#include <set>

#include "schedule/schedule.hpp"

namespace mn::sched {

size_t split_update(Schedule& s, const std::vector<int32_t>& reduced_inputs) {
    const size_t ns = s.steps.size();
    auto root = [&](int32_t v) { return s.root(v); };
    std::set<int32_t> tainted;
    for (int32_t v : reduced_inputs) tainted.insert(root(v));
    std::vector<bool> update(ns, false);
    for (size_t i = 0; i < ns; ++i) {
        const Step& step = s.steps[i];
        for (size_t b = 0; b < step.values.size() && !update[i]; ++b)
            update[i] = !step.kernel.iface.bindings[b].writes && tainted.count(root(step.values[b]));
        if (!update[i]) continue;
        for (size_t b = 0; b < step.values.size(); ++b)
            if (step.kernel.iface.bindings[b].writes) tainted.insert(root(step.values[b]));
    }
    std::set<int32_t> update_reads, update_writes;  // of the update steps met so far
    for (size_t i = 0; i < ns; ++i) {
        const Step& step = s.steps[i];
        for (size_t b = 0; b < step.values.size(); ++b) {
            const int32_t v = root(step.values[b]);
            const bool writes = step.kernel.iface.bindings[b].writes;
            if (update[i]) {
                (writes ? update_writes : update_reads).insert(v);
            } else if (update_writes.count(v) || (writes && update_reads.count(v))) {
                throw Error("compile: '" + step.kernel.label + "' cannot run before the data-parallel update: it " +
                            (writes ? "writes" : "reads") + " a value the update " + (writes ? "reads" : "writes"));
            }
        }
    }
    std::vector<bool> first(ns);
    for (size_t i = 0; i < ns; ++i) first[i] = !update[i];
    return move_steps_first(s, first);  // the update behind the rest, a level above it
}

}  // namespace mn::sched
