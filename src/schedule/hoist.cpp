// Hoisting: in a program that does not train, a step whose inputs are only parameters, constants and
// state that no step writes (an eval batch norm's running statistics), or values such steps compute,
// gives the same result every run until one of those changes. ResNet-50 folds each batch norm into its
// convolution's weights that way (w * gamma * rsqrt(running_var + eps): three kernels per norm, 159
// dispatches and ~0.7 ms of an H200 inference). Those steps move to the front of the program, and
// what they compute for the rest of it is pinned (never aliased), so that the rest can run alone
// while the parameters stay as they were (Session::Impl::run_program). State that a step writes (a
// KV cache) changes every run, and so does what reads it.
#include <algorithm>

#include "schedule/schedule.hpp"

namespace mn::sched {

std::vector<bool> parameter_only_nodes(const Graph& g) {
    const auto& nodes = g.nodes();
    std::vector<bool> assigned(nodes.size(), false), invariant(nodes.size(), false);
    for (const Node& n : nodes) {
        if (n.op == Op::Assign) assigned[static_cast<size_t>(n.inputs[0])] = true;
    }
    for (size_t i = 0; i < nodes.size(); ++i) {
        const Node& n = nodes[i];
        if (op_info(n.op).archetype == Archetype::Leaf) {
            invariant[i] = n.op == Op::Parameter || n.op == Op::Constant || (n.op == Op::State && !assigned[i]);
        } else if (n.op != Op::Assign) {
            invariant[i] = std::all_of(n.inputs.begin(), n.inputs.end(), [&](int32_t in) { return invariant[static_cast<size_t>(in)]; });
        }
    }
    return invariant;
}

size_t hoist_parameter_work(Schedule& s) {
    const size_t nv = s.values.size(), ns = s.steps.size();
    auto root = [&](int32_t v) { return static_cast<size_t>(s.root(v)); };
    // Until nothing changes: a step is hoisted if it reads only invariant values and writes only
    // transient ones, and a transient value is invariant if every step that writes it is hoisted.
    std::vector<bool> hoisted(ns, true);
    bool changed = true;
    while (changed) {
        changed = false;
        std::vector<bool> invariant(nv, false), written_by_other(nv, false);
        for (size_t v = 0; v < nv; ++v) {
            const Storage st = s.values[v].storage;
            invariant[v] = st == Storage::Parameter || st == Storage::Constant || st == Storage::State;
        }
        for (size_t i = 0; i < ns; ++i) {
            const Step& step = s.steps[i];
            for (size_t b = 0; b < step.values.size(); ++b) {
                if (!step.kernel.iface.bindings[b].writes) continue;
                const size_t v = root(step.values[b]);
                if (hoisted[i] && s.values[v].storage == Storage::Transient) invariant[v] = true;
                else written_by_other[v] = true;
            }
        }
        for (size_t v = 0; v < nv; ++v) invariant[v] = invariant[v] && !written_by_other[v];
        for (size_t i = 0; i < ns; ++i) {
            if (!hoisted[i]) continue;
            const Step& step = s.steps[i];
            for (size_t b = 0; b < step.values.size(); ++b) {
                const size_t v = root(step.values[b]);
                // A product's tile counters are zero again after its dispatch: scratch, as transients are.
                const Storage st = s.values[v].storage;
                const bool ok = step.kernel.iface.bindings[b].writes ? st == Storage::Transient || st == Storage::Counters
                                                                    : invariant[v];
                if (!ok) {
                    hoisted[i] = false;
                    changed = true;
                    break;
                }
            }
        }
    }
    // What the hoisted steps write must outlive the runs that skip them: pinned where another step reads it.
    std::vector<bool> hoisted_value(nv, false);
    for (size_t i = 0; i < ns; ++i) {
        if (!hoisted[i]) continue;
        const Step& step = s.steps[i];
        for (size_t b = 0; b < step.values.size(); ++b)
            if (step.kernel.iface.bindings[b].writes) hoisted_value[root(step.values[b])] = true;
    }
    for (size_t i = 0; i < ns; ++i) {
        if (hoisted[i]) continue;
        for (int32_t v : s.steps[i].values) {
            if (hoisted_value[root(v)]) s.values[root(v)].pinned = true;
        }
    }
    return move_steps_first(s, hoisted);  // the hoisted steps first, the others a level above them all
}

}  // namespace mn::sched
