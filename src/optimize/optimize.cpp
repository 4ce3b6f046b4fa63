#include "optimize/optimize.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "optimize/rebuild.hpp"

namespace mn::optimize {
namespace {

// op(x, c) is x when c is a constant whose every element is `value` (and the result has x's shape and
// dtype, so that c broadcast nothing).
struct Identity {
    Op op;
    int constant;  // which operand is the constant
    double value;
};
constexpr Identity kIdentities[] = {
    {Op::Add, 1, 0}, {Op::Add, 0, 0}, {Op::Sub, 1, 0}, {Op::Mul, 1, 1}, {Op::Mul, 0, 1}, {Op::Div, 1, 1}, {Op::Pow, 1, 1},
};
// op(op(x)) is x.
constexpr Op kInvolutions[] = {Op::Neg};
// These ops are their input when the result has the input's shape and dtype (and, for a permute,
// the order is the identity; for a slice, every step is 1).
constexpr Op kNoOpWhenSameShape[] = {Op::Reshape, Op::Expand, Op::Cast, Op::Permute, Op::Slice};

bool is_leaf(Op op) { return op == Op::Input || op == Op::Parameter || op == Op::State; }

// A permute that keeps the order of its dims of size > 1 moves no element (a decode step's split of the
// heads at one token, [B, 1, H, D] -> [B, H, 1, D]): it is a reshape, a view that costs no kernel.
bool moves_no_element(const Node& n, const Graph& g) {
    if (n.op != Op::Permute) return false;
    const Shape& in = g.node(n.inputs[0]).shape;
    int64_t last = -1;
    for (int64_t d : n.ints) {
        if (in[static_cast<size_t>(d)] == 1) continue;
        if (d < last) return false;
        last = d;
    }
    return true;
}

// A sum, mean or max over axes of size 1 adds nothing and moves no element: a reshape. Autodiff writes one as
// the gradient of a broadcast over a batch of one (Whisper's positions, [1500, 384] added to [1, 1500, 384]): a
// reduction kernel of one element per output, 576,000 workgroups and 0.22 ms of the H200 each.
bool reduces_nothing(const Node& n, const Graph& g) {
    if (n.op != Op::Sum && n.op != Op::Mean && n.op != Op::Max) return false;
    const Shape& in = g.node(n.inputs[0]).shape;
    return std::all_of(n.ints.begin(), n.ints.end(), [&](int64_t d) { return in[static_cast<size_t>(d)] == 1; });
}

bool all_equal(const Node& c, double value) {
    return c.op == Op::Constant && std::all_of(c.data.begin(), c.data.end(), [&](double x) { return x == value; });
}

bool changes_nothing(const Node& n, const Node& in) {
    if (std::find(std::begin(kNoOpWhenSameShape), std::end(kNoOpWhenSameShape), n.op) == std::end(kNoOpWhenSameShape) ||
        n.shape != in.shape || n.dtype != in.dtype) return false;
    if (n.op == Op::Permute) {
        for (size_t d = 0; d < n.ints.size(); ++d) {
            if (n.ints[d] != static_cast<int64_t>(d)) return false;
        }
    }
    if (n.op == Op::Slice) {
        const size_t rank = n.shape.size();
        for (size_t d = 0; d < rank; ++d) {
            if (n.ints[2 * rank + d] != 1) return false;
        }
    }
    return true;
}

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
    for (Op op : kInvolutions) {
        if (n.op == op && g.node(n.inputs[0]).op == op) return g.node(n.inputs[0]).inputs[0];
    }
    if (!n.inputs.empty() && changes_nothing(n, g.node(n.inputs[0]))) return n.inputs[0];
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
        const bool has_nan = std::any_of(n.data.begin(), n.data.end(), [](double x) { return x != x; });  // no key order
        if (is_output[i] || is_leaf(n.op) || n.op == Op::Assign || has_nan) return kEmit;
        if (const int32_t same = identity_of(n, out); same >= 0) {
            ++s.identities;
            return same;
        }
        if (moves_no_element(n, out) || reduces_nothing(n, out)) {
            ++s.identities;
            n.op = Op::Reshape;
            n.ints.clear();
            n.flag = false;
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

Graph optimize(const Graph& g, Stats* stats) {
    Stats s;
    Graph out = eliminate_dead_code(simplify(g, s), s);
    out = fuse_sibling_products(out, s);  // after dead code: a product that nothing reads joins no siblings
    out = eliminate_dead_code(out, s);    // the products the fusion replaced
    if (stats) *stats = s;
    return out;
}

}  // namespace mn::optimize
