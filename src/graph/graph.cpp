// The graph builder: every call checks its operands, infers the result's shape and dtype, and
// appends one node. Errors read "[op] what: shapes", so a user sees the op and both shapes.
#include "meganeura/graph.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

namespace mn {

namespace {

constexpr bool Vjp = true, NoVjp = false;  // ops.def's last column
const OpInfo kOpInfo[] = {
#define X(e, n, a, ar, d) {n, Archetype::a, ar, d},
#include "meganeura/ops.def"
#undef X
};

[[noreturn]] void fail(const char* op, const std::string& what) {
    throw Error(std::string("[") + op + "] " + what);
}

int64_t normalize_axis(int64_t axis, size_t rank, const char* op) {
    const auto r = static_cast<int64_t>(rank);
    if (axis < -r || axis >= std::max<int64_t>(r, 1)) {
        fail(op, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
    }
    return axis < 0 ? axis + r : axis;
}

bool is_float(DType t) { return t == DType::F32 || t == DType::F16; }

}  // namespace

const char* dtype_name(DType t) {
    switch (t) {
        case DType::F32: return "f32";
        case DType::F16: return "f16";
        case DType::I32: return "i32";
    }
    return "?";
}

size_t dtype_size(DType t) { return t == DType::F16 ? 2 : 4; }

std::string shape_str(const Shape& s) {
    std::string out = "(";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
    return out + ")";
}

namespace {

// a * b, counting elements of `shape` for `op`: shapes come from users' files (ONNX models), so a count past int64's
// is the file's error, not an overflow (the ONNX fuzzer's first find).
int64_t count_product(int64_t a, int64_t b, const Shape& shape, const char* op) {
    int64_t product = 0;
    if (__builtin_mul_overflow(a, b, &product)) fail(op, "shape " + shape_str(shape) + " has more elements than a 64-bit count holds");
    return product;
}

int64_t checked_numel(const Shape& s, const char* op) {
    int64_t n = 1;
    for (int64_t d : s) n = count_product(n, d, s, op);
    return n;
}

}  // namespace

int64_t numel(const Shape& s) { return checked_numel(s, "numel"); }

const OpInfo& op_info(Op op) { return kOpInfo[static_cast<size_t>(op)]; }

const Shape& Tensor::shape() const { return graph->node(*this).shape; }
DType Tensor::dtype() const { return graph->node(*this).dtype; }

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
    Shape out(std::max(a.size(), b.size()));
    for (size_t i = 0; i < out.size(); ++i) {
        const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
        const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
        if (da != db && da != 1 && db != 1) {
            fail(op, "a is " + shape_str(a) + ", b is " + shape_str(b) + ": cannot broadcast");
        }
        out[out.size() - 1 - i] = da == 1 ? db : da;
    }
    return out;
}

void Graph::check(Tensor t, const char* op) const {
    if (t.graph != this || t.id < 0 || static_cast<size_t>(t.id) >= nodes_.size()) {
        fail(op, "operand is not a tensor of this graph");
    }
}

const Node& Graph::node(Tensor t) const {
    check(t, "node");
    return nodes_[static_cast<size_t>(t.id)];
}

Tensor Graph::emit(Node n) {
    for (int32_t in : n.inputs) {
        if (in < 0 || static_cast<size_t>(in) >= nodes_.size()) fail(op_info(n.op).name, "bad input id");
    }
    if (std::any_of(n.shape.begin(), n.shape.end(), [](int64_t d) { return d < 0; }))
        fail(op_info(n.op).name, "negative dimension in " + shape_str(n.shape));
    (void)checked_numel(n.shape, op_info(n.op).name);
    has_gradients_ = has_gradients_ || n.gradient;
    nodes_.push_back(std::move(n));
    return Tensor{this, static_cast<int32_t>(nodes_.size() - 1)};
}

void Graph::mark_gradients(int32_t first) {
    for (size_t i = static_cast<size_t>(std::max(first, 0)); i < nodes_.size(); ++i) {
        nodes_[i].gradient = true;
        has_gradients_ = true;
    }
}

void Graph::check_unique_name(const std::string& name, const char* op) const {
    if (name.empty()) fail(op, "a name is required");
    if (find(name)) fail(op, "name '" + name + "' is already used");
}

std::optional<Tensor> Graph::find(std::string_view name) const {
    auto* self = const_cast<Graph*>(this);
    for (size_t i = 0; i < nodes_.size(); ++i) {
        const auto& n = nodes_[i];
        if ((n.op == Op::Input || n.op == Op::Parameter || n.op == Op::State) && n.name == name) {
            return Tensor{self, static_cast<int32_t>(i)};
        }
    }
    for (const auto& [out_name, id] : outputs_) {
        if (out_name == name) return Tensor{self, id};
    }
    return std::nullopt;
}

// ---- leaves ----

static void check_shape(const Shape& s, const char* op) {
    for (int64_t d : s) {
        if (d < 0) fail(op, "negative dimension in " + shape_str(s));
    }
}

Tensor Graph::input(std::string name, Shape shape, DType dtype) {
    check_unique_name(name, "input");
    check_shape(shape, "input");
    return emit({.op = Op::Input, .shape = std::move(shape), .dtype = dtype, .name = std::move(name)});
}

Tensor Graph::parameter(std::string name, Shape shape, Init init, DType dtype) {
    check_unique_name(name, "parameter");
    check_shape(shape, "parameter");
    if (!is_float(dtype)) fail("parameter", "'" + name + "' must be f32 or f16");
    return emit({.op = Op::Parameter, .shape = std::move(shape), .dtype = dtype, .name = std::move(name),
                 .init = init});
}

void Graph::set_requires_grad(Tensor parameter, bool requires_grad) {
    check(parameter, "set_requires_grad");
    Node& n = nodes_[static_cast<size_t>(parameter.id)];
    if (n.op != Op::Parameter) fail("set_requires_grad", std::string("expects a parameter, got ") + op_info(n.op).name);
    n.requires_grad = requires_grad;
}

Tensor Graph::state(std::string name, Shape shape, Init init, DType dtype) {
    check_unique_name(name, "state");
    check_shape(shape, "state");
    return emit({.op = Op::State, .shape = std::move(shape), .dtype = dtype, .name = std::move(name), .init = init});
}

Tensor Graph::constant(std::vector<double> values, Shape shape, DType dtype) {
    check_shape(shape, "constant");
    if (values.size() != 1 && static_cast<int64_t>(values.size()) != numel(shape)) {
        fail("constant", std::to_string(values.size()) + " values for shape " + shape_str(shape));
    }
    return emit({.op = Op::Constant, .shape = std::move(shape), .dtype = dtype, .data = std::move(values)});
}

Tensor Graph::scalar(double value, DType dtype) { return constant({value}, {}, dtype); }
Tensor Graph::full(Shape shape, double value, DType dtype) { return constant({value}, std::move(shape), dtype); }

// ---- pointwise ----

Tensor Graph::unary(Op op, Tensor x) {
    const char* name = op_info(op).name;
    check(x, name);
    const Node& in = node(x);
    const bool int_ok = op == Op::Neg || op == Op::Abs || op == Op::Relu || op == Op::Sign;
    if (!is_float(in.dtype) && !int_ok) fail(name, "needs a float tensor, got " + std::string(dtype_name(in.dtype)));
    return emit({.op = op, .inputs = {x.id}, .shape = in.shape, .dtype = in.dtype});
}

Tensor Graph::neg(Tensor x) { return unary(Op::Neg, x); }
Tensor Graph::exp(Tensor x) { return unary(Op::Exp, x); }
Tensor Graph::log(Tensor x) { return unary(Op::Log, x); }
Tensor Graph::sqrt(Tensor x) { return unary(Op::Sqrt, x); }
Tensor Graph::rsqrt(Tensor x) { return unary(Op::Rsqrt, x); }
Tensor Graph::abs(Tensor x) { return unary(Op::Abs, x); }
Tensor Graph::relu(Tensor x) { return unary(Op::Relu, x); }
Tensor Graph::sigmoid(Tensor x) { return unary(Op::Sigmoid, x); }
Tensor Graph::tanh(Tensor x) { return unary(Op::Tanh, x); }
Tensor Graph::silu(Tensor x) { return unary(Op::Silu, x); }

Tensor Graph::gelu(Tensor x, std::string_view approximate) {
    if (approximate == "none") return unary(Op::GeluErf, x);
    if (approximate == "tanh") return unary(Op::GeluTanh, x);
    fail("gelu", "approximate must be \"none\" or \"tanh\", got \"" + std::string(approximate) + "\"");
}

Tensor Graph::sign(Tensor x) { return unary(Op::Sign, x); }

Tensor Graph::gelu_deriv(Tensor x, std::string_view approximate) {
    if (approximate == "none") return unary(Op::GeluErfDeriv, x);
    if (approximate == "tanh") return unary(Op::GeluTanhDeriv, x);
    fail("gelu_deriv", "approximate must be \"none\" or \"tanh\", got \"" + std::string(approximate) + "\"");
}

Tensor Graph::cast(Tensor x, DType to) {
    check(x, "cast");
    return emit({.op = Op::Cast, .inputs = {x.id}, .shape = node(x).shape, .dtype = to});
}

Tensor Graph::binary(Op op, Tensor a, Tensor b) {
    const char* name = op_info(op).name;
    check(a, name);
    check(b, name);
    const Node& na = node(a);
    const Node& nb = node(b);
    if (na.dtype != nb.dtype) {
        fail(name, std::string("dtypes differ: a is ") + dtype_name(na.dtype) + ", b is " + dtype_name(nb.dtype));
    }
    if (na.dtype == DType::I32 && op == Op::Pow) fail(name, "needs float tensors, got i32");
    Shape out = broadcast_shapes(na.shape, nb.shape, name);
    return emit({.op = op, .inputs = {a.id, b.id}, .shape = std::move(out), .dtype = na.dtype});
}

Tensor Graph::add(Tensor a, Tensor b) { return binary(Op::Add, a, b); }
Tensor Graph::sub(Tensor a, Tensor b) { return binary(Op::Sub, a, b); }
Tensor Graph::mul(Tensor a, Tensor b) { return binary(Op::Mul, a, b); }
Tensor Graph::div(Tensor a, Tensor b) { return binary(Op::Div, a, b); }
Tensor Graph::maximum(Tensor a, Tensor b) { return binary(Op::Maximum, a, b); }
Tensor Graph::minimum(Tensor a, Tensor b) { return binary(Op::Minimum, a, b); }
Tensor Graph::pow(Tensor a, Tensor b) { return binary(Op::Pow, a, b); }
Tensor Graph::greater(Tensor a, Tensor b) { return binary(Op::Greater, a, b); }
Tensor Graph::equal(Tensor a, Tensor b) { return binary(Op::Equal, a, b); }
Tensor Graph::pow(Tensor a, double exponent) { return pow(a, scalar(exponent, a.dtype())); }

// ---- matmul ----

Tensor Graph::matmul(Tensor a, Tensor b, bool trans_a, bool trans_b) {
    check(a, "matmul");
    check(b, "matmul");
    const Node& na = node(a);
    const Node& nb = node(b);
    if (na.dtype != nb.dtype || !is_float(na.dtype)) {
        fail("matmul", std::string("needs float operands of one dtype, got ") + dtype_name(na.dtype) + " and " +
                           dtype_name(nb.dtype));
    }
    if (na.shape.size() < 2 || nb.shape.size() < 2) {
        fail("matmul", "a is " + shape_str(na.shape) + ", b is " + shape_str(nb.shape) +
                           ": operands need rank >= 2 (reshape vectors first)");
    }
    const size_t ra = na.shape.size(), rb = nb.shape.size();
    const int64_t m = trans_a ? na.shape[ra - 1] : na.shape[ra - 2];
    const int64_t ka = trans_a ? na.shape[ra - 2] : na.shape[ra - 1];
    const int64_t kb = trans_b ? nb.shape[rb - 1] : nb.shape[rb - 2];
    const int64_t n = trans_b ? nb.shape[rb - 2] : nb.shape[rb - 1];
    if (ka != kb) {
        fail("matmul", "a is " + shape_str(na.shape) + (trans_a ? "^T" : "") + ", b is " + shape_str(nb.shape) +
                           (trans_b ? "^T" : "") + ": inner dims " + std::to_string(ka) + " != " + std::to_string(kb));
    }
    Shape batch = broadcast_shapes(Shape(na.shape.begin(), na.shape.end() - 2),
                                   Shape(nb.shape.begin(), nb.shape.end() - 2), "matmul");
    batch.push_back(m);
    batch.push_back(n);
    return emit({.op = Op::MatMul, .inputs = {a.id, b.id}, .shape = std::move(batch), .dtype = na.dtype,
                 .ints = {trans_a, trans_b}});
}

Tensor Graph::linear(Tensor x, Tensor weight, std::optional<Tensor> bias) {
    check(x, "linear");
    check(weight, "linear");
    const Shape xs = node(x).shape;
    const Shape ws = node(weight).shape;
    if (ws.size() != 2 || xs.empty() || xs.back() != ws[1]) {
        fail("linear", "x is " + shape_str(xs) + ", weight is " + shape_str(ws) + ": weight must be [out, " +
                           std::to_string(xs.empty() ? 0 : xs.back()) + "]");
    }
    Tensor flat = xs.size() == 2 ? x : reshape(x, {-1, xs.back()});
    Tensor y = matmul(flat, weight, false, true);
    if (xs.size() != 2) {
        Shape out(xs.begin(), xs.end() - 1);
        out.push_back(ws[0]);
        y = reshape(y, out);
    }
    if (!bias) return y;
    // The bias after the reshape back: an activation that follows is then one pointwise tree with it, which the
    // product stores as its epilogue (schedule/fusion.hpp), where a bias before the reshape was that epilogue alone
    // and the activation a kernel of its own (Whisper's fc1 and GELU).
    const Shape bs = node(*bias).shape;
    if (bs != Shape{ws[0]}) fail("linear", "bias is " + shape_str(bs) + ", expected (" + std::to_string(ws[0]) + ")");
    return add(y, *bias);
}

// ---- reductions ----

Tensor Graph::reduce(Op op, Tensor x, std::vector<int64_t> axes, bool keepdim) {
    const char* name = op_info(op).name;
    check(x, name);
    const Node& in = node(x);
    if (!is_float(in.dtype)) fail(name, "needs a float tensor");
    const size_t rank = in.shape.size();
    if (axes.empty()) {
        axes.resize(rank);
        std::iota(axes.begin(), axes.end(), 0);
    }
    for (auto& a : axes) a = normalize_axis(a, rank, name);
    std::sort(axes.begin(), axes.end());
    if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) fail(name, "repeated axis");
    Shape out;
    for (size_t d = 0; d < rank; ++d) {
        const bool reduced = std::binary_search(axes.begin(), axes.end(), static_cast<int64_t>(d));
        if (!reduced) out.push_back(in.shape[d]);
        else if (keepdim) out.push_back(1);
        if (reduced && in.shape[d] == 0 && op == Op::Max) fail(name, "max over an empty axis");
    }
    return emit({.op = op, .inputs = {x.id}, .shape = std::move(out), .dtype = in.dtype,
                 .ints = std::move(axes), .flag = keepdim});
}

Tensor Graph::sum(Tensor x, std::vector<int64_t> axes, bool keepdim) { return reduce(Op::Sum, x, std::move(axes), keepdim); }
Tensor Graph::mean(Tensor x, std::vector<int64_t> axes, bool keepdim) { return reduce(Op::Mean, x, std::move(axes), keepdim); }
Tensor Graph::max(Tensor x, std::vector<int64_t> axes, bool keepdim) { return reduce(Op::Max, x, std::move(axes), keepdim); }

Tensor Graph::softmax(Tensor x, int64_t axis) {
    check(x, "softmax");
    const Node& in = node(x);
    if (!is_float(in.dtype)) fail("softmax", "needs a float tensor");
    const int64_t a = normalize_axis(axis, in.shape.size(), "softmax");
    return emit({.op = Op::Softmax, .inputs = {x.id}, .shape = in.shape, .dtype = in.dtype, .ints = {a}});
}

Tensor Graph::log_softmax(Tensor x, int64_t axis) {
    check(x, "log_softmax");
    const Node& in = node(x);
    if (!is_float(in.dtype)) fail("log_softmax", "needs a float tensor");
    const int64_t a = normalize_axis(axis, in.shape.size(), "log_softmax");
    return emit({.op = Op::LogSoftmax, .inputs = {x.id}, .shape = in.shape, .dtype = in.dtype, .ints = {a}});
}

void Graph::check_cross_entropy(Tensor logits, Tensor labels, int64_t ignore_index) const {
    check(logits, "cross_entropy");
    check(labels, "cross_entropy");
    const Node& nl = node(logits);
    const Node& nt = node(labels);
    if (nl.shape.size() != 2 || !is_float(nl.dtype)) {
        fail("cross_entropy", "logits must be float [N, C], got " + shape_str(nl.shape));
    }
    if (nt.dtype != DType::I32) fail("cross_entropy", std::string("labels must be i32, got ") + dtype_name(nt.dtype));
    if (nt.shape != Shape{nl.shape[0]}) {
        fail("cross_entropy", "logits are " + shape_str(nl.shape) + ", labels are " + shape_str(nt.shape) +
                                  ": expected labels (" + std::to_string(nl.shape[0]) + ")");
    }
    if (ignore_index < INT32_MIN || ignore_index > INT32_MAX)
        fail("cross_entropy", "ignore_index " + std::to_string(ignore_index) + " is not an i32 label");
}

Tensor Graph::cross_entropy(Tensor logits, Tensor labels, int64_t ignore_index) {
    check_cross_entropy(logits, labels, ignore_index);
    const Node& nl = node(logits);
    return emit({.op = Op::CrossEntropy, .inputs = {logits.id, labels.id}, .shape = {}, .dtype = nl.dtype,
                 .ints = {ignore_index}});
}

Tensor Graph::mse_loss(Tensor prediction, Tensor target) {
    check(prediction, "mse_loss");
    check(target, "mse_loss");
    const Node& np = node(prediction);
    const Node& nt = node(target);
    if (np.shape != nt.shape || np.dtype != nt.dtype || !is_float(np.dtype)) {
        fail("mse_loss", "prediction is " + shape_str(np.shape) + " " + dtype_name(np.dtype) + ", target is " +
                             shape_str(nt.shape) + " " + dtype_name(nt.dtype) + ": need equal float shapes");
    }
    return emit({.op = Op::MseLoss, .inputs = {prediction.id, target.id}, .shape = {}, .dtype = np.dtype});
}

Tensor Graph::cross_entropy_grad(Tensor logits, Tensor labels, Tensor upstream, int64_t ignore_index) {
    check(upstream, "cross_entropy_grad");
    check_cross_entropy(logits, labels, ignore_index);
    const Node& nu = node(upstream);
    if (!nu.shape.empty() || nu.dtype != node(logits).dtype) fail("cross_entropy_grad", "upstream must be a scalar of the logits' dtype");
    return emit({.op = Op::CrossEntropyGrad, .inputs = {logits.id, labels.id, upstream.id}, .shape = node(logits).shape,
                 .dtype = node(logits).dtype, .ints = {ignore_index}});
}

Tensor Graph::assign(Tensor target, Tensor value, std::string name) {
    check(target, "assign");
    check(value, "assign");
    const Node& t = node(target);
    const Node& v = node(value);
    if (t.op != Op::Parameter && t.op != Op::State) fail("assign", "the target must be a parameter or a state");
    if (t.shape != v.shape || t.dtype != v.dtype) {
        fail("assign", "target '" + t.name + "' is " + shape_str(t.shape) + " " + dtype_name(t.dtype) + ", value is " +
                           shape_str(v.shape) + " " + dtype_name(v.dtype));
    }
    return emit({.op = Op::Assign, .inputs = {target.id, value.id}, .shape = t.shape, .dtype = t.dtype, .name = std::move(name)});
}

// ---- data movement ----

Tensor Graph::reshape(Tensor x, Shape shape) {
    check(x, "reshape");
    const Node& in = node(x);
    int64_t known = 1;
    int infer = -1;
    for (size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] == -1) {
            if (infer >= 0) fail("reshape", "more than one -1 in " + shape_str(shape));
            infer = static_cast<int>(i);
        } else if (shape[i] < 0) {
            fail("reshape", "negative dimension in " + shape_str(shape));
        } else {
            known = count_product(known, shape[i], shape, "reshape");
        }
    }
    const int64_t total = numel(in.shape);
    if (infer >= 0) {
        if (known == 0 || total % known != 0) fail("reshape", "cannot reshape " + shape_str(in.shape) + " to " + shape_str(shape));
        shape[static_cast<size_t>(infer)] = total / known;
    }
    if (numel(shape) != total) fail("reshape", "cannot reshape " + shape_str(in.shape) + " to " + shape_str(shape));
    return emit({.op = Op::Reshape, .inputs = {x.id}, .shape = std::move(shape), .dtype = in.dtype});
}

Tensor Graph::permute(Tensor x, std::vector<int64_t> perm) {
    check(x, "permute");
    const Node& in = node(x);
    if (perm.size() != in.shape.size()) {
        fail("permute", "x is " + shape_str(in.shape) + ", perm " + shape_str(perm) + " has the wrong length");
    }
    std::vector<bool> seen(perm.size());
    Shape out;
    for (auto& p : perm) {
        p = normalize_axis(p, perm.size(), "permute");
        if (seen[static_cast<size_t>(p)]) fail("permute", "perm " + shape_str(perm) + " repeats an axis");
        seen[static_cast<size_t>(p)] = true;
        out.push_back(in.shape[static_cast<size_t>(p)]);
    }
    return emit({.op = Op::Permute, .inputs = {x.id}, .shape = std::move(out), .dtype = in.dtype, .ints = std::move(perm)});
}

Tensor Graph::transpose(Tensor x, int64_t dim0, int64_t dim1) {
    check(x, "transpose");
    const size_t rank = node(x).shape.size();
    std::vector<int64_t> perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[static_cast<size_t>(normalize_axis(dim0, rank, "transpose"))],
              perm[static_cast<size_t>(normalize_axis(dim1, rank, "transpose"))]);
    return permute(x, std::move(perm));
}

Tensor Graph::slice(Tensor x, int64_t axis, int64_t start, int64_t end, int64_t step) {
    check(x, "slice");
    const Node& in = node(x);
    const size_t rank = in.shape.size();
    const auto a = static_cast<size_t>(normalize_axis(axis, rank, "slice"));
    if (step < 1) fail("slice", "step must be >= 1, got " + std::to_string(step));
    const int64_t dim = in.shape[a];
    auto clamp = [dim](int64_t v) { return std::clamp(v < 0 ? v + dim : v, int64_t{0}, dim); };
    start = clamp(start);
    end = std::max(clamp(end), start);
    std::vector<int64_t> ints(3 * rank);
    for (size_t d = 0; d < rank; ++d) {
        ints[d] = d == a ? start : 0;
        ints[rank + d] = d == a ? end : in.shape[d];
        ints[2 * rank + d] = d == a ? step : 1;
    }
    Shape out = in.shape;
    out[a] = (end - start + step - 1) / step;
    return emit({.op = Op::Slice, .inputs = {x.id}, .shape = std::move(out), .dtype = in.dtype, .ints = std::move(ints)});
}

Tensor Graph::concat(const std::vector<Tensor>& xs, int64_t axis) {
    if (xs.empty()) fail("concat", "needs at least one tensor");
    for (auto t : xs) check(t, "concat");
    const Node& first = node(xs[0]);
    const auto a = static_cast<size_t>(normalize_axis(axis, first.shape.size(), "concat"));
    Shape out = first.shape;
    out[a] = 0;
    Node n{.op = Op::Concat, .dtype = first.dtype, .ints = {static_cast<int64_t>(a)}};
    for (auto t : xs) {
        const Node& in = node(t);
        Shape probe = in.shape;
        if (probe.size() == out.size()) probe[a] = 0;
        if (probe != out || in.dtype != first.dtype) {
            fail("concat", "tensors " + shape_str(first.shape) + " and " + shape_str(in.shape) +
                               " differ outside axis " + std::to_string(a));
        }
        n.inputs.push_back(t.id);
    }
    for (auto t : xs) out[a] += node(t).shape[a];
    n.shape = std::move(out);
    return emit(std::move(n));
}

Tensor Graph::expand(Tensor x, Shape shape) {
    check(x, "expand");
    const Node& in = node(x);
    if (broadcast_shapes(in.shape, shape, "expand") != shape) {
        fail("expand", "cannot expand " + shape_str(in.shape) + " to " + shape_str(shape));
    }
    return emit({.op = Op::Expand, .inputs = {x.id}, .shape = std::move(shape), .dtype = in.dtype});
}

Tensor Graph::flatten(Tensor x, int64_t start_dim) {
    check(x, "flatten");
    const Shape& s = node(x).shape;
    const auto a = static_cast<size_t>(normalize_axis(start_dim, s.size(), "flatten"));
    Shape out(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(a));
    out.push_back(-1);
    return reshape(x, out);
}

void Graph::output(std::string name, Tensor x) {
    check(x, "output");
    for (const auto& [n, id] : outputs_) {
        if (n == name) fail("output", "name '" + name + "' is already an output");
    }
    outputs_.emplace_back(std::move(name), x.id);
}

std::string Graph::str() const {
    std::ostringstream os;
    for (size_t i = 0; i < nodes_.size(); ++i) {
        const Node& n = nodes_[i];
        os << "%" << i << " = " << op_info(n.op).name;
        if (!n.name.empty()) os << " '" << n.name << "'";
        for (size_t k = 0; k < n.inputs.size(); ++k) os << (k ? ", %" : " %") << n.inputs[k];
        if (!n.ints.empty()) os << " " << shape_str(n.ints);
        os << " : " << dtype_name(n.dtype) << shape_str(n.shape) << "\n";
    }
    for (const auto& [name, id] : outputs_) os << "output '" << name << "' = %" << id << "\n";
    return os.str();
}

// ---- operators ----

static Tensor scalar_like(Tensor t, double v) { return t.graph->scalar(v, t.dtype()); }

Tensor operator+(Tensor a, Tensor b) { return a.graph->add(a, b); }
Tensor operator-(Tensor a, Tensor b) { return a.graph->sub(a, b); }
Tensor operator*(Tensor a, Tensor b) { return a.graph->mul(a, b); }
Tensor operator/(Tensor a, Tensor b) { return a.graph->div(a, b); }
Tensor operator-(Tensor a) { return a.graph->neg(a); }
Tensor operator+(Tensor a, double b) { return a.graph->add(a, scalar_like(a, b)); }
Tensor operator-(Tensor a, double b) { return a.graph->sub(a, scalar_like(a, b)); }
Tensor operator*(Tensor a, double b) { return a.graph->mul(a, scalar_like(a, b)); }
Tensor operator/(Tensor a, double b) { return a.graph->div(a, scalar_like(a, b)); }
Tensor operator*(double a, Tensor b) { return b.graph->mul(scalar_like(b, a), b); }

}  // namespace mn
