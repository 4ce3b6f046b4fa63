// Horizontal fusion of sibling products: linear layers that read the same input, as a transformer
// block's q, k and v projections do (x @ Wq^T, x @ Wk^T, x @ Wv^T), become one product over their
// weights stacked by rows, x @ [Wq; Wk; Wv]^T, each sibling the slice of its columns. One dispatch
// instead of three, and in a decode step one GEMV reading x once; the product's kernel stores each
// slice as a tensor of its own (schedule/fusion.hpp), so what reads q, k and v reads what it read.
//
// Linear layers with biases (Whisper's q and v, Qwen2's q, k and v) join as well: the stacked product adds the biases
// stacked the same way (zeros for a sibling without one), x @ [Wq; Wk; Wv]^T + [bq; 0; bv], and each sibling's bias
// add is the slice of that sum. The product stores the sum as its epilogue and the slices as before: one dispatch
// where each biased product was one.
//
// The stacked weights (and biases) are no copies where their bytes can lie one after another, each a multiple of 256
// bytes (the binding alignment of every device we know): the lowering makes each weight a part of the stack's bytes
// (schedule's Lowering::stack_leaves), in a training step as in inference. Elsewhere they are copies: hoisted in a
// program that does not train (schedule/hoist.cpp), run once; a training step would copy them every step, so it
// stacks only what the lowering will not copy.
//
// Not a product that another pointwise op reads (directly or through reshapes; after its bias, if it has one): that op
// may store through the product as its epilogue (an activation, LoRA's delta, the SwiGLU's silu(gate) * up, which the
// up product stores today, one kernel), and it cannot read a column another workgroup computes. So a SwiGLU's gate and
// up stay two products: fused, they would be the product and a pointwise kernel, two dispatches again.
#include <algorithm>
#include <map>

#include "optimize/optimize.hpp"
#include "optimize/rebuild.hpp"

namespace mn::optimize {
namespace {

using Readers = std::vector<std::vector<int32_t>>;

constexpr uint64_t kStackAlignment = 256;  // bytes: the largest storage-buffer offset alignment of a device we know

bool read_pointwise(const Graph& g, const Readers& readers, int32_t id) {
    for (int32_t r : readers[static_cast<size_t>(id)]) {
        const Op op = g.node(r).op;
        if (op_info(op).archetype == Archetype::Pointwise || (op == Op::Reshape && read_pointwise(g, readers, r))) return true;
    }
    return false;
}

// A linear layer's product and the bias it adds: the chain from the product through the reshapes that alone read it
// (a linear layer of a 3-D input views its rows back) to add(view, b), b a parameter of the product's columns.
struct Linear {
    int32_t product = -1;
    std::vector<int32_t> chain;  // the product and its views
    int32_t add = -1, bias = -1;  // -1: no bias
};

Linear linear_of(const Graph& g, const Readers& readers, const std::vector<bool>& is_output, int32_t product) {
    Linear l{.product = product, .chain = {product}};
    const int64_t width = g.node(product).shape[1];
    for (int32_t at = product;;) {
        const auto& r = readers[static_cast<size_t>(at)];
        if (is_output[static_cast<size_t>(at)] || r.size() != 1) return l;
        const Node& next = g.node(r[0]);
        if (next.op == Op::Reshape && next.shape.back() == width) {
            l.chain.push_back(at = r[0]);
            continue;
        }
        const int32_t other = next.op == Op::Add && next.inputs[0] == at ? next.inputs[1] : next.inputs[0];
        const Node& b = g.node(other);
        if (next.op == Op::Add && next.inputs[0] != next.inputs[1] && next.shape == g.node(at).shape &&
            b.op == Op::Parameter && b.shape == Shape{width} && b.dtype == next.dtype) {
            l.add = r[0], l.bias = other;
        }
        return l;
    }
}

}  // namespace

Graph fuse_sibling_products(const Graph& g, Stats& stats) {
    const auto& nodes = g.nodes();
    Readers readers(nodes.size());
    std::vector<bool> is_output(nodes.size(), false);
    for (const auto& [name, id] : g.outputs()) is_output[static_cast<size_t>(id)] = true;
    bool trains = false;
    for (size_t i = 0; i < nodes.size(); ++i) {
        for (int32_t in : nodes[i].inputs) readers[static_cast<size_t>(in)].push_back(static_cast<int32_t>(i));
        trains = trains || (nodes[i].op == Op::Assign && g.node(nodes[i].inputs[0]).op == Op::Parameter);
    }
    // Linear layers of a 2-D input by a parameter, forward ones, grouped by their input in node order.
    std::map<int32_t, std::vector<Linear>> by_input;
    for (int32_t i = 0; i < static_cast<int32_t>(nodes.size()); ++i) {
        const Node& n = g.node(i);
        if (n.op != Op::MatMul || n.ints != std::vector<int64_t>{0, 1} || n.shape.size() != 2 || n.gradient ||
            g.node(n.inputs[1]).op != Op::Parameter) {
            continue;
        }
        Linear l = linear_of(g, readers, is_output, i);
        if (!read_pointwise(g, readers, l.add >= 0 ? l.add : i)) by_input[n.inputs[0]].push_back(std::move(l));
    }
    // Whether a stack of the group's weights (and biases, zeros where one has none) is its leaves in place.
    const auto in_place = [&](const std::vector<Linear>& members) {
        const bool biased = std::any_of(members.begin(), members.end(), [](const Linear& m) { return m.add >= 0; });
        return std::all_of(members.begin(), members.end(), [&](const Linear& m) {
            const Node& p = g.node(m.product);
            const uint64_t row = static_cast<uint64_t>(p.shape[1]) * dtype_size(p.dtype);
            return row * static_cast<uint64_t>(g.node(p.inputs[1]).shape[1]) % kStackAlignment == 0 &&
                   (!biased || row % kStackAlignment == 0);
        });
    };
    std::vector<const std::vector<Linear>*> group_of(nodes.size(), nullptr);
    for (const auto& [input, members] : by_input) {
        if (members.size() < 2 || (trains && !in_place(members))) continue;
        for (const Linear& m : members) group_of[static_cast<size_t>(m.product)] = &members;
        stats.siblings += members.size() - 1;
    }
    // What the copy has for a node already: a weight or bias moved up to its group's product, a sibling's slice (or its
    // view, for a bias's add; kDropped for that add's product and views, which nothing else reads).
    std::vector<int32_t> made(nodes.size(), kEmit);
    return rebuild(g, [&](size_t i, const Node& n, Graph& out) -> int32_t {
        if (made[i] != kEmit) return made[i];
        if (!group_of[i]) return kEmit;
        // The group's first product: a later sibling's weight or bias is not in the copy yet, and as a leaf it may
        // come earlier.
        const auto copied = [&](int32_t leaf) {
            if (const auto found = out.find(g.node(leaf).name)) return *found;
            const Tensor t = out.emit(g.node(leaf));
            made[static_cast<size_t>(leaf)] = t.id;
            return t;
        };
        const std::vector<Linear>& group = *group_of[i];
        std::vector<Tensor> weights, biases;
        const bool biased = std::any_of(group.begin(), group.end(), [](const Linear& m) { return m.add >= 0; });
        for (const Linear& m : group) {
            weights.push_back(copied(g.node(m.product).inputs[1]));
            if (biased) {
                const Node& p = g.node(m.product);
                biases.push_back(m.bias >= 0 ? copied(m.bias) : out.full({p.shape[1]}, 0.0, p.dtype));
            }
        }
        Tensor y = out.matmul(out.handle(n.inputs[0]), out.concat(weights, 0), false, true);
        if (biased) y = out.add(y, out.concat(biases, 0));
        int64_t at = 0;
        for (const Linear& m : group) {
            const int64_t width = g.node(m.product).shape[1];
            const Tensor slice = out.slice(y, 1, at, at + width);
            at += width;
            if (m.add < 0) {
                made[static_cast<size_t>(m.product)] = slice.id;
                continue;
            }
            for (int32_t c : m.chain) made[static_cast<size_t>(c)] = kDropped;
            const Shape& shape = g.node(m.add).shape;
            made[static_cast<size_t>(m.add)] = shape.size() == 2 ? slice.id : out.reshape(slice, shape).id;
        }
        return made[i];
    });
}

}  // namespace mn::optimize
