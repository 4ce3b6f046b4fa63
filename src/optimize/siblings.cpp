// Horizontal fusion of sibling products: linear layers that read the same input, as a transformer
// block's q, k and v projections do (x @ Wq^T, x @ Wk^T, x @ Wv^T), become one product over their
// weights stacked by rows, x @ [Wq; Wk; Wv]^T, each sibling the slice of its columns. One dispatch
// instead of three, and in a decode step one GEMV reading x once; the product's kernel stores each
// slice as a tensor of its own (schedule/fusion.hpp), so what reads q, k and v reads what it read.
//
// Only in a program that does not train (no assignment of a parameter): there the stacked weight
// depends on parameters alone, so its copies are hoisted (schedule/hoist.cpp) and run once, not every
// run. A training step would copy the weights every step, three copies for the two products saved.
//
// Not a product that a pointwise op reads (directly or through reshapes): that op may store through
// the product as its epilogue (a bias, LoRA's delta, the SwiGLU's silu(gate) * up, which the up
// product stores today, one kernel), and it cannot read a column another workgroup computes. So a
// SwiGLU's gate and up stay two products: fused, they would be the product and a pointwise kernel,
// two dispatches again.
#include <map>

#include "optimize/optimize.hpp"
#include "optimize/rebuild.hpp"

namespace mn::optimize {
namespace {

bool read_pointwise(const Graph& g, const std::vector<std::vector<int32_t>>& readers, int32_t id) {
    for (int32_t r : readers[static_cast<size_t>(id)]) {
        const Op op = g.node(r).op;
        if (op_info(op).archetype == Archetype::Pointwise || (op == Op::Reshape && read_pointwise(g, readers, r))) return true;
    }
    return false;
}

}  // namespace

Graph fuse_sibling_products(const Graph& g, Stats& stats) {
    const auto& nodes = g.nodes();
    std::vector<std::vector<int32_t>> readers(nodes.size());
    bool trains = false;
    for (size_t i = 0; i < nodes.size(); ++i) {
        for (int32_t in : nodes[i].inputs) readers[static_cast<size_t>(in)].push_back(static_cast<int32_t>(i));
        trains = trains || (nodes[i].op == Op::Assign && g.node(nodes[i].inputs[0]).op == Op::Parameter);
    }
    // Linear layers of a 2-D input by a parameter, forward ones, grouped by their input in node order.
    std::map<int32_t, std::vector<int32_t>> by_input;
    for (int32_t i = 0; i < static_cast<int32_t>(nodes.size()) && !trains; ++i) {
        const Node& n = g.node(i);
        if (n.op == Op::MatMul && n.ints == std::vector<int64_t>{0, 1} && n.shape.size() == 2 && !n.gradient &&
            g.node(n.inputs[1]).op == Op::Parameter && !read_pointwise(g, readers, i)) {
            by_input[n.inputs[0]].push_back(i);
        }
    }
    std::vector<const std::vector<int32_t>*> group_of(nodes.size(), nullptr);
    for (const auto& [input, members] : by_input) {
        if (members.size() < 2) continue;
        for (int32_t m : members) group_of[static_cast<size_t>(m)] = &members;
        stats.siblings += members.size() - 1;
    }
    // What the copy has for a node already: a weight moved up to its group's product, a sibling's slice.
    std::vector<int32_t> made(nodes.size(), -1);
    return rebuild(g, [&](size_t i, const Node& n, Graph& out) -> int32_t {
        if (made[i] >= 0) return made[i];
        if (!group_of[i]) return kEmit;
        // The group's first product: a later sibling's weight is not in the copy yet, and as a leaf it
        // may come earlier.
        std::vector<Tensor> weights;
        for (int32_t m : *group_of[i]) {
            const int32_t w = g.node(m).inputs[1];
            if (const auto copied = out.find(g.node(w).name)) {
                weights.push_back(*copied);
            } else {
                weights.push_back(out.emit(g.node(w)));
                made[static_cast<size_t>(w)] = weights.back().id;
            }
        }
        const Tensor y = out.matmul(out.handle(n.inputs[0]), out.concat(weights, 0), false, true);
        int64_t at = 0;
        for (int32_t m : *group_of[i]) {
            const int64_t width = g.node(m).shape[1];
            made[static_cast<size_t>(m)] = out.slice(y, 1, at, at + width).id;
            at += width;
        }
        return made[i];
    });
}

}  // namespace mn::optimize
