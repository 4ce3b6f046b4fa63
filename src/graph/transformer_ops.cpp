// Builders of the transformer ops: embedding, the two norms, RoPE and the KV-cache write, plus
// the derivative ops their VJP rules use. Same contract as graph.cpp: check, infer, append.
#include <cmath>

#include "meganeura/graph.hpp"

namespace mn {

namespace {

[[noreturn]] void fail(const char* op, const std::string& what) { throw Error(std::string("[") + op + "] " + what); }

bool is_float(DType t) { return t == DType::F32 || t == DType::F16; }

void check_ids(const char* op, const Node& ids) {
    if (ids.dtype != DType::I32) fail(op, std::string("ids must be i32, got ") + dtype_name(ids.dtype));
}

}  // namespace

Tensor Graph::embedding(Tensor ids, Tensor weight) {
    check(ids, "embedding");
    check(weight, "embedding");
    const Node& ni = node(ids);
    const Node& nw = node(weight);
    check_ids("embedding", ni);
    if (nw.shape.size() != 2 || !is_float(nw.dtype)) {
        fail("embedding", "weight must be float [V, D], got " + shape_str(nw.shape));
    }
    Shape out = ni.shape;
    out.push_back(nw.shape[1]);
    return emit({.op = Op::Embedding, .inputs = {ids.id, weight.id}, .shape = std::move(out), .dtype = nw.dtype});
}

Tensor Graph::embedding_grad(Tensor ids, Tensor upstream, int64_t vocab) {
    check(ids, "embedding_grad");
    check(upstream, "embedding_grad");
    const Node& ni = node(ids);
    const Node& nu = node(upstream);
    check_ids("embedding_grad", ni);
    Shape expect = ni.shape;
    if (nu.shape.empty()) fail("embedding_grad", "upstream must have a feature dim");
    expect.push_back(nu.shape.back());
    if (nu.shape != expect || !is_float(nu.dtype)) {
        fail("embedding_grad", "ids are " + shape_str(ni.shape) + ", upstream is " + shape_str(nu.shape) +
                                   ": expected float " + shape_str(expect));
    }
    if (vocab < 1) fail("embedding_grad", "vocabulary size must be positive, got " + std::to_string(vocab));
    return emit({.op = Op::EmbeddingGrad, .inputs = {ids.id, upstream.id}, .shape = {vocab, nu.shape.back()},
                 .dtype = nu.dtype, .ints = {vocab}});
}

// The norms share one check: x [..., D] float, weight (and bias / upstream) of D or of x's shape.
Tensor Graph::norm(Op op, Tensor x, Tensor weight, std::optional<Tensor> third, double eps) {
    const char* name = op_info(op).name;
    check(x, name);
    check(weight, name);
    const Node& nx = node(x);
    const Node& nw = node(weight);
    if (nx.shape.empty() || !is_float(nx.dtype)) fail(name, "x must be a float tensor [..., D], got " + shape_str(nx.shape));
    const Shape d{nx.shape.back()};
    if (nw.shape != d || nw.dtype != nx.dtype) {
        fail(name, "x is " + shape_str(nx.shape) + ", weight is " + shape_str(nw.shape) + ": expected " + shape_str(d));
    }
    const bool grad = op == Op::RmsNormGrad || op == Op::LayerNormGrad;
    std::vector<int32_t> inputs = {x.id, weight.id};
    if (third) {
        check(*third, name);
        const Node& nt = node(*third);
        const Shape& want = grad ? nx.shape : d;
        if (nt.shape != want || nt.dtype != nx.dtype) {
            fail(name, "x is " + shape_str(nx.shape) + ", " + (grad ? "upstream" : "bias") + " is " +
                           shape_str(nt.shape) + ": expected " + shape_str(want));
        }
        inputs.push_back(third->id);
    }
    if (!(eps >= 0)) fail(name, "eps must be >= 0");
    return emit({.op = op, .inputs = std::move(inputs), .shape = nx.shape, .dtype = nx.dtype, .data = {eps}});
}

Tensor Graph::rms_norm(Tensor x, Tensor weight, double eps) { return norm(Op::RmsNorm, x, weight, std::nullopt, eps); }
Tensor Graph::layer_norm(Tensor x, Tensor weight, Tensor bias, double eps) { return norm(Op::LayerNorm, x, weight, bias, eps); }
Tensor Graph::rms_norm_grad(Tensor x, Tensor weight, Tensor upstream, double eps) {
    return norm(Op::RmsNormGrad, x, weight, upstream, eps);
}
Tensor Graph::layer_norm_grad(Tensor x, Tensor weight, Tensor upstream, double eps) {
    return norm(Op::LayerNormGrad, x, weight, upstream, eps);
}

Tensor Graph::rope_rotate(Tensor x, Tensor positions, Tensor inv_freq, bool inverse) {
    check(x, "rope");
    check(positions, "rope");
    check(inv_freq, "rope");
    const Node& nx = node(x);
    const Node& np = node(positions);
    if (nx.shape.size() < 2 || !is_float(nx.dtype) || nx.shape.back() % 2 != 0) {
        fail("rope", "x must be float [..., T, D] with D even, got " + shape_str(nx.shape));
    }
    const int64_t t = nx.shape[nx.shape.size() - 2];
    if (np.dtype != DType::I32 || np.shape != Shape{t}) {
        fail("rope", "x is " + shape_str(nx.shape) + ", positions are " + std::string(dtype_name(np.dtype)) +
                         shape_str(np.shape) + ": expected i32 (" + std::to_string(t) + ")");
    }
    if (node(inv_freq).shape != Shape{nx.shape.back() / 2} || node(inv_freq).dtype != nx.dtype) {
        fail("rope", "inv_freq is " + shape_str(node(inv_freq).shape) + ", expected (" +
                         std::to_string(nx.shape.back() / 2) + ")");
    }
    return emit({.op = Op::Rope, .inputs = {x.id, positions.id, inv_freq.id}, .shape = nx.shape, .dtype = nx.dtype,
                 .flag = inverse});
}

// inv_freq[i] = 1 / theta^(2i / D), rounded to f32 as Hugging Face computes it in float32.
Tensor Graph::rope(Tensor x, Tensor positions, double theta) {
    check(x, "rope");
    const Shape xs = x.shape();
    if (xs.empty() || xs.back() % 2 != 0) fail("rope", "x must be [..., T, D] with D even, got " + shape_str(xs));
    if (!(theta > 0)) fail("rope", "theta must be positive");
    const int64_t d = xs.back();
    std::vector<double> inv_freq;
    for (int64_t i = 0; i < d / 2; ++i) {
        const float exponent = static_cast<float>(2 * i) / static_cast<float>(d);
        inv_freq.push_back(static_cast<float>(1.0 / std::pow(theta, static_cast<double>(exponent))));
    }
    return rope_rotate(x, positions, constant(std::move(inv_freq), {d / 2}, x.dtype()), false);
}

Tensor Graph::slice_scatter(Tensor x, Tensor src, int64_t axis, Tensor start) {
    check(x, "slice_scatter");
    check(src, "slice_scatter");
    check(start, "slice_scatter");
    const Node& nx = node(x);
    const Node& ns = node(src);
    const Node& nt = node(start);
    const auto rank = static_cast<int64_t>(nx.shape.size());
    if (axis < -rank || axis >= rank) fail("slice_scatter", "axis " + std::to_string(axis) + " is out of range for " + shape_str(nx.shape));
    if (axis < 0) axis += rank;
    Shape probe = ns.shape;
    if (probe.size() == nx.shape.size()) probe[static_cast<size_t>(axis)] = nx.shape[static_cast<size_t>(axis)];
    if (probe != nx.shape || ns.dtype != nx.dtype || ns.shape[static_cast<size_t>(axis)] > nx.shape[static_cast<size_t>(axis)]) {
        fail("slice_scatter", "x is " + shape_str(nx.shape) + ", src is " + shape_str(ns.shape) +
                                  ": they must agree outside axis " + std::to_string(axis) + " and src must fit");
    }
    if (nt.dtype != DType::I32 || !nt.shape.empty()) fail("slice_scatter", "start must be an i32 scalar");
    return emit({.op = Op::SliceScatter, .inputs = {x.id, src.id, start.id}, .shape = nx.shape, .dtype = nx.dtype,
                 .ints = {axis}});
}

}  // namespace mn
