// The CPU reference interpreter: the oracle every kernel and every gradient is checked against.
//
// It is written to be read, not to be fast. A value is a shape and a row-major vector of doubles,
// and each node is computed from its inputs' values by the most literal loop there is: visit
// every output element, turn its flat position into a multi-index (unravel), work out which input
// elements that index reads, and combine them. Nothing is vectorized, fused, tiled or cached;
// a reader should be able to check each op against its textbook definition in a few lines.
//
// One piece of index arithmetic carries most of the file: broadcast_offset, NumPy broadcasting
// of a smaller shape against a multi-index (trailing dims aligned, size-1 dims repeated). Binary
// ops use it for both operands, expand is nothing else, matmul uses it for its batch dims, and a
// reduction uses it backwards: the element an input index accumulates into is the input index
// "broadcast" onto the keepdim output shape, whose reduced dims have size 1.
//
// Arithmetic is done in float64 whatever the node's dtype; afterwards every result is settled to
// its dtype: F16 values are rounded to the nearest half (round_to_half, ties to even, overflow to
// infinity), I32 values are truncated toward zero. That one rule gives integer division its C
// semantics, casts their conversions and fed values their normalization, so no op handles dtypes
// itself. F32 is left exact: the reference is more precise than the GPU, never less. An I32
// result that is not finite (a division by zero) has no integer to become, and is an error.
//
// The graph builder has already checked every shape and inferred node.shape and node.dtype, so
// the only errors here are about the values: a missing or misshapen feed, a label out of range.
#include "reference/reference.hpp"
#include "reference/attention.hpp"
#include "reference/transformer_ops.hpp"

#include "reference/conv.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <optional>
#include <utility>

namespace mn::ref {
namespace {

using Index = std::vector<int64_t>;

constexpr double kInf = std::numeric_limits<double>::infinity();

[[noreturn]] void fail(const std::string& message) { throw Error("reference: " + message); }

std::string op_name(Op op) { return op_info(op).name; }

// The multi-index of row-major position `flat` in `shape`.
Index unravel(int64_t flat, const Shape& shape) {
    Index index(shape.size());
    for (size_t d = shape.size(); d-- > 0;) {
        index[d] = flat % shape[d];
        flat /= shape[d];
    }
    return index;
}

// The row-major position of `index` in `shape`.
int64_t ravel(const Index& index, const Shape& shape) {
    int64_t flat = 0;
    for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
    return flat;
}

// The position, in a tensor of shape `in`, of the element NumPy broadcasting maps to `out_index`:
// `in` is aligned with the index's trailing dims, and its dims of size 1 always read element 0.
int64_t broadcast_offset(const Index& out_index, const Shape& in) {
    const size_t lead = out_index.size() - in.size();
    Index in_index(in.size());
    for (size_t d = 0; d < in.size(); ++d) in_index[d] = in[d] == 1 ? 0 : out_index[lead + d];
    return ravel(in_index, in);
}

// A value of `shape` whose element at each multi-index is element(index).
template <class Element>
Value tabulate(const Shape& shape, Element element) {
    Value out{shape, std::vector<double>(static_cast<size_t>(numel(shape)))};
    for (int64_t i = 0; i < numel(shape); ++i) out.data[i] = element(unravel(i, shape));
    return out;
}

// x with fn applied to every element.
template <class Fn>
Value map(const Value& x, Fn fn) {
    Value out = x;
    for (double& v : out.data) v = fn(v);
    return out;
}

// fn(a, b) elementwise, both operands broadcast to the node's shape.
template <class Fn>
Value zip(const Node& node, const Value& a, const Value& b, Fn fn) {
    return tabulate(node.shape, [&](const Index& index) {
        return fn(a.data[broadcast_offset(index, a.shape)], b.data[broadcast_offset(index, b.shape)]);
    });
}

Value scalar(double v) { return Value{Shape{}, {v}}; }

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Exact gelu is x * Phi(x), Phi the standard normal CDF; its derivative is Phi(x) + x * phi(x).
double gelu_erf_deriv(double x) {
    const double cdf = 0.5 * (1 + std::erf(x / std::numbers::sqrt2));
    const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi);
    return cdf + x * pdf;
}

// The tanh gelu is 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3); by the product rule
// its derivative is 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) du/dx.
double gelu_tanh_deriv(double x) {
    const double k = std::sqrt(2 / std::numbers::pi);
    const double t = std::tanh(k * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}

// ---- leaves ----

Value fed(const Node& node, const Feeds& feeds) {
    const std::string what = op_name(node.op) + " '" + node.name + "'";
    const auto it = feeds.find(node.name);
    if (it == feeds.end()) fail("no value fed for " + what);
    const Value& v = it->second;
    if (v.shape != node.shape)
        fail("value fed for " + what + " has shape " + shape_str(v.shape) + " but the graph declares " +
             shape_str(node.shape));
    if (static_cast<int64_t>(v.data.size()) != numel(v.shape))
        fail("value fed for " + what + " has " + std::to_string(v.data.size()) + " elements, but its shape " +
             shape_str(v.shape) + " holds " + std::to_string(numel(v.shape)));
    return v;
}

Value constant(const Node& node) {
    const auto count = static_cast<size_t>(numel(node.shape));
    if (node.data.size() == 1) return Value{node.shape, std::vector<double>(count, node.data[0])};
    if (node.data.size() != count)
        fail("constant of shape " + shape_str(node.shape) + " has " + std::to_string(node.data.size()) +
             " values");
    return Value{node.shape, node.data};
}

// ---- reductions ----

// sum, mean or max over node.ints. Each input element is accumulated into the output element at
// its index with the reduced dims zeroed, which is broadcast_offset onto the keepdim shape; the
// keepdim and squeezed shapes have the same row-major layout, so node.flag does not matter here.
Value reduce(const Node& node, const Value& x) {
    Shape kept = x.shape;
    int64_t count = 1;  // elements per output element
    for (int64_t axis : node.ints) {
        count *= kept[axis];
        kept[axis] = 1;
    }
    const bool is_max = node.op == Op::Max;
    Value out{node.shape, std::vector<double>(static_cast<size_t>(numel(kept)), is_max ? -kInf : 0.0)};
    for (int64_t i = 0; i < numel(x.shape); ++i) {
        double& acc = out.data[broadcast_offset(unravel(i, x.shape), kept)];
        const double v = x.data[i];
        if (!is_max)
            acc += v;
        else if (v > acc || std::isnan(v))  // NaN wins, as in PyTorch
            acc = v;
    }
    if (node.op == Op::Mean)
        for (double& acc : out.data) acc /= static_cast<double>(count);
    return out;
}

// A row's max and sum(exp(row - max)). Softmax is exp(row - max) / sum and logsumexp is
// max + log(sum): subtracting the max first keeps exp from overflowing.
struct Normalizer {
    double max = -kInf;
    double sum = 0;
};

Normalizer normalizer(const std::vector<double>& row) {
    Normalizer n;
    for (double v : row) n.max = std::max(n.max, v);
    for (double v : row) n.sum += std::exp(v - n.max);
    return n;
}

// softmax or log_softmax along node.ints[0]: each row along the axis is gathered, normalized
// and scattered back.
Value softmax(const Node& node, const Value& x) {
    const auto axis = static_cast<size_t>(node.ints[0]);
    const int64_t length = x.shape[axis];
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < axis; ++d) outer *= x.shape[d];
    for (size_t d = axis + 1; d < x.shape.size(); ++d) inner *= x.shape[d];
    Value out = x;
    std::vector<double> row(static_cast<size_t>(length));
    for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
            const auto at = [&](int64_t j) { return (o * length + j) * inner + i; };
            for (int64_t j = 0; j < length; ++j) row[j] = x.data[at(j)];
            const Normalizer n = normalizer(row);
            for (int64_t j = 0; j < length; ++j) {
                out.data[at(j)] = node.op == Op::LogSoftmax ? (row[j] - n.max) - std::log(n.sum)
                                                            : std::exp(row[j] - n.max) / n.sum;
            }
        }
    }
    return out;
}

// Row r's label as an index, nullopt when it is the op's ignore index (ints[0]), or an error naming
// the op when it is neither.
std::optional<size_t> label_of(const Node& node, const Value& labels, int64_t r, int64_t classes) {
    const double label = labels.data[r];
    if (label == static_cast<double>(node.ints[0])) return std::nullopt;
    if (!(label >= 0 && label < static_cast<double>(classes)))
        fail(op_name(node.op) + " label " + std::to_string(static_cast<int64_t>(label)) + " in row " +
             std::to_string(r) + " is outside [0, " + std::to_string(classes) + ")");
    return static_cast<size_t>(label);
}

// Logits row r of an [N, C] value.
std::vector<double> row_of(const Value& logits, int64_t r) {
    const int64_t classes = logits.shape[1];
    return {logits.data.begin() + r * classes, logits.data.begin() + (r + 1) * classes};
}

// The rows whose label is not ignored (the mean's denominator; 0 gives NaN, as in torch).
double counted_rows(const Node& node, const Value& labels, int64_t classes) {
    double count = 0;
    for (int64_t r = 0; r < labels.shape[0]; ++r) count += label_of(node, labels, r, classes).has_value();
    return count;
}

// Mean over counted rows of logsumexp(logits row) - logits[row, label], each term computed as
// log(sum) - (logit - max) so that large logits lose no precision.
Value cross_entropy(const Node& node, const Value& logits, const Value& labels) {
    const int64_t rows = logits.shape[0], classes = logits.shape[1];
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) {
        const std::optional<size_t> label = label_of(node, labels, r, classes);
        if (!label) continue;
        const std::vector<double> row = row_of(logits, r);
        const Normalizer n = normalizer(row);
        total += std::log(n.sum) - (row[*label] - n.max);
    }
    return scalar(total / counted_rows(node, labels, classes));
}

// The gradient of cross_entropy with respect to the logits, times the scalar upstream g:
// out[r, c] = g * (softmax(row r)[c] - (c == label r)) / counted rows; 0 in an ignored row.
Value cross_entropy_grad(const Node& node, const Value& logits, const Value& labels, const Value& upstream) {
    const int64_t rows = logits.shape[0], classes = logits.shape[1];
    const double scale = upstream.data[0] / counted_rows(node, labels, classes);
    Value out = logits;
    for (int64_t r = 0; r < rows; ++r) {
        const std::optional<size_t> label = label_of(node, labels, r, classes);
        const std::vector<double> row = row_of(logits, r);
        const Normalizer n = normalizer(row);
        for (int64_t c = 0; c < classes; ++c) {
            out.data[r * classes + c] =
                label ? scale * (std::exp(row[c] - n.max) / n.sum - (c == static_cast<int64_t>(*label))) : 0.0;
        }
    }
    return out;
}

Value mse_loss(const Value& a, const Value& b) {
    double total = 0;
    for (size_t i = 0; i < a.data.size(); ++i) total += (a.data[i] - b.data[i]) * (a.data[i] - b.data[i]);
    return scalar(total / static_cast<double>(a.data.size()));
}

// ---- matmul ----

// out[batch, m, n] = sum_k A[batch, m, k] * B[batch, k, n]. Each operand's batch dims broadcast
// to the output's; a transposed operand is read with its last two dims swapped.
Value matmul(const Node& node, const Value& a, const Value& b) {
    const bool trans_a = node.ints[0] != 0, trans_b = node.ints[1] != 0;
    const size_t rank = node.shape.size();
    const int64_t rows = node.shape[rank - 2], cols = node.shape[rank - 1];
    const int64_t depth = a.shape[a.shape.size() - (trans_a ? 2 : 1)];
    const Shape a_batch(a.shape.begin(), a.shape.end() - 2), b_batch(b.shape.begin(), b.shape.end() - 2);
    return tabulate(node.shape, [&](const Index& index) {
        const Index batch(index.begin(), index.end() - 2);
        const int64_t m = index[rank - 2], n = index[rank - 1];
        const int64_t a_base = broadcast_offset(batch, a_batch) * rows * depth;
        const int64_t b_base = broadcast_offset(batch, b_batch) * depth * cols;
        double total = 0;
        for (int64_t k = 0; k < depth; ++k) {
            const double a_mk = a.data[a_base + (trans_a ? k * rows + m : m * depth + k)];
            const double b_kn = b.data[b_base + (trans_b ? n * depth + k : k * cols + n)];
            total += a_mk * b_kn;
        }
        return total;
    });
}

// ---- data movement ----

// out.shape[d] = in.shape[perm[d]], so output index i reads the input index j with j[perm[d]] = i[d].
Value permute(const Node& node, const Value& x) {
    return tabulate(node.shape, [&](const Index& index) {
        Index source(index.size());
        for (size_t d = 0; d < index.size(); ++d) source[node.ints[d]] = index[d];
        return x.data[ravel(source, x.shape)];
    });
}

// ints = {starts..., ends..., steps...}; output index i reads input index start + i * step.
Value slice(const Node& node, const Value& x) {
    const size_t rank = x.shape.size();
    return tabulate(node.shape, [&](const Index& index) {
        Index source(rank);
        for (size_t d = 0; d < rank; ++d) source[d] = node.ints[d] + index[d] * node.ints[2 * rank + d];
        return x.data[ravel(source, x.shape)];
    });
}

// Along axis ints[0]: for each position of the dims before the axis, each input contributes one
// contiguous block (its axis length times the dims after it), in input order.
Value concat(const Node& node, const std::vector<const Value*>& xs) {
    const auto axis = static_cast<size_t>(node.ints[0]);
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < axis; ++d) outer *= node.shape[d];
    for (size_t d = axis + 1; d < node.shape.size(); ++d) inner *= node.shape[d];
    Value out{node.shape, {}};
    for (int64_t o = 0; o < outer; ++o) {
        for (const Value* x : xs) {
            const int64_t block = x->shape[axis] * inner;
            out.data.insert(out.data.end(), x->data.begin() + o * block, x->data.begin() + (o + 1) * block);
        }
    }
    return out;
}

Value expand(const Node& node, const Value& x) {
    return tabulate(node.shape, [&](const Index& index) { return x.data[broadcast_offset(index, x.shape)]; });
}

// ---- dispatch ----

// The node's value in float64, before settling to its dtype.
Value compute(const Node& node, const std::vector<const Value*>& in, const Feeds& feeds) {
    const auto unary = [&](auto fn) { return map(*in[0], fn); };
    const auto binary = [&](auto fn) { return zip(node, *in[0], *in[1], fn); };
    switch (node.op) {
    case Op::Input:
    case Op::Parameter:
    case Op::State: return fed(node, feeds);
    case Op::Constant: return constant(node);

    case Op::Neg: return unary([](double x) { return -x; });
    case Op::Exp: return unary([](double x) { return std::exp(x); });
    case Op::Log: return unary([](double x) { return std::log(x); });
    case Op::Sqrt: return unary([](double x) { return std::sqrt(x); });
    case Op::Rsqrt: return unary([](double x) { return 1.0 / std::sqrt(x); });
    case Op::Abs: return unary([](double x) { return std::fabs(x); });
    case Op::Relu: return unary([](double x) { return x > 0 || std::isnan(x) ? x : 0.0; });
    case Op::Sigmoid: return unary([](double x) { return sigmoid(x); });
    case Op::Tanh: return unary([](double x) { return std::tanh(x); });
    case Op::Silu: return unary([](double x) { return x * sigmoid(x); });
    case Op::GeluErf: return unary([](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); });
    case Op::GeluTanh:
        return unary([](double x) {
            return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
        });
    case Op::Cast: return *in[0];  // the conversion is settle()'s rounding to the node's dtype
    case Op::Sign: return unary([](double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : x; });  // keeps 0 and NaN
    case Op::GeluErfDeriv: return unary(gelu_erf_deriv);
    case Op::GeluTanhDeriv: return unary(gelu_tanh_deriv);

    case Op::Add: return binary([](double a, double b) { return a + b; });
    case Op::Sub: return binary([](double a, double b) { return a - b; });
    case Op::Mul: return binary([](double a, double b) { return a * b; });
    case Op::Div: return binary([](double a, double b) { return a / b; });  // I32: settle truncates
    case Op::Maximum: return binary([](double a, double b) { return a > b || std::isnan(a) ? a : b; });
    case Op::Minimum: return binary([](double a, double b) { return a < b || std::isnan(a) ? a : b; });
    case Op::Pow: return binary([](double a, double b) { return std::pow(a, b); });
    case Op::Greater: return binary([](double a, double b) { return a > b ? 1.0 : 0.0; });
    case Op::Equal: return binary([](double a, double b) { return a == b ? 1.0 : 0.0; });

    case Op::Sum:
    case Op::Mean:
    case Op::Max: return reduce(node, *in[0]);
    case Op::Softmax:
    case Op::LogSoftmax: return softmax(node, *in[0]);
    case Op::CrossEntropy: return cross_entropy(node, *in[0], *in[1]);
    case Op::MseLoss: return mse_loss(*in[0], *in[1]);
    case Op::CrossEntropyGrad: return cross_entropy_grad(node, *in[0], *in[1], *in[2]);

    case Op::MatMul: return matmul(node, *in[0], *in[1]);
    case Op::Conv2d:
    case Op::Conv2dGradInput:
    case Op::Conv2dGradWeight: return conv2d_family(node, *in[0], *in[1]);
    case Op::MaxPool2d: return max_pool2d_family(node, *in[0], nullptr);
    case Op::MaxPool2dGrad: return max_pool2d_family(node, *in[0], in[1]);

    case Op::Attention:
    case Op::AttentionLse:
    case Op::AttentionGradQ:
    case Op::AttentionGradK:
    case Op::AttentionGradV: return attention_op(node, in);

    case Op::Reshape: return Value{node.shape, in[0]->data};
    case Op::Permute: return permute(node, *in[0]);
    case Op::Slice: return slice(node, *in[0]);
    case Op::Concat: return concat(node, in);
    case Op::Expand: return expand(node, *in[0]);
    case Op::Assign: return *in[1];  // the write into the target's storage is the session's business

    case Op::Embedding: return embedding(node, *in[0], *in[1]);
    case Op::EmbeddingGrad: return embedding_grad(node, *in[0], *in[1]);
    case Op::RmsNorm: return norm(node, *in[0], *in[1], nullptr);
    case Op::LayerNorm:
    case Op::RmsNormGrad:
    case Op::LayerNormGrad:
    case Op::GroupNorm:
    case Op::GroupNormGrad: return norm(node, *in[0], *in[1], in[2]);
    case Op::Rope: return rope(node, *in[0], *in[1], *in[2]);
    case Op::SliceScatter: return slice_scatter(node, *in[0], *in[1], *in[2]);
    }
    fail("no rule for op " + op_name(node.op));
}

// Rounds every element to the node's dtype: F16 to the nearest half, I32 toward zero.
void settle(Value& value, const Node& node) {
    for (double& v : value.data) {
        if (node.dtype == DType::F16) {
            v = round_to_half(v);
        } else if (node.dtype == DType::I32) {
            if (!std::isfinite(v)) fail("i32 result of " + op_name(node.op) + " is " + std::to_string(v));
            v = std::trunc(v) + 0.0;  // + 0.0 turns the -0 of trunc(-0.5) into 0
        }
    }
}

}  // namespace

Value evaluate_node(const Node& node, const std::vector<const Value*>& inputs, const Feeds& feeds) {
    Value value = compute(node, inputs, feeds);
    settle(value, node);
    return value;
}

std::vector<Value> evaluate(const Graph& graph, const Feeds& feeds) {
    std::vector<Value> values;
    values.reserve(graph.nodes().size());
    for (const Node& node : graph.nodes()) {
        std::vector<const Value*> in;
        for (int32_t id : node.inputs) in.push_back(&values.at(static_cast<size_t>(id)));
        values.push_back(evaluate_node(node, in, feeds));
    }
    return values;
}

// A half has 11 significant bits for magnitudes in [2^-14, 65504] and a fixed spacing of 2^-24
// below 2^-14 (subnormals). So x is rounded to a multiple of the spacing of its binade:
// 2^(e - 10) for |x| in [2^e, 2^(e+1)), never finer than 2^-24. Dividing by a power of two is
// exact, so nearbyint (ties to even in the default rounding mode) does the only rounding. A
// result past the largest half, 65504, overflows to infinity: 65520 is the first such input.
double round_to_half(double x) {
    if (std::isnan(x) || std::isinf(x) || x == 0) return x;
    int exponent = 0;
    std::frexp(x, &exponent);  // |x| = f * 2^exponent with f in [0.5, 1)
    const double spacing = std::ldexp(1.0, std::max(exponent - 11, -24));
    const double rounded = std::nearbyint(x / spacing) * spacing;
    return std::fabs(rounded) > 65504 ? std::copysign(kInf, x) : rounded;
}

}  // namespace mn::ref
