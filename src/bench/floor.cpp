#include "bench/floor.hpp"

#include <algorithm>
#include <set>

#include "schedule/schedule.hpp"

namespace mn::bench {
namespace {

uint64_t bytes_of(const Node& n) { return static_cast<uint64_t>(numel(n.shape)) * dtype_size(n.dtype); }

// (query, key) pairs an attention node computes: all of them, or under a causal mask (and a sliding
// window) those a query row sees, its row 0 at key Tk - Tq (a run-time query_start is not known here).
double visible_pairs(const Graph& g, const Node& n) {
    const Shape& q = g.node(n.inputs[0]).shape;
    const Shape& k = g.node(n.inputs[1]).shape;
    const int64_t tq = q[q.size() - 2], tk = k[k.size() - 2];
    const double rows = double(numel(q)) / double(q.back() * tq);  // batch · heads
    if (!n.ints[0]) return rows * double(tq) * double(tk);
    double pairs = 0;
    for (int64_t i = 0; i < tq; ++i) {
        const int64_t last = std::min(tk - 1, tk - tq + i);
        const int64_t first = n.ints[1] > 0 ? std::max<int64_t>(0, last - n.ints[1] + 1) : 0;
        pairs += double(std::max<int64_t>(0, last - first + 1));
    }
    return rows * pairs;
}

double product_flops(const Graph& g, const Node& n) {
    switch (n.op) {
        case Op::MatMul:
            return 2.0 * sched::matmul_multiply_adds(g, n);
        case Op::Conv2d:
        case Op::Conv2dGradInput:
        case Op::Conv2dGradWeight: {
            // The forward's output and the weight: {x, weight}, {gy, weight} or {x, gy}.
            const Shape& w = n.op == Op::Conv2dGradWeight ? n.shape : g.node(n.inputs[1]).shape;
            const Shape& y = n.op == Op::Conv2d ? n.shape : g.node(n.inputs[n.op == Op::Conv2dGradWeight ? 1 : 0]).shape;
            return 2.0 * double(numel(y)) * double(numel(w) / w[0]);
        }
        case Op::Attention:
        case Op::AttentionGradQ:  // dP = dO·Vᵀ and dS·K
            return 4.0 * visible_pairs(g, n) * double(n.shape.back());
        case Op::AttentionGradK:  // dSᵀ·Q
        case Op::AttentionGradV:  // Pᵀ·dO
            return 2.0 * visible_pairs(g, n) * double(n.shape.back());
        // no product of its own: AttentionLse comes with the forward; the rest moves bytes
        case Op::Input: case Op::Parameter: case Op::Constant: case Op::State: case Op::Neg: case Op::Exp:
        case Op::Log: case Op::Sqrt: case Op::Rsqrt: case Op::Abs: case Op::Relu: case Op::Sigmoid: case Op::Tanh:
        case Op::Silu: case Op::GeluErf: case Op::GeluTanh: case Op::Cast: case Op::Sign: case Op::GeluErfDeriv:
        case Op::GeluTanhDeriv: case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Maximum:
        case Op::Minimum: case Op::Pow: case Op::Greater: case Op::Equal: case Op::Sum: case Op::Mean: case Op::Max:
        case Op::Softmax: case Op::LogSoftmax: case Op::CrossEntropy: case Op::MseLoss: case Op::CrossEntropyGrad:
        case Op::AttentionLse: case Op::Reshape: case Op::Permute: case Op::Slice: case Op::Concat: case Op::Expand:
        case Op::Assign: case Op::Embedding: case Op::EmbeddingGrad: case Op::RmsNorm: case Op::LayerNorm:
        case Op::RmsNormGrad: case Op::LayerNormGrad: case Op::GroupNorm: case Op::GroupNormGrad: case Op::Rope:
        case Op::SliceScatter: case Op::MaxPool2d: case Op::MaxPool2dGrad:
            break;
    }
    return 0;
}

// The value a view node shows: reshapes, permutes and broadcasts move nothing in a floor.
int32_t storage_of(const Graph& g, int32_t id) {
    for (Op op = g.node(id).op; op == Op::Reshape || op == Op::Permute || op == Op::Expand; op = g.node(id).op) {
        id = g.node(id).inputs[0];
    }
    return id;
}

}  // namespace

Floor count_floor(const Graph& g, bool backward, bool adamw) {
    Floor f;
    std::set<int32_t> outputs, kept;
    for (const auto& [name, id] : g.outputs()) outputs.insert(storage_of(g, id));
    for (int32_t id = 0; id < static_cast<int32_t>(g.nodes().size()); ++id) {
        const Node& n = g.node(id);
        f.product_flops += product_flops(g, n);
        if (n.op == Op::Parameter) f.weight_bytes += bytes_of(n);
        if (n.op == Op::Input) f.input_bytes += bytes_of(n);
        if (!backward || !n.gradient) continue;
        for (int32_t in : n.inputs) {  // a forward value the backward reads is kept
            const int32_t s = storage_of(g, in);
            if (!g.node(s).gradient && op_info(g.node(s).op).archetype != Archetype::Leaf) kept.insert(s);
        }
    }
    for (int32_t id : outputs) f.output_bytes += bytes_of(g.node(id));
    if (backward) f.output_bytes += f.weight_bytes;  // a gradient per parameter
    // A kept value is written in the forward and read by the backward; an output is written anyway.
    for (int32_t id : kept) f.activation_bytes += bytes_of(g.node(id)) * (outputs.count(id) ? 1 : 2);
    if (adamw) f.optimizer_bytes = 6 * f.weight_bytes;  // gradients read, m and v read and written, weights written
    return f;
}

nlohmann::json to_json(const Floor& f) {
    return {{"product_flops", f.product_flops},
            {"bytes", f.bytes()},
            {"weight_bytes", f.weight_bytes},
            {"input_bytes", f.input_bytes},
            {"output_bytes", f.output_bytes},
            {"activation_bytes", f.activation_bytes},
            {"optimizer_bytes", f.optimizer_bytes}};
}

}  // namespace mn::bench
