#pragma once
// The typed static graph: what a user builds, what every pass reads.
//
// A Graph is a list of nodes in topological order (a node only refers to earlier nodes). Every
// builder call checks its operands and infers the result's shape and dtype at once, so a graph that
// was built is well-typed; errors name the op and the shapes involved.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meganeura/error.hpp"

namespace mn {

enum class DType : uint8_t { F32, F16, I32 };
const char* dtype_name(DType t);
size_t dtype_size(DType t);

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);
int64_t numel(const Shape& s);

enum class Archetype : uint8_t { Leaf, Pointwise, Reduction, MatMul, Conv, Attention, DataMovement };

enum class Op : uint8_t {
#define X(e, n, a, ar, d) e,
#include "meganeura/ops.def"
#undef X
};
inline constexpr int kOpCount = 0
#define X(e, n, a, ar, d) +1
#include "meganeura/ops.def"
#undef X
    ;

struct OpInfo {
    const char* name;
    Archetype archetype;
    int arity;            // -1: variadic (one input or more)
    bool differentiable;  // mn::grad has its rule (ops.def's Vjp)
};
const OpInfo& op_info(Op op);

// How a parameter is filled before training starts (PyTorch's defaults are expressible).
struct Init {
    enum Kind : uint8_t { Zeros, Ones, Uniform, Normal } kind = Zeros;
    // Uniform: [a, b); Normal: mean a, std b (Irwin-Hall's sum of 12 uniforms: within 6 deviations). The values are
    // a hash of (CompileOptions::seed, the parameter's name, the element), the same bits on every device.
    double a = 0, b = 0;
    static Init zeros() { return {Zeros}; }
    static Init ones() { return {Ones}; }
    static Init uniform(double lo, double hi) { return {Uniform, lo, hi}; }
    static Init normal(double mean, double std) { return {Normal, mean, std}; }
};

class Graph;
// A handle to one node of a graph; cheap to copy. Arithmetic operators build nodes in its graph.
struct Tensor {
    Graph* graph = nullptr;
    int32_t id = -1;
    bool valid() const { return graph != nullptr && id >= 0; }
    const Shape& shape() const;
    DType dtype() const;
};

// Options of Graph::attention (torch's scaled_dot_product_attention plus the masks LLMs need).
struct AttentionOptions {
    bool causal = false;  // query at position p sees keys 0..p
    double scale = 0;     // 0: 1/sqrt(head dim)
    int64_t window = 0;   // sliding window: a query at p sees only keys p-window+1..p; 0: off
    // Position of query row 0 among the keys, an i32 scalar tensor (a KV-cache decode's step);
    // unset: Tk - Tq, so the last query row lines up with the last key (torch's bottom-right causal).
    std::optional<Tensor> query_start;
};

// Options of Graph::conv1d / conv2d, as in torch.nn.functional (square in 2d).
struct ConvOptions {
    int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
};

struct Node {
    Op op;
    std::vector<int32_t> inputs;
    Shape shape;
    DType dtype = DType::F32;
    std::vector<int64_t> ints;  // op attributes, see ops.def
    std::vector<double> data;   // Constant values
    bool flag = false;          // Reduce: keepdim; GeluErf/GeluTanh unused
    std::string name;           // Input / Parameter / State; an Assign's: what the write is (Graph::assign)
    Init init;                  // Parameter
    bool requires_grad = true;  // Parameter: false freezes it (no gradient, no optimizer state, no update)
    // Appended by mn::grad: a gradient's. Precision fast chooses its products' kernels by it (sched::Tuning's
    // fast_gradients and split_forward), and common subexpressions never merge it with the forward's.
    bool gradient = false;
};

class Graph {
public:
    // leaves
    Tensor input(std::string name, Shape shape, DType dtype = DType::F32);
    Tensor parameter(std::string name, Shape shape, Init init = Init::zeros(), DType dtype = DType::F32);
    Tensor constant(std::vector<double> values, Shape shape, DType dtype = DType::F32);
    Tensor scalar(double value, DType dtype = DType::F32);
    // torch's requires_grad_: training leaves a frozen parameter (false) as it is, with no gradient
    // and no optimizer state, so fine-tuning a few of them (LoRA) costs their memory, not the model's.
    void set_requires_grad(Tensor parameter, bool requires_grad);
    Tensor full(Shape shape, double value, DType dtype = DType::F32);

    // unary
    Tensor neg(Tensor x);
    Tensor exp(Tensor x);
    Tensor log(Tensor x);
    Tensor sqrt(Tensor x);
    Tensor rsqrt(Tensor x);
    Tensor abs(Tensor x);
    Tensor relu(Tensor x);
    Tensor sigmoid(Tensor x);
    Tensor tanh(Tensor x);
    Tensor silu(Tensor x);
    Tensor gelu(Tensor x, std::string_view approximate = "none");  // "none" (erf) or "tanh"
    Tensor cast(Tensor x, DType to);
    Tensor sign(Tensor x);                                                // -1, 0 or 1
    Tensor gelu_deriv(Tensor x, std::string_view approximate = "none");  // d gelu(x) / dx

    // binary, NumPy broadcasting; a double operand becomes a scalar constant of x's dtype
    Tensor add(Tensor a, Tensor b);
    Tensor sub(Tensor a, Tensor b);
    Tensor mul(Tensor a, Tensor b);
    Tensor div(Tensor a, Tensor b);
    Tensor maximum(Tensor a, Tensor b);
    Tensor minimum(Tensor a, Tensor b);
    Tensor pow(Tensor a, Tensor b);
    Tensor pow(Tensor a, double exponent);
    Tensor greater(Tensor a, Tensor b);  // 1 where a > b, else 0, in a's dtype
    Tensor equal(Tensor a, Tensor b);    // 1 where a == b, else 0

    // matmul: a [..., M, K] @ b [..., K, N] with broadcast batch dims; trans_* read the operand's
    // last two dims swapped without a copy. linear: x [..., in] @ weight[out, in]^T + bias[out].
    Tensor matmul(Tensor a, Tensor b, bool trans_a = false, bool trans_b = false);
    Tensor linear(Tensor x, Tensor weight, std::optional<Tensor> bias = std::nullopt);

    // attention: q [B, Hq, Tq, D], k and v [B, Hkv, Tk, D], Hq a multiple of Hkv (grouped-query
    // heads: query head h reads kv head h / (Hq / Hkv)); result [B, Hq, Tq, D].
    Tensor attention(Tensor q, Tensor k, Tensor v, const AttentionOptions& options = {});

    // convolution: conv1d x [N, C, L], weight [O, C / groups, K]; conv2d x [N, C, H, W],
    // weight [O, C / groups, K, K]; optional bias [O].
    Tensor conv1d(Tensor x, Tensor weight, std::optional<Tensor> bias = std::nullopt, const ConvOptions& o = {});
    Tensor conv2d(Tensor x, Tensor weight, std::optional<Tensor> bias = std::nullopt, const ConvOptions& o = {});
    // conv2d's derivatives, which autodiff builds; `attrs` are the Conv2d node's ints (ops.def).
    Tensor conv2d_grad_input(Tensor gy, Tensor weight, Shape x_shape, std::vector<int64_t> attrs);
    Tensor conv2d_grad_weight(Tensor x, Tensor gy, Shape weight_shape, std::vector<int64_t> attrs);

    // normalization over x [N, C, ...] (torch.nn.functional semantics). batch_norm in training mode
    // normalizes with the batch's statistics and, when running stats are given, assigns their
    // momentum update (unbiased variance) into those State/Parameter tensors; in eval mode it uses
    // the running stats. group_norm: `groups` divides C; weight and bias [C].
    Tensor batch_norm(Tensor x, Tensor weight, Tensor bias, std::optional<Tensor> running_mean,
                      std::optional<Tensor> running_var, bool training, double momentum = 0.1, double eps = 1e-5);
    Tensor group_norm(Tensor x, int64_t groups, Tensor weight, Tensor bias, double eps = 1e-5);
    // d group_norm / d x for `upstream` of x's shape, which autodiff builds.
    Tensor group_norm_grad(Tensor x, int64_t groups, Tensor weight, Tensor upstream, double eps);

    // pooling over x [N, C, H, W]; stride 0 means stride = kernel. max_pool2d pads with -inf,
    // avg_pool2d counts the zero padding (count_include_pad). global_avg_pool2d -> [N, C, 1, 1].
    Tensor max_pool2d(Tensor x, int64_t kernel, int64_t stride = 0, int64_t padding = 0);
    Tensor max_pool2d_grad(Tensor x, Tensor gy, int64_t kernel, int64_t stride, int64_t padding);
    Tensor avg_pool2d(Tensor x, int64_t kernel, int64_t stride = 0, int64_t padding = 0);
    Tensor global_avg_pool2d(Tensor x);
    // nearest-neighbour upsampling by 2 in both spatial dims: [N, C, H, W] -> [N, C, 2H, 2W]
    Tensor upsample_nearest2x(Tensor x);

    // reductions; empty axes = all axes; negative axes count from the end
    Tensor sum(Tensor x, std::vector<int64_t> axes = {}, bool keepdim = false);
    Tensor mean(Tensor x, std::vector<int64_t> axes = {}, bool keepdim = false);
    Tensor max(Tensor x, std::vector<int64_t> axes = {}, bool keepdim = false);
    Tensor softmax(Tensor x, int64_t axis = -1);
    Tensor log_softmax(Tensor x, int64_t axis = -1);

    // losses. cross_entropy: logits [N, C] with i32 labels [N], as torch's F.cross_entropy: rows whose
    // label is ignore_index count for nothing and the mean is over the other rows (NaN when there
    // are none, as in torch). mse_loss: the mean over all elements.
    static constexpr int64_t kIgnoreIndex = -100;
    Tensor cross_entropy(Tensor logits, Tensor labels, int64_t ignore_index = kIgnoreIndex);
    Tensor mse_loss(Tensor prediction, Tensor target);
    // d cross_entropy(logits, labels, ignore_index) / d logits, times the scalar `upstream`.
    Tensor cross_entropy_grad(Tensor logits, Tensor labels, Tensor upstream, int64_t ignore_index = kIgnoreIndex);

    // transformer ops (torch.nn.functional names). embedding: rows of weight [V, D] by i32 ids
    // [...] -> [..., D]. rms_norm and layer_norm normalize over the last dim (Llama / nn.LayerNorm).
    // rope: x [..., T, D] rotated by position (positions i32 [T]) with Hugging Face Llama's
    // rotate-half pairing (i, i + D/2) and frequencies theta^(-2i/D).
    Tensor embedding(Tensor ids, Tensor weight);
    Tensor rms_norm(Tensor x, Tensor weight, double eps = 1e-6);
    Tensor layer_norm(Tensor x, Tensor weight, Tensor bias, double eps = 1e-5);
    Tensor rope(Tensor x, Tensor positions, double theta = 10000.0);
    // x with src written at [start, start + src length) along axis; start is an i32 scalar tensor
    // (a KV-cache position known at run time). The GPU clamps start into range; the reference
    // rejects a start out of range. Differentiable in x and src (d src reads the rows back at start).
    Tensor slice_scatter(Tensor x, Tensor src, int64_t axis, Tensor start);
    // derivatives the VJP rules use: d embedding / d weight (summed per id, deterministic), the
    // norms' d / d x, and rope with explicit frequencies, turning the other way when `inverse`
    Tensor embedding_grad(Tensor ids, Tensor upstream, int64_t vocab);
    Tensor rms_norm_grad(Tensor x, Tensor weight, Tensor upstream, double eps);
    Tensor layer_norm_grad(Tensor x, Tensor weight, Tensor upstream, double eps);
    Tensor rope_rotate(Tensor x, Tensor positions, Tensor inv_freq, bool inverse);

    // Training state that persists across runs (optimizer moments), zero-initialized by default.
    Tensor state(std::string name, Shape shape, Init init = Init::zeros(), DType dtype = DType::F32);
    // Writes `value` into a parameter's or state's storage once everything else in the program
    // has read the old contents (so every other reader of `target`, before or after this call,
    // sees the old value). Returns a handle to the written value. A name says what the write is: an
    // optimizer's updates of the parameters carry the optimizer's ("adamw"), and the compiler runs the
    // pointwise ones of one name together (schedule/fusion.hpp).
    Tensor assign(Tensor target, Tensor value, std::string name = {});

    // data movement
    Tensor reshape(Tensor x, Shape shape);  // one dim may be -1
    Tensor permute(Tensor x, std::vector<int64_t> perm);
    Tensor transpose(Tensor x, int64_t dim0, int64_t dim1);
    Tensor slice(Tensor x, int64_t axis, int64_t start, int64_t end, int64_t step = 1);
    Tensor concat(const std::vector<Tensor>& xs, int64_t axis);
    Tensor expand(Tensor x, Shape shape);  // broadcast to shape
    Tensor flatten(Tensor x, int64_t start_dim = 1);

    // Names a value the session can read back with get(name).
    void output(std::string name, Tensor x);

    // introspection
    const std::vector<Node>& nodes() const { return nodes_; }
    const Node& node(Tensor t) const;
    const Node& node(int32_t id) const { return nodes_.at(static_cast<size_t>(id)); }
    const std::vector<std::pair<std::string, int32_t>>& outputs() const { return outputs_; }
    std::optional<Tensor> find(std::string_view name) const;  // input, parameter or output
    Tensor handle(int32_t id) { return Tensor{this, id}; }
    std::string str() const;  // the printer, one node per line

    // Appends a node whose shape and dtype the caller has already checked (used by passes).
    Tensor emit(Node n);

    // Marks the nodes from id `first` to the last as gradients (Node::gradient; mn::grad, for what it appended).
    void mark_gradients(int32_t first);
    // Whether a node is a gradient's (mn::grad appended a backward).
    bool has_gradients() const { return has_gradients_; }

private:
    Tensor unary(Op op, Tensor x);
    Tensor binary(Op op, Tensor a, Tensor b);
    Tensor reduce(Op op, Tensor x, std::vector<int64_t> axes, bool keepdim);
    void check(Tensor t, const char* op) const;
    void check_cross_entropy(Tensor logits, Tensor labels, int64_t ignore_index) const;
    void check_unique_name(const std::string& name, const char* op) const;
    Tensor norm(Op op, Tensor x, Tensor weight, std::optional<Tensor> third, double eps);
    Tensor group_norm_node(Op op, Tensor x, int64_t groups, Tensor weight, Tensor third, double eps);
    Shape conv2d_shape(const char* op, const Shape& x, const Shape& w, const std::vector<int64_t>& attrs) const;
    Tensor conv2d_node(Tensor x, Tensor weight, std::vector<int64_t> attrs, const char* op);
    Tensor add_channel_bias(Tensor y, std::optional<Tensor> bias, const char* op);

    std::vector<Node> nodes_;
    std::vector<std::pair<std::string, int32_t>> outputs_;
    bool has_gradients_ = false;
};

// Checks the graph against ops.def, as every pass must leave it: each node's input count is its op's arity
// (leaves read nothing, a variadic op one input or more), and outputs name nodes. Throws Error naming the first
// node that is not so. The compiler runs it on the graph it lowers.
void verify_graph(const Graph& g);

// PyTorch-style operators
Tensor operator+(Tensor a, Tensor b);
Tensor operator-(Tensor a, Tensor b);
Tensor operator*(Tensor a, Tensor b);
Tensor operator/(Tensor a, Tensor b);
Tensor operator-(Tensor a);
Tensor operator+(Tensor a, double b);
Tensor operator-(Tensor a, double b);
Tensor operator*(Tensor a, double b);
Tensor operator/(Tensor a, double b);
Tensor operator*(double a, Tensor b);

// Broadcast result shape of a and b, or an error naming op.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace mn
