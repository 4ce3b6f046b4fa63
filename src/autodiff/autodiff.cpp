// Reverse-mode autodiff. Walks the graph backwards from the loss, applying one short VJP rule per
// op, written with the graph's own builder calls (so backward graphs are ordinary graphs that
// every later pass and the reference understand). Only nodes that lie on a path from a wanted
// input to the loss are visited, so branches that reach no parameter are never built.
#include "meganeura/autodiff.hpp"

#include <cmath>
#include <numeric>

namespace mn {

namespace {

// Sums a broadcast gradient back down to `shape` (the inverse of NumPy broadcasting).
Tensor sum_to(Graph& g, Tensor grad, Shape shape) {  // by value: new nodes may reallocate
    const Shape gs = grad.shape();  // a copy, likewise
    if (gs == shape) return grad;
    const size_t lead = gs.size() - shape.size();
    std::vector<int64_t> axes;
    for (size_t d = 0; d < gs.size(); ++d) {
        if (d < lead || (shape[d - lead] == 1 && gs[d] != 1)) axes.push_back(static_cast<int64_t>(d));
    }
    Tensor summed = axes.empty() ? grad : g.sum(grad, axes, false);
    return g.reshape(summed, shape);
}

// Broadcasts a reduction's gradient back over the reduced axes of `in_shape`.
Tensor unreduce(Graph& g, Tensor grad, const Node& n, Shape in_shape) {
    Shape kept = in_shape;
    for (int64_t a : n.ints) kept[static_cast<size_t>(a)] = 1;
    return g.expand(g.reshape(grad, kept), in_shape);
}

using Grads = std::vector<std::optional<Tensor>>;  // one per input; empty where none flows

Tensor slice_vjp(Graph& g, const Node& n, Shape in_shape, Tensor gy);
Grads attention_vjp(Graph& g, int32_t id, const Node& n, Tensor gy, const std::vector<bool>& need);

Tensor arange_i32(Graph& g, int64_t n) {
    std::vector<double> v(static_cast<size_t>(n));
    std::iota(v.begin(), v.end(), 0.0);
    return g.constant(std::move(v), {n}, DType::I32);
}

// Rows [start, start + len) of x along `axis`, start an i32 scalar known only at run time: a
// one-hot selection matrix S [len, dim], S[j, i] = (i == start + j), applied along the axis
// (exact: every output is one input times 1 plus zeros).
Tensor rows_at(Graph& g, Tensor x, int64_t axis, Tensor start, int64_t len) {
    const Shape s = x.shape();
    const auto a = static_cast<size_t>(axis);
    const Tensor wanted = g.reshape(arange_i32(g, len) + start, {len, 1});
    const Tensor select = g.cast(g.equal(g.reshape(arange_i32(g, s[a]), {1, s[a]}), wanted), x.dtype());
    std::vector<int64_t> perm = {axis}, inverse(s.size());
    for (size_t d = 0; d < s.size(); ++d) if (d != a) perm.push_back(static_cast<int64_t>(d));
    for (size_t d = 0; d < perm.size(); ++d) inverse[static_cast<size_t>(perm[d])] = static_cast<int64_t>(d);
    Shape moved = {len};
    for (size_t d = 1; d < perm.size(); ++d) moved.push_back(s[static_cast<size_t>(perm[d])]);
    const Tensor rows = g.matmul(select, g.reshape(g.permute(x, perm), {s[a], -1}));
    return g.permute(g.reshape(rows, moved), inverse);
}

// The VJP of node `id` (a copy: the rule appends nodes) given its output gradient `gy`. Only the
// inputs `need` marks get a gradient built: the others lead to no wanted tensor.
Grads vjp(Graph& g, int32_t id, const Node& n, Tensor gy, const std::vector<bool>& need) {
    auto in = [&](size_t k) { return g.handle(n.inputs[k]); };
    // Builds input k's gradient only when it is needed.
    auto only = [&](size_t k, auto make) -> std::optional<Tensor> {
        return need[k] ? std::optional<Tensor>(make()) : std::nullopt;
    };
    Tensor y = g.handle(id);
    auto c = [&](double v) { return g.scalar(v, n.dtype); };
    switch (n.op) {
        case Op::Neg: return {-gy};
        case Op::Exp: return {gy * y};
        case Op::Log: return {gy / in(0)};
        case Op::Sqrt: return {gy / (y * 2.0)};
        case Op::Rsqrt: return {gy * (y * y * y) * -0.5};
        case Op::Abs: return {gy * g.sign(in(0))};
        // The mask from the output (relu(x) > 0 exactly where x > 0): the input then has no reader left after
        // the forward, so the ReLU fuses into its producer's epilogue (a convolution's, a matmul's).
        case Op::Relu: return {gy * g.greater(y, c(0))};
        case Op::Sigmoid: return {gy * y * (c(1) - y)};
        case Op::Tanh: return {gy * (c(1) - y * y)};
        case Op::Silu: {
            Tensor s = g.sigmoid(in(0));
            return {gy * (s + in(0) * s * (c(1) - s))};
        }
        case Op::GeluErf: return {gy * g.gelu_deriv(in(0), "none")};
        case Op::GeluTanh: return {gy * g.gelu_deriv(in(0), "tanh")};
        case Op::Cast: return {g.cast(gy, in(0).dtype())};
        case Op::Sign: case Op::Greater: case Op::Equal: return Grads(n.inputs.size());  // zero a.e.
        case Op::Add:
            return {only(0, [&] { return sum_to(g, gy, in(0).shape()); }), only(1, [&] { return sum_to(g, gy, in(1).shape()); })};
        case Op::Sub:
            return {only(0, [&] { return sum_to(g, gy, in(0).shape()); }), only(1, [&] { return sum_to(g, -gy, in(1).shape()); })};
        case Op::Mul:
            return {only(0, [&] { return sum_to(g, gy * in(1), in(0).shape()); }),
                    only(1, [&] { return sum_to(g, gy * in(0), in(1).shape()); })};
        case Op::Div:
            return {only(0, [&] { return sum_to(g, gy / in(1), in(0).shape()); }),
                    only(1, [&] { return sum_to(g, -(gy * y / in(1)), in(1).shape()); })};
        case Op::Maximum: case Op::Minimum: {
            // Ties split the gradient evenly, as PyTorch does.
            Tensor a_wins = n.op == Op::Maximum ? g.greater(in(0), in(1)) : g.greater(in(1), in(0));
            Tensor mask = a_wins + g.equal(in(0), in(1)) * 0.5;
            return {only(0, [&] { return sum_to(g, gy * mask, in(0).shape()); }),
                    only(1, [&] { return sum_to(g, gy * (c(1) - mask), in(1).shape()); })};
        }
        case Op::Pow: {
            return {only(0, [&] { return sum_to(g, gy * in(1) * g.pow(in(0), in(1) - 1.0), in(0).shape()); }),
                    only(1, [&] { return sum_to(g, gy * y * g.log(in(0)), in(1).shape()); })};
        }
        case Op::MatMul: {
            const bool ta = n.ints[0] != 0, tb = n.ints[1] != 0;
            Tensor a = in(0), b = in(1);
            return {only(0, [&] { return sum_to(g, ta ? g.matmul(b, gy, tb, true) : g.matmul(gy, b, false, !tb), a.shape()); }),
                    only(1, [&] { return sum_to(g, tb ? g.matmul(gy, a, true, ta) : g.matmul(a, gy, !ta, false), b.shape()); })};
        }
        case Op::Conv2d: {
            Tensor x = in(0), w = in(1);
            return {only(0, [&] { return g.conv2d_grad_input(gy, w, x.shape(), n.ints); }),
                    only(1, [&] { return g.conv2d_grad_weight(x, gy, w.shape(), n.ints); })};
        }
        case Op::MaxPool2d: return {g.max_pool2d_grad(in(0), gy, n.ints[0], n.ints[1], n.ints[2])};
        case Op::Sum: return {unreduce(g, gy, n, in(0).shape())};
        case Op::Mean: {
            int64_t count = 1;
            for (int64_t a : n.ints) count *= in(0).shape()[static_cast<size_t>(a)];
            return {unreduce(g, gy, n, in(0).shape()) / static_cast<double>(count)};
        }
        case Op::Max: {
            // Ties share the gradient evenly (torch.amax semantics).
            Tensor hit = g.equal(in(0), unreduce(g, y, n, in(0).shape()));
            Tensor count = unreduce(g, g.sum(hit, n.ints, n.flag), n, in(0).shape());
            return {unreduce(g, gy, n, in(0).shape()) * hit / count};
        }
        case Op::Softmax: {
            const int64_t a = n.ints[0];
            return {y * (gy - g.sum(gy * y, {a}, true))};
        }
        case Op::LogSoftmax: {
            const int64_t a = n.ints[0];
            return {gy - g.exp(y) * g.sum(gy, {a}, true)};
        }
        case Op::CrossEntropy: return {g.cross_entropy_grad(in(0), in(1), gy, n.ints[0]), std::nullopt};
        case Op::MseLoss: {
            Tensor ga = (in(0) - in(1)) * (gy * (2.0 / static_cast<double>(numel(in(0).shape()))));
            return {only(0, [&] { return ga; }), only(1, [&] { return -ga; })};
        }
        case Op::Attention: return attention_vjp(g, id, n, gy, need);
        case Op::Reshape: return {g.reshape(gy, in(0).shape())};
        case Op::Permute: {
            std::vector<int64_t> inverse(n.ints.size());
            for (size_t i = 0; i < n.ints.size(); ++i) inverse[static_cast<size_t>(n.ints[i])] = static_cast<int64_t>(i);
            return {g.permute(gy, inverse)};
        }
        case Op::Slice: return {slice_vjp(g, n, in(0).shape(), gy)};
        case Op::Concat: {
            Grads out;
            const int64_t axis = n.ints[0];
            int64_t at = 0;
            for (size_t k = 0; k < n.inputs.size(); ++k) {
                const int64_t len = in(k).shape()[static_cast<size_t>(axis)];
                out.push_back(only(k, [&] { return g.slice(gy, axis, at, at + len); }));
                at += len;
            }
            return out;
        }
        case Op::Expand: return {sum_to(g, gy, in(0).shape())};
        case Op::Embedding: return {std::nullopt, g.embedding_grad(in(0), gy, in(1).shape()[0])};
        case Op::RmsNorm: case Op::LayerNorm: {
            // d / d weight (and bias) sum over rows: the normalized x with unit weight, times gy.
            const Shape d{in(0).shape().back()};
            const double eps = n.data[0];
            const bool layer = n.op == Op::LayerNorm;
            Grads out = {only(0, [&] { return layer ? g.layer_norm_grad(in(0), in(1), gy, eps)
                                                    : g.rms_norm_grad(in(0), in(1), gy, eps); }),
                         only(1, [&] {
                             const Tensor ones = g.full(d, 1.0, n.dtype);
                             const Tensor xhat = layer ? g.layer_norm(in(0), ones, g.full(d, 0.0, n.dtype), eps)
                                                       : g.rms_norm(in(0), ones, eps);
                             return sum_to(g, gy * xhat, d);
                         })};
            if (layer) out.push_back(only(2, [&] { return sum_to(g, gy, d); }));
            return out;
        }
        case Op::GroupNorm: {
            // d / d weight and bias sum over images and pixels, per channel: the normalized x times gy, and gy.
            const int64_t groups = n.ints[0];
            const double eps = n.data[0];
            const Shape c{in(0).shape()[1]};
            std::vector<int64_t> per_channel{0};
            for (size_t d = 2; d < in(0).shape().size(); ++d) per_channel.push_back(static_cast<int64_t>(d));
            return {only(0, [&] { return g.group_norm_grad(in(0), groups, in(1), gy, eps); }),
                    only(1, [&] {
                        const Tensor xhat = g.group_norm(in(0), groups, g.full(c, 1.0, n.dtype), g.full(c, 0.0, n.dtype), eps);
                        return g.sum(gy * xhat, per_channel);
                    }),
                    only(2, [&] { return g.sum(gy, per_channel); })};
        }
        case Op::Rope: return {g.rope_rotate(gy, in(1), in(2), !n.flag), std::nullopt, std::nullopt};  // R^T = R(-angle)
        case Op::SliceScatter: {
            const int64_t axis = n.ints[0];
            return {only(0, [&] { return g.slice_scatter(gy, g.full(in(1).shape(), 0.0, n.dtype), axis, in(2)); }),
                    only(1, [&] { return rows_at(g, gy, axis, in(2), in(1).shape()[static_cast<size_t>(axis)]); }),
                    std::nullopt};
        }
        // ops.def's NoVjp: leaves, derivatives and writes of storage (grad refuses them before it gets here)
        case Op::Input: case Op::Parameter: case Op::Constant: case Op::State:
        case Op::GeluErfDeriv: case Op::GeluTanhDeriv: case Op::CrossEntropyGrad: case Op::Assign:
        case Op::EmbeddingGrad: case Op::RmsNormGrad: case Op::LayerNormGrad: case Op::GroupNormGrad:
        case Op::Conv2dGradInput: case Op::Conv2dGradWeight: case Op::MaxPool2dGrad:
        case Op::AttentionLse: case Op::AttentionGradQ: case Op::AttentionGradK: case Op::AttentionGradV:
            break;
    }
    throw Error(std::string("[grad] no VJP rule for op ") + op_info(n.op).name);
}

// Slice of one axis (start, step): the gradient is gy scattered into zeros. Built from concat:
// interleave step-1 zero rows after each gradient row, trim, then pad before and after.
Tensor slice_vjp(Graph& g, const Node& n, Shape in_shape, Tensor gy) {
    const size_t rank = in_shape.size();
    size_t axis = 0;
    for (size_t d = 0; d < rank; ++d) {
        if (n.ints[d] != 0 || n.ints[rank + d] != in_shape[d] || n.ints[2 * rank + d] != 1) axis = d;
    }
    const int64_t start = n.ints[axis], step = n.ints[2 * rank + axis];
    const int64_t count = gy.shape()[axis];
    const auto ax = static_cast<int64_t>(axis);
    auto zeros = [&](int64_t len, Shape s) {
        s[axis] = len;
        return g.full(std::move(s), 0.0, gy.dtype());
    };
    Tensor spread = gy;
    if (step > 1 && count > 0) {
        Shape rows = gy.shape();
        rows.insert(rows.begin() + ax + 1, 1);
        Shape gaps = rows;
        gaps[axis + 1] = step - 1;
        Shape merged = gy.shape();
        merged[axis] = count * step;
        spread = g.concat({g.reshape(gy, rows), g.full(gaps, 0.0, gy.dtype())}, ax + 1);
        spread = g.slice(g.reshape(spread, merged), ax, 0, (count - 1) * step + 1);
    }
    const int64_t covered = spread.shape()[axis];
    std::vector<Tensor> parts;
    if (start > 0) parts.push_back(zeros(start, in_shape));
    parts.push_back(spread);
    const int64_t after = in_shape[axis] - start - covered;
    if (after > 0) parts.push_back(zeros(after, in_shape));
    return parts.size() == 1 ? spread : g.concat(parts, ax);
}

// Attention: the forward's per-row logsumexp (a companion node the forward kernel writes too)
// lets the backward kernels recompute the probabilities tile by tile instead of storing them.
// dK and dV come from one kernel; query_start gets no gradient. dK and dV are appended before dQ: lowered in
// graph order, their kernel comes first, and where it stores dS, dQ is a matmul of it (codegen::grad_q_from_scores).
Grads attention_vjp(Graph& g, int32_t id, const Node& n, Tensor gy, const std::vector<bool>& need) {
    const Shape& q = g.node(n.inputs[0]).shape;
    const Tensor lse = g.emit({.op = Op::AttentionLse, .inputs = n.inputs, .shape = {q[0], q[1], q[2]},
                               .dtype = DType::F32, .ints = n.ints, .data = n.data});
    std::vector<int32_t> inputs = {n.inputs[0], n.inputs[1], n.inputs[2], id, gy.id, lse.id};
    if (n.inputs.size() == 4) inputs.push_back(n.inputs[3]);
    Grads out(n.inputs.size());
    const Op ops[] = {Op::AttentionGradQ, Op::AttentionGradK, Op::AttentionGradV};
    for (size_t k : {1, 2, 0}) {
        if (!need[k]) continue;
        const Node& x = g.node(n.inputs[k]);
        out[k] = g.emit({.op = ops[k], .inputs = inputs, .shape = x.shape, .dtype = x.dtype, .ints = n.ints, .data = n.data});
    }
    return out;
}

}  // namespace

bool has_vjp_rule(Op op) { return op_info(op).differentiable; }

std::vector<Tensor> grad(Tensor loss, const std::vector<Tensor>& wrt) {
    if (!loss.valid()) throw Error("[grad] loss is not a tensor");
    Graph& g = *loss.graph;
    if (!loss.shape().empty()) throw Error("[grad] loss must be a scalar, got shape " + shape_str(loss.shape()));
    const auto count = static_cast<size_t>(loss.id) + 1;
    const auto first = static_cast<int32_t>(g.nodes().size());  // what this call appends is a gradient's

    // On a path: depends on some wanted input, and the loss depends on it.
    std::vector<bool> from_wrt(count, false), to_loss(count, false);
    for (Tensor w : wrt) {
        if (w.graph != &g) throw Error("[grad] a wanted tensor belongs to another graph");
        if (static_cast<size_t>(w.id) < count) from_wrt[static_cast<size_t>(w.id)] = true;
    }
    for (size_t i = 0; i < count; ++i) {
        for (int32_t in : g.node(static_cast<int32_t>(i)).inputs) {
            if (from_wrt[static_cast<size_t>(in)]) from_wrt[i] = true;
        }
    }
    to_loss[count - 1] = true;
    for (size_t i = count; i-- > 0;) {
        if (!to_loss[i]) continue;
        for (int32_t in : g.node(static_cast<int32_t>(i)).inputs) to_loss[static_cast<size_t>(in)] = true;
    }

    std::vector<std::optional<Tensor>> adjoint(count);
    adjoint[count - 1] = g.scalar(1.0, loss.dtype());
    for (size_t i = count; i-- > 0;) {
        if (!adjoint[i] || !from_wrt[i] || g.node(static_cast<int32_t>(i)).inputs.empty()) continue;
        const Node n = g.node(static_cast<int32_t>(i));  // a copy: rules append nodes
        if (!has_vjp_rule(n.op)) throw Error(std::string("[grad] no VJP rule for op ") + op_info(n.op).name);
        std::vector<bool> need(n.inputs.size());
        for (size_t k = 0; k < n.inputs.size(); ++k) {
            need[k] = from_wrt[static_cast<size_t>(n.inputs[k])] && to_loss[static_cast<size_t>(n.inputs[k])];
        }
        const Grads grads = vjp(g, static_cast<int32_t>(i), n, *adjoint[i], need);
        for (size_t k = 0; k < n.inputs.size(); ++k) {
            const auto in = static_cast<size_t>(n.inputs[k]);
            if (!grads[k] || !from_wrt[in] || !to_loss[in]) continue;
            adjoint[in] = adjoint[in] ? g.add(*adjoint[in], *grads[k]) : *grads[k];
        }
    }
    std::vector<Tensor> out;
    for (Tensor w : wrt) {
        const auto id = static_cast<size_t>(w.id);
        out.push_back(id < count && adjoint[id] ? *adjoint[id] : g.full(w.shape(), 0.0, w.dtype()));
    }
    g.mark_gradients(first);
    return out;
}

}  // namespace mn
