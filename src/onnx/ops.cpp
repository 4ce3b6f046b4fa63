// The ONNX op rules: one entry per op type, lowering a node onto the Graph builders (torch.nn's
// semantics, so most are one call). Values known at import time (initializers, Constant nodes) stay
// constants through the shape arithmetic torch.onnx.export emits (Shape, Gather, Unsqueeze, Concat,
// integer Mul/Div ...), so Reshape and friends see static shapes. What a builder cannot express
// (asymmetric pads, non-square kernels, ceil_mode ...) is an error naming the attribute and node.
#include <cmath>
#include <numeric>

#include "onnx/lowering.hpp"

namespace mn::onnx {

namespace {

using Node = ::onnx::NodeProto;

[[noreturn]] void unsupported(const Node& node, const std::string& what) {
    throw Error(where(node) + ": " + what + " is not supported");
}

int64_t axis_in(const Node& node, int64_t axis, size_t rank) {
    const auto r = static_cast<int64_t>(rank);
    if (axis < -r || axis >= std::max<int64_t>(r, 1)) throw Error(where(node) + ": axis " + std::to_string(axis) + " of a rank-" + std::to_string(rank) + " tensor");
    return axis < 0 ? axis + r : axis;
}

// Constant folding for the shape arithmetic: element-wise with one operand broadcast when it has a
// single value (all torch.onnx.export's shape chains need).
Constant fold(const Node& node, const Constant& a, const Constant& b, double (*fn)(double, double)) {
    if (a.values.size() != b.values.size() && a.values.size() != 1 && b.values.size() != 1)
        unsupported(node, "constant folding of shapes " + shape_str(a.shape) + " and " + shape_str(b.shape));
    const bool a_wide = a.values.size() >= b.values.size();
    Constant out{.shape = a_wide ? a.shape : b.shape, .integer = a.integer && b.integer};
    const size_t n = std::max(a.values.size(), b.values.size());
    for (size_t i = 0; i < n; ++i) {
        double v = fn(a.values[a.values.size() == 1 ? 0 : i], b.values[b.values.size() == 1 ? 0 : i]);
        out.values.push_back(out.integer ? std::trunc(v) : v);
    }
    return out;
}

Rule binary(Tensor (Graph::*build)(Tensor, Tensor), double (*fn)(double, double)) {
    return [build, fn](Lowering& l, const Node& node) {
        const Constant *a = l.constant(node, 0), *b = l.constant(node, 1);
        if (a && b && a->integer && b->integer) {  // shape arithmetic
            l.define(node.output(0), fold(node, *a, *b, fn));
            return;
        }
        l.define(node.output(0), (l.graph().*build)(l.tensor(node, 0), l.tensor(node, 1)));
    };
}

Rule unary(Tensor (Graph::*build)(Tensor)) {
    return [build](Lowering& l, const Node& node) { l.define(node.output(0), (l.graph().*build)(l.tensor(node, 0))); };
}

void alias(Lowering& l, const Node& node) {
    if (const Constant* c = l.constant(node, 0)) l.define(node.output(0), *c);
    else l.define(node.output(0), l.tensor(node, 0));
}

// A constant's value (kept as a double) as the integer it stands for (an axis, a size, an index), or an error naming
// the node where it is not a whole number in int64's range: converting one past the range is undefined (fuzz_onnx).
int64_t whole(const Node& node, double v) {
    constexpr double kTwoTo63 = 9223372036854775808.0;
    if (!(v >= -kTwoTo63 && v < kTwoTo63) || v != std::trunc(v))
        throw Error(where(node) + ": " + std::to_string(v) + " is not an integer (an axis, a size or an index)");
    return static_cast<int64_t>(v);
}

// Axes from the attribute (older opsets) or from input `i` (newer ones); empty when neither.
std::vector<int64_t> axes_of(Lowering& l, const Node& node, int i) {
    if (has_attr(node, "axes")) return attr_ints(node, "axes");
    if (!l.has_input(node, i)) return {};
    std::vector<int64_t> axes;
    for (double v : l.required_constant(node, i).values) axes.push_back(whole(node, v));
    return axes;
}

Shape reshaped(const Node& node, const Shape& from, const Constant& target, bool allow_zero) {
    Shape shape;
    for (size_t i = 0; i < target.values.size(); ++i) {
        int64_t d = whole(node, target.values[i]);
        if (d == 0 && !allow_zero) {
            if (i >= from.size()) throw Error(where(node) + ": shape entry 0 at " + std::to_string(i) + " of a rank-" + std::to_string(from.size()) + " input");
            d = from[i];
        }
        shape.push_back(d);
    }
    return shape;
}

void reshape_to(Lowering& l, const Node& node, const Shape& shape) {
    if (const Constant* c = l.constant(node, 0)) {
        Constant out = *c;
        out.shape = shape;
        if (numel(out.shape) != static_cast<int64_t>(out.values.size())) throw Error(where(node) + ": cannot reshape " + shape_str(c->shape) + " to " + shape_str(shape));
        l.define(node.output(0), out);
    } else {
        l.define(node.output(0), l.graph().reshape(l.tensor(node, 0), shape));
    }
}

// The one value of a square (or 1-d) attribute such as kernel_shape or strides.
int64_t square(const Node& node, const std::string& name, int64_t fallback, size_t dims) {
    const std::vector<int64_t> v = attr_ints(node, name, std::vector<int64_t>(dims, fallback));
    for (int64_t x : v)
        if (x != v[0] || v.size() != dims) unsupported(node, name + " " + shape_str(v) + " (only equal values in every dimension)");
    return v[0];
}

// Symmetric, equal padding: pads [b1, b2, ..., e1, e2, ...] all alike.
int64_t padding(const Node& node, size_t dims) {
    if (attr_string(node, "auto_pad", "NOTSET") != "NOTSET") unsupported(node, "auto_pad " + attr_string(node, "auto_pad", ""));
    const std::vector<int64_t> pads = attr_ints(node, "pads", std::vector<int64_t>(2 * dims, 0));
    for (int64_t p : pads)
        if (p != pads[0] || pads.size() != 2 * dims) unsupported(node, "pads " + shape_str(pads) + " (only equal padding on every side)");
    return pads[0];
}

void conv(Lowering& l, const Node& node) {
    const Tensor x = l.tensor(node, 0);
    const size_t dims = x.shape().size() - 2;
    if (dims != 1 && dims != 2) unsupported(node, std::to_string(dims) + "-d convolution");
    const ConvOptions o{.stride = square(node, "strides", 1, dims), .padding = padding(node, dims),
                        .dilation = square(node, "dilations", 1, dims), .groups = attr_int(node, "group", 1)};
    const Tensor w = l.tensor(node, 1);
    const std::optional<Tensor> b = l.has_input(node, 2) ? std::optional<Tensor>(l.tensor(node, 2)) : std::nullopt;
    if (has_attr(node, "kernel_shape")) (void)square(node, "kernel_shape", 1, dims);
    l.define(node.output(0), dims == 1 ? l.graph().conv1d(x, w, b, o) : l.graph().conv2d(x, w, b, o));
}

void pool(Lowering& l, const Node& node, bool max) {
    const Tensor x = l.tensor(node, 0);
    if (x.shape().size() != 4) unsupported(node, "pooling of a rank-" + std::to_string(x.shape().size()) + " tensor");
    if (attr_int(node, "ceil_mode", 0)) unsupported(node, "ceil_mode 1");
    if (max && square(node, "dilations", 1, 2) != 1) unsupported(node, "dilation");
    if (max && node.output_size() > 1) unsupported(node, "the Indices output");
    const int64_t kernel = square(node, "kernel_shape", 1, 2), stride = square(node, "strides", 1, 2), pad = padding(node, 2);
    if (!max && pad > 0 && !attr_int(node, "count_include_pad", 0)) unsupported(node, "count_include_pad 0 with padding");
    l.define(node.output(0), max ? l.graph().max_pool2d(x, kernel, stride, pad) : l.graph().avg_pool2d(x, kernel, stride, pad));
}

void gemm(Lowering& l, const Node& node) {
    const Tensor a = l.tensor(node, 0), b = l.tensor(node, 1);
    const bool trans_a = attr_int(node, "transA", 0), trans_b = attr_int(node, "transB", 0);
    const double alpha = attr_float(node, "alpha", 1), beta = attr_float(node, "beta", 1);
    Graph& g = l.graph();
    if (!trans_a && trans_b && alpha == 1 && beta == 1) {  // nn.Linear
        l.define(node.output(0), g.linear(a, b, l.has_input(node, 2) ? std::optional<Tensor>(l.tensor(node, 2)) : std::nullopt));
        return;
    }
    Tensor y = g.matmul(a, b, trans_a, trans_b);
    if (alpha != 1) y = y * alpha;
    if (l.has_input(node, 2)) y = y + (beta == 1 ? l.tensor(node, 2) : l.tensor(node, 2) * beta);
    l.define(node.output(0), y);
}

void reduce(Lowering& l, const Node& node, Tensor (Graph::*build)(Tensor, std::vector<int64_t>, bool)) {
    std::vector<int64_t> axes = axes_of(l, node, 1);
    if (axes.empty() && attr_int(node, "noop_with_empty_axes", 0)) return alias(l, node);
    l.define(node.output(0), (l.graph().*build)(l.tensor(node, 0), axes, attr_int(node, "keepdims", 1) != 0));
}

void constant_node(Lowering& l, const Node& node) {
    for (const auto& a : node.attribute()) {
        if (a.name() == "value") return l.define(node.output(0), decode(a.t(), where(node), l.model_dir()));
        if (a.name() == "value_float") return l.define(node.output(0), Constant{{}, {a.f()}});
        if (a.name() == "value_int") return l.define(node.output(0), Constant{{}, {double(a.i())}, true});
        if (a.name() == "value_floats")
            return l.define(node.output(0), Constant{{a.floats_size()}, {a.floats().begin(), a.floats().end()}});
        if (a.name() == "value_ints")
            return l.define(node.output(0), Constant{{a.ints_size()}, {a.ints().begin(), a.ints().end()}, true});
    }
    unsupported(node, "a Constant without a value, value_float(s) or value_int(s)");
}

void shape_node(Lowering& l, const Node& node) {
    const Shape s = l.shape(node, 0);
    const auto rank = static_cast<int64_t>(s.size());
    int64_t start = attr_int(node, "start", 0), end = attr_int(node, "end", rank);
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    end = std::clamp<int64_t>(end, start, rank);
    l.define(node.output(0), Constant{{end - start}, {s.begin() + start, s.begin() + end}, true});
}

void gather(Lowering& l, const Node& node) {
    const Constant *data = l.constant(node, 0), *indices = l.constant(node, 1);
    if (!data || !indices || data->shape.size() != 1) unsupported(node, "Gather other than on a constant 1-d tensor (shapes)");
    Constant out{.shape = indices->shape, .integer = data->integer};
    const auto size = static_cast<int64_t>(data->values.size());
    for (double v : indices->values) {
        const int64_t i = whole(node, v), at = i < 0 ? i + size : i;
        if (at < 0 || at >= size) throw Error(where(node) + ": index " + std::to_string(i) + " out of range");
        out.values.push_back(data->values[static_cast<size_t>(at)]);
    }
    l.define(node.output(0), out);
}

void unsqueeze(Lowering& l, const Node& node) {
    Shape s = l.shape(node, 0);
    std::vector<int64_t> axes = axes_of(l, node, 1);
    const size_t rank = s.size() + axes.size();
    for (int64_t& a : axes) a = axis_in(node, a, rank);
    std::sort(axes.begin(), axes.end());
    for (int64_t a : axes) s.insert(s.begin() + a, 1);
    reshape_to(l, node, s);
}

void squeeze(Lowering& l, const Node& node) {
    const Shape s = l.shape(node, 0);
    std::vector<int64_t> axes = axes_of(l, node, 1);
    for (int64_t& a : axes) a = axis_in(node, a, s.size());
    Shape out;
    for (size_t i = 0; i < s.size(); ++i) {
        const bool listed = std::find(axes.begin(), axes.end(), int64_t(i)) != axes.end();
        if ((axes.empty() && s[i] == 1) || listed) {
            if (s[i] != 1) throw Error(where(node) + ": axis " + std::to_string(i) + " has size " + std::to_string(s[i]));
            continue;
        }
        out.push_back(s[i]);
    }
    reshape_to(l, node, out);
}

void concat(Lowering& l, const Node& node) {
    bool constants = true;
    for (int i = 0; i < node.input_size(); ++i) constants = constants && l.constant(node, i);
    if (constants && l.constant(node, 0)->shape.size() == 1) {
        Constant out{.shape = {0}, .integer = true};
        for (int i = 0; i < node.input_size(); ++i) {
            const Constant* c = l.constant(node, i);
            out.values.insert(out.values.end(), c->values.begin(), c->values.end());
            out.integer = out.integer && c->integer;
        }
        out.shape[0] = static_cast<int64_t>(out.values.size());
        return l.define(node.output(0), out);
    }
    std::vector<Tensor> xs;
    for (int i = 0; i < node.input_size(); ++i) xs.push_back(l.tensor(node, i));
    l.define(node.output(0), l.graph().concat(xs, attr_int(node, "axis", 0)));
}

void cast(Lowering& l, const Node& node) {
    const int64_t to = attr_int(node, "to", 0);
    const bool to_int = to == ::onnx::TensorProto::INT64 || to == ::onnx::TensorProto::INT32;
    if (const Constant* c = l.constant(node, 0)) {
        Constant out = *c;
        out.integer = to_int;
        if (to_int) for (double& v : out.values) v = std::trunc(v);
        return l.define(node.output(0), out);
    }
    if (to != ::onnx::TensorProto::FLOAT) unsupported(node, "a Cast of a tensor to anything but FLOAT");
    l.define(node.output(0), l.tensor(node, 0));
}

}  // namespace

const std::map<std::string, Rule>& rules() {
    static const std::map<std::string, Rule> table = {
        {"Add", binary(&Graph::add, [](double a, double b) { return a + b; })},
        {"Sub", binary(&Graph::sub, [](double a, double b) { return a - b; })},
        {"Mul", binary(&Graph::mul, [](double a, double b) { return a * b; })},
        {"Div", binary(&Graph::div, [](double a, double b) { return a / b; })},
        {"Max", binary(&Graph::maximum, [](double a, double b) { return std::max(a, b); })},
        {"Min", binary(&Graph::minimum, [](double a, double b) { return std::min(a, b); })},
        {"Pow", [](Lowering& l, const Node& node) {
             const Constant& e = l.required_constant(node, 1);
             if (e.values.size() != 1) unsupported(node, "a Pow whose exponent is not one value");
             l.define(node.output(0), l.graph().pow(l.tensor(node, 0), e.values[0]));
         }},
        {"Relu", unary(&Graph::relu)},
        {"Sigmoid", unary(&Graph::sigmoid)},
        {"Tanh", unary(&Graph::tanh)},
        {"Exp", unary(&Graph::exp)},
        {"Log", unary(&Graph::log)},
        {"Sqrt", unary(&Graph::sqrt)},
        {"Abs", unary(&Graph::abs)},
        {"Neg", unary(&Graph::neg)},
        {"Softmax", [](Lowering& l, const Node& node) {
             l.define(node.output(0), l.graph().softmax(l.tensor(node, 0), attr_int(node, "axis", -1)));
         }},
        {"LogSoftmax", [](Lowering& l, const Node& node) {
             l.define(node.output(0), l.graph().log_softmax(l.tensor(node, 0), attr_int(node, "axis", -1)));
         }},
        {"MatMul", [](Lowering& l, const Node& node) { l.define(node.output(0), l.graph().matmul(l.tensor(node, 0), l.tensor(node, 1))); }},
        {"Gemm", gemm},
        {"Conv", conv},
        {"MaxPool", [](Lowering& l, const Node& node) { pool(l, node, true); }},
        {"AveragePool", [](Lowering& l, const Node& node) { pool(l, node, false); }},
        {"GlobalAveragePool", [](Lowering& l, const Node& node) {
             l.define(node.output(0), l.graph().global_avg_pool2d(l.tensor(node, 0)));
         }},
        {"BatchNormalization", [](Lowering& l, const Node& node) {
             if (attr_int(node, "training_mode", 0) || node.output_size() > 1) unsupported(node, "training mode");
             l.define(node.output(0), l.graph().batch_norm(l.tensor(node, 0), l.tensor(node, 1), l.tensor(node, 2), l.tensor(node, 3),
                                                           l.tensor(node, 4), false, 1 - attr_float(node, "momentum", 0.9),
                                                           attr_float(node, "epsilon", 1e-5)));
         }},
        {"LayerNormalization", [](Lowering& l, const Node& node) {
             const Tensor x = l.tensor(node, 0);
             if (axis_in(node, attr_int(node, "axis", -1), x.shape().size()) != static_cast<int64_t>(x.shape().size()) - 1)
                 unsupported(node, "normalizing over more than the last axis");
             if (node.output_size() > 1) unsupported(node, "the Mean and InvStdDev outputs");
             const Tensor bias = l.has_input(node, 2) ? l.tensor(node, 2) : l.graph().full({x.shape().back()}, 0);
             l.define(node.output(0), l.graph().layer_norm(x, l.tensor(node, 1), bias, attr_float(node, "epsilon", 1e-5)));
         }},
        {"ReduceMean", [](Lowering& l, const Node& node) { reduce(l, node, &Graph::mean); }},
        {"ReduceSum", [](Lowering& l, const Node& node) { reduce(l, node, &Graph::sum); }},
        {"ReduceMax", [](Lowering& l, const Node& node) { reduce(l, node, &Graph::max); }},
        {"Transpose", [](Lowering& l, const Node& node) {
             const Tensor x = l.tensor(node, 0);
             std::vector<int64_t> reverse(x.shape().size());
             std::iota(reverse.rbegin(), reverse.rend(), 0);
             l.define(node.output(0), l.graph().permute(x, attr_ints(node, "perm", reverse)));
         }},
        {"Reshape", [](Lowering& l, const Node& node) {
             reshape_to(l, node, reshaped(node, l.shape(node, 0), l.required_constant(node, 1), attr_int(node, "allowzero", 0)));
         }},
        {"Flatten", [](Lowering& l, const Node& node) {
             const Shape s = l.shape(node, 0);
             const int64_t axis = axis_in(node, attr_int(node, "axis", 1), s.size() + 1);
             const int64_t outer = std::accumulate(s.begin(), s.begin() + axis, int64_t{1}, std::multiplies<>());
             reshape_to(l, node, {outer, numel(s) / std::max<int64_t>(outer, 1)});
         }},
        {"Unsqueeze", unsqueeze},
        {"Squeeze", squeeze},
        {"Concat", concat},
        {"Shape", shape_node},
        {"Gather", gather},
        {"Cast", cast},
        {"Constant", constant_node},
        {"Identity", alias},
        {"Dropout", [](Lowering& l, const Node& node) {
             if (node.output_size() > 1 && !node.output(1).empty()) unsupported(node, "the mask output");
             alias(l, node);
         }},
    };
    return table;
}

}  // namespace mn::onnx
