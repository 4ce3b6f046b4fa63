#include "optimize/optimize.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "optimize/rebuild.hpp"
#include "optimize/rules.hpp"

namespace mn::optimize {
namespace {

// The node `n` (inputs already in the new graph `g`) stands for, when an identity makes it one of its
// inputs; else -1.
int32_t identity_of(const Node& n, const Graph& g) {
    for (const Identity& r : kIdentities) {
        if (n.op != r.op || n.inputs.size() != 2) continue;
        const Node& x = g.node(n.inputs[static_cast<size_t>(1 - r.constant)]);
        if (all_equal(g.node(n.inputs[static_cast<size_t>(r.constant)]), r.value) && x.shape == n.shape && x.dtype == n.dtype) {
            return n.inputs[static_cast<size_t>(1 - r.constant)];
        }
    }
    if (is_involution(n.op) && g.node(n.inputs[0]).op == n.op) return g.node(n.inputs[0]).inputs[0];
    if (!n.inputs.empty() && changes_nothing(n, g.node(n.inputs[0]).shape, g.node(n.inputs[0]).dtype)) return n.inputs[0];
    return -1;
}

using Key = std::tuple<Op, std::vector<int32_t>, Shape, DType, std::vector<int64_t>, std::vector<double>, bool, bool>;

}  // namespace

Graph simplify(const Graph& g, Stats& s) {
    std::vector<bool> is_output(g.nodes().size(), false);
    for (const auto& [name, id] : g.outputs()) is_output[static_cast<size_t>(id)] = true;
    // Identities and common subexpressions, in one sweep in node order.
    std::map<Key, int32_t> seen;
    return rebuild(g, [&](size_t i, Node& n, const Graph& out) -> int32_t {
        if (is_output[i] || is_leaf(n.op) || n.op == Op::Assign || has_nan(n)) return kEmit;
        if (const int32_t same = identity_of(n, out); same >= 0) {
            ++s.identities;
            return same;
        }
        if (!n.inputs.empty() && (moves_no_element(n, out.node(n.inputs[0]).shape) || reduces_nothing(n, out.node(n.inputs[0]).shape))) {
            ++s.identities;
            make_reshape(n);
        }
        const Key key{n.op, n.inputs, n.shape, n.dtype, n.ints, n.data, n.flag, n.gradient};
        // Pointwise duplicates stay: fusion recomputes them inside each consumer's kernel, which is
        // cheaper than materializing one shared value (and would add a dispatch).
        if (op_info(n.op).archetype != Archetype::Pointwise) {
            if (const auto it = seen.find(key); it != seen.end()) {
                ++s.merged;
                return it->second;
            }
            seen.emplace(key, static_cast<int32_t>(out.nodes().size()));  // the id emit will give it
        }
        return kEmit;
    });
}

Graph eliminate_dead_code(const Graph& g, Stats& s) {
    const auto& nodes = g.nodes();
    std::vector<bool> live(nodes.size(), false);
    for (const auto& [name, id] : g.outputs()) live[static_cast<size_t>(id)] = true;
    for (size_t i = nodes.size(); i-- > 0;) {
        if (nodes[i].op == Op::Assign || is_leaf(nodes[i].op)) live[i] = true;
        if (!live[i]) continue;
        for (int32_t in : nodes[i].inputs) live[static_cast<size_t>(in)] = true;
    }
    return rebuild(g, [&](size_t i, const Node&, const Graph&) -> int32_t {
        if (live[i]) return kEmit;
        ++s.dead;
        return kDropped;
    });
}

Graph optimize(const Graph& g, Stats* stats) { return optimize(g, Options{}, stats); }

Graph optimize(const Graph& g, const Options& options, Stats* stats) {
    Stats s;
    Graph out = eliminate_dead_code(options.saturate ? saturate(g, options.budget, s) : simplify(g, s), s);
    out = fuse_sibling_products(out, s);  // after dead code: a product that nothing reads joins no siblings
    out = eliminate_dead_code(out, s);    // the products the fusion replaced
    if (stats) *stats = s;
    return out;
}

}  // namespace mn::optimize
