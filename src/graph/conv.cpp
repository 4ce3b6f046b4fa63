// Convolution, normalization, pooling and upsampling builders.
//
// One convolution node serves both public ops: conv2d is the square case of a Conv2d node whose
// attributes keep height and width apart, and conv1d is that node over a height-1 image with a
// 1 x K kernel. Its two derivatives are nodes of their own (implicit GEMMs on the GPU). Batch norm,
// average pooling and upsampling are compositions of existing ops, so they get their kernels and
// their gradients from those ops; group norm (see group_norm_node) and max pooling, whose backward has
// to find each window's argmax again, have nodes of their own.
#include <cmath>

#include "meganeura/graph.hpp"

namespace mn {

namespace {

[[noreturn]] void fail(const char* op, const std::string& what) { throw Error(std::string("[") + op + "] " + what); }

std::string num(int64_t v) { return std::to_string(v); }

// Output length of a convolution or pooling window sweep along one dim; < 1 when nothing fits.
int64_t sweep(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
    const int64_t span = dilation * (kernel - 1) + 1;
    return in + 2 * pad < span ? 0 : (in + 2 * pad - span) / stride + 1;
}

void check_options(const char* op, const ConvOptions& o) {
    if (o.stride < 1 || o.padding < 0 || o.dilation < 1 || o.groups < 1) {
        fail(op, "stride " + num(o.stride) + ", padding " + num(o.padding) + ", dilation " + num(o.dilation) +
                     ", groups " + num(o.groups) + ": need stride, dilation, groups >= 1 and padding >= 0");
    }
}

}  // namespace

// attrs = {stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups}
Shape Graph::conv2d_shape(const char* op, const Shape& x, const Shape& w, const std::vector<int64_t>& attrs) const {
    const int64_t groups = attrs[6];
    if (x.size() != 4 || w.size() != 4) fail(op, "x is " + shape_str(x) + ", weight is " + shape_str(w) + ": need rank 4");
    if (x[1] % groups || w[0] % groups || w[1] * groups != x[1]) {
        fail(op, "x is " + shape_str(x) + ", weight is " + shape_str(w) + ", groups " + num(groups) +
                     ": need weight [O, C / groups, KH, KW] with C and O divisible by groups");
    }
    const int64_t oh = sweep(x[2], w[2], attrs[0], attrs[2], attrs[4]);
    const int64_t ow = sweep(x[3], w[3], attrs[1], attrs[3], attrs[5]);
    if (oh < 1 || ow < 1) {
        fail(op, "x is " + shape_str(x) + ", weight is " + shape_str(w) + ": the dilated kernel does not fit the padded input");
    }
    return {x[0], w[0], oh, ow};
}

Tensor Graph::conv2d_node(Tensor x, Tensor weight, std::vector<int64_t> attrs, const char* op) {
    check(x, op);
    check(weight, op);
    if (x.dtype() != weight.dtype() || x.dtype() == DType::I32) fail(op, "needs float x and weight of one dtype");
    Shape out = conv2d_shape(op, x.shape(), weight.shape(), attrs);
    return emit({.op = Op::Conv2d, .inputs = {x.id, weight.id}, .shape = std::move(out), .dtype = x.dtype(),
                 .ints = std::move(attrs)});
}

// y [N, O, ...] + bias [O], broadcast over the spatial dims.
Tensor Graph::add_channel_bias(Tensor y, std::optional<Tensor> bias, const char* op) {
    if (!bias) return y;
    check(*bias, op);
    const Shape ys = y.shape();
    if (bias->shape() != Shape{ys[1]}) fail(op, "bias is " + shape_str(bias->shape()) + ", expected (" + num(ys[1]) + ")");
    Shape b(ys.size() - 1, 1);
    b[0] = ys[1];
    return add(y, reshape(*bias, b));
}

Tensor Graph::conv2d(Tensor x, Tensor weight, std::optional<Tensor> bias, const ConvOptions& o) {
    check_options("conv2d", o);
    Tensor y = conv2d_node(x, weight, {o.stride, o.stride, o.padding, o.padding, o.dilation, o.dilation, o.groups}, "conv2d");
    return add_channel_bias(y, bias, "conv2d");
}

Tensor Graph::conv1d(Tensor x, Tensor weight, std::optional<Tensor> bias, const ConvOptions& o) {
    check_options("conv1d", o);
    check(x, "conv1d");
    check(weight, "conv1d");
    const Shape xs = x.shape(), ws = weight.shape();
    if (xs.size() != 3 || ws.size() != 3) fail("conv1d", "x is " + shape_str(xs) + ", weight is " + shape_str(ws) + ": need rank 3");
    Tensor y = conv2d_node(reshape(x, {xs[0], xs[1], 1, xs[2]}), reshape(weight, {ws[0], ws[1], 1, ws[2]}),
                           {1, o.stride, 0, o.padding, 1, o.dilation, o.groups}, "conv1d");
    const Shape ys = y.shape();
    return add_channel_bias(reshape(y, {ys[0], ys[1], ys[3]}), bias, "conv1d");
}

Tensor Graph::conv2d_grad_input(Tensor gy, Tensor weight, Shape x_shape, std::vector<int64_t> attrs) {
    check(gy, "conv2d_grad_input");
    check(weight, "conv2d_grad_input");
    if (attrs.size() != 7) fail("conv2d_grad_input", "needs the 7 conv attributes");
    if (conv2d_shape("conv2d_grad_input", x_shape, weight.shape(), attrs) != gy.shape()) {
        fail("conv2d_grad_input", "gy is " + shape_str(gy.shape()) + ", which a conv of " + shape_str(x_shape) +
                                      " with weight " + shape_str(weight.shape()) + " does not produce");
    }
    return emit({.op = Op::Conv2dGradInput, .inputs = {gy.id, weight.id}, .shape = std::move(x_shape),
                 .dtype = gy.dtype(), .ints = std::move(attrs)});
}

Tensor Graph::conv2d_grad_weight(Tensor x, Tensor gy, Shape weight_shape, std::vector<int64_t> attrs) {
    check(x, "conv2d_grad_weight");
    check(gy, "conv2d_grad_weight");
    if (attrs.size() != 7) fail("conv2d_grad_weight", "needs the 7 conv attributes");
    if (conv2d_shape("conv2d_grad_weight", x.shape(), weight_shape, attrs) != gy.shape()) {
        fail("conv2d_grad_weight", "gy is " + shape_str(gy.shape()) + ", which a conv of " + shape_str(x.shape()) +
                                       " with weight " + shape_str(weight_shape) + " does not produce");
    }
    return emit({.op = Op::Conv2dGradWeight, .inputs = {x.id, gy.id}, .shape = std::move(weight_shape),
                 .dtype = x.dtype(), .ints = std::move(attrs)});
}

// ---- normalization ----

namespace {

// [C] -> [1, C, 1, ...] to broadcast over x of rank `rank`.
Tensor per_channel(Graph& g, Tensor v, size_t rank) {
    Shape s(rank, 1);
    s[1] = v.shape()[0];
    return g.reshape(v, s);
}

void check_channels(const char* op, Tensor x, std::initializer_list<Tensor> per_c) {
    const Shape xs = x.shape();
    if (xs.size() < 2) fail(op, "x is " + shape_str(xs) + ": need [N, C, ...]");
    for (Tensor t : per_c) {
        if (t.shape() != Shape{xs[1]}) fail(op, "x is " + shape_str(xs) + ", a per-channel tensor is " + shape_str(t.shape()));
    }
}

}  // namespace

Tensor Graph::batch_norm(Tensor x, Tensor weight, Tensor bias, std::optional<Tensor> running_mean,
                         std::optional<Tensor> running_var, bool training, double momentum, double eps) {
    const char* op = "batch_norm";
    check_channels(op, x, {weight, bias});
    if (running_mean.has_value() != running_var.has_value()) fail(op, "give both running stats or neither");
    if (running_mean) check_channels(op, x, {*running_mean, *running_var});
    if (!training && !running_mean) fail(op, "eval mode needs the running stats");
    const Shape xs = x.shape();
    const size_t rank = xs.size();
    if (!training) {
        // Each value used once, so that the fusion inlines the per-channel scale into the norm's one pointwise
        // kernel (see schedule/fusion.hpp); scale and shift as [C] values of their own would be two kernels more.
        // PyTorch's arithmetic: (x - mean) / sqrt(var + eps) * w + b.
        return (x - per_channel(*this, *running_mean, rank)) *
                   (per_channel(*this, weight, rank) * rsqrt(per_channel(*this, *running_var, rank) + eps)) +
               per_channel(*this, bias, rank);
    }
    std::vector<int64_t> axes{0};
    for (size_t d = 2; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
    const Tensor mean_c = mean(x, axes);  // [C]
    const Tensor centered = x - per_channel(*this, mean_c, rank);
    const Tensor var_c = mean(centered * centered, axes);
    if (running_mean) {
        const double count = static_cast<double>(numel(xs) / xs[1]);
        const double unbias = count > 1 ? count / (count - 1) : 1.0;
        assign(*running_mean, *running_mean * (1 - momentum) + mean_c * momentum);
        assign(*running_var, *running_var * (1 - momentum) + var_c * (momentum * unbias));
    }
    const Tensor scale = weight * rsqrt(var_c + eps);  // [C]
    const Tensor shift = bias - mean_c * scale;
    return x * per_channel(*this, scale, rank) + per_channel(*this, shift, rank);
}

// GroupNorm is a node of its own, not the composition of means and products it once was, for the same
// reason as LayerNorm (DESIGN.md: composite norms keep their own VJP rules): its forward is one kernel,
// the LayerNorm kernel over (image, group) rows with per-channel affine parameters, where the composition
// lowered to five (two means, the centering, the square, the scaling); and its d / d x is one kernel, where
// the composition's backward was a dozen reductions and broadcasts. Recognizing that composition in the
// fusion planner instead would tie the kernel to one spelling of the statistics (after CSE and the
// identities have rewritten it) and leave the backward a chain.
Tensor Graph::group_norm_node(Op op, Tensor x, int64_t groups, Tensor weight, Tensor third, double eps) {
    const char* name = op_info(op).name;
    check(x, name);
    check(weight, name);
    check(third, name);
    const Shape xs = x.shape();
    check_channels(name, x, {weight});
    if (op == Op::GroupNorm) check_channels(name, x, {third});
    if (op == Op::GroupNormGrad && third.shape() != xs) {
        fail(name, "x is " + shape_str(xs) + ", upstream is " + shape_str(third.shape()) + ": expected x's shape");
    }
    if (x.dtype() == DType::I32 || weight.dtype() != x.dtype() || third.dtype() != x.dtype()) {
        fail(name, "needs float x, weight and " + std::string(op == Op::GroupNorm ? "bias" : "upstream") + " of one dtype");
    }
    if (groups < 1 || xs[1] % groups) fail(name, "x is " + shape_str(xs) + ": " + num(groups) + " groups do not divide C");
    if (!(eps >= 0)) fail(name, "eps must be >= 0");
    return emit({.op = op, .inputs = {x.id, weight.id, third.id}, .shape = xs, .dtype = x.dtype(), .ints = {groups},
                 .data = {eps}});
}

Tensor Graph::group_norm(Tensor x, int64_t groups, Tensor weight, Tensor bias, double eps) {
    return group_norm_node(Op::GroupNorm, x, groups, weight, bias, eps);
}

Tensor Graph::group_norm_grad(Tensor x, int64_t groups, Tensor weight, Tensor upstream, double eps) {
    return group_norm_node(Op::GroupNormGrad, x, groups, weight, upstream, eps);
}

// ---- pooling and upsampling ----

namespace {

// The output shape of a max pool, after checking its operands; `stride` is already resolved.
Shape pool_shape(const Shape& xs, int64_t kernel, int64_t stride, int64_t padding) {
    if (xs.size() != 4 || kernel < 1 || stride < 1 || padding < 0 || 2 * padding > kernel) {
        fail("max_pool2d", "x is " + shape_str(xs) + ", kernel " + num(kernel) + ", stride " + num(stride) + ", padding " +
                               num(padding) + ": need [N, C, H, W], kernel and stride >= 1, 0 <= padding <= kernel / 2");
    }
    const int64_t oh = sweep(xs[2], kernel, stride, padding, 1), ow = sweep(xs[3], kernel, stride, padding, 1);
    if (oh < 1 || ow < 1) fail("max_pool2d", "x is " + shape_str(xs) + ": the window does not fit");
    return {xs[0], xs[1], oh, ow};
}

}  // namespace

Tensor Graph::max_pool2d(Tensor x, int64_t kernel, int64_t stride, int64_t padding) {
    check(x, "max_pool2d");
    if (stride == 0) stride = kernel;
    Shape out = pool_shape(x.shape(), kernel, stride, padding);
    return emit({.op = Op::MaxPool2d, .inputs = {x.id}, .shape = std::move(out), .dtype = x.dtype(),
                 .ints = {kernel, stride, padding}});
}

Tensor Graph::max_pool2d_grad(Tensor x, Tensor gy, int64_t kernel, int64_t stride, int64_t padding) {
    check(x, "max_pool2d_grad");
    check(gy, "max_pool2d_grad");
    const Shape want = pool_shape(x.shape(), kernel, stride, padding);
    if (gy.shape() != want) fail("max_pool2d_grad", "gy is " + shape_str(gy.shape()) + ", expected " + shape_str(want));
    return emit({.op = Op::MaxPool2dGrad, .inputs = {x.id, gy.id}, .shape = x.shape(), .dtype = x.dtype(),
                 .ints = {kernel, stride, padding}});
}

// A depthwise convolution with a constant 1/k^2 kernel: zero padding counts, as in torch's default.
Tensor Graph::avg_pool2d(Tensor x, int64_t kernel, int64_t stride, int64_t padding) {
    check(x, "avg_pool2d");
    const Shape xs = x.shape();
    if (xs.size() != 4 || kernel < 1) fail("avg_pool2d", "x is " + shape_str(xs) + ", kernel " + num(kernel) + ": need [N, C, H, W]");
    Tensor w = full({xs[1], 1, kernel, kernel}, 1.0 / static_cast<double>(kernel * kernel), x.dtype());
    return conv2d(x, w, std::nullopt, {.stride = stride == 0 ? kernel : stride, .padding = padding, .groups = xs[1]});
}

Tensor Graph::global_avg_pool2d(Tensor x) {
    check(x, "global_avg_pool2d");
    if (x.shape().size() != 4) fail("global_avg_pool2d", "x is " + shape_str(x.shape()) + ": need [N, C, H, W]");
    return mean(x, {2, 3}, true);
}

// Every pixel repeated over a 2 x 2 block: a broadcast of [N, C, H, 1, W, 1] to [N, C, H, 2, W, 2].
Tensor Graph::upsample_nearest2x(Tensor x) {
    check(x, "upsample_nearest2x");
    const Shape s = x.shape();
    if (s.size() != 4) fail("upsample_nearest2x", "x is " + shape_str(s) + ": need [N, C, H, W]");
    Tensor blocks = expand(reshape(x, {s[0], s[1], s[2], 1, s[3], 1}), {s[0], s[1], s[2], 2, s[3], 2});
    return reshape(blocks, {s[0], s[1], 2 * s[2], 2 * s[3]});
}

}  // namespace mn
