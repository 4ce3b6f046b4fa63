// The C API's graph builders: each checks its handles (a tensor id must be a node of this graph)
// and calls the mn::Graph builder of the same name; the pointwise and reduction families are
// chosen by PyTorch's op name from a table, so a new op is one row.
#include <functional>
#include <map>

#include "capi/handles.hpp"

namespace mn::capi {

namespace {

Tensor tensor(mn_graph& g, mn_tensor t, const char* what) {
    if (t < 0 || t >= static_cast<mn_tensor>(g.graph.nodes().size()))
        throw Error(std::string(what) + " is " + std::to_string(t) + ", not a tensor of this graph");
    return g.graph.handle(t);
}

std::optional<Tensor> optional_tensor(mn_graph& g, mn_tensor t, const char* what) {
    if (t == MN_NO_TENSOR) return std::nullopt;
    return tensor(g, t, what);
}

std::vector<int64_t> ints(int n, const int64_t* values, const char* what) {
    if (n < 0) throw Error(std::string(what) + ": a count of " + std::to_string(n));
    if (n > 0) required(values, what);
    return std::vector<int64_t>(values, values + n);
}

DType dtype_of(mn_dtype d) {
    switch (d) {
        case MN_F32: return DType::F32;
        case MN_F16: return DType::F16;
        case MN_I32: return DType::I32;
    }
    throw Error("unknown dtype " + std::to_string(static_cast<int>(d)) + "; expected MN_F32, MN_F16 or MN_I32");
}

Init init_of(mn_init kind, double a, double b) {
    switch (kind) {
        case MN_INIT_ZEROS: return Init::zeros();
        case MN_INIT_ONES: return Init::ones();
        case MN_INIT_UNIFORM: return Init::uniform(a, b);
        case MN_INIT_NORMAL: return Init::normal(a, b);
    }
    throw Error("unknown init " + std::to_string(static_cast<int>(kind)));
}

template <class Fn>
const Fn& by_name(const std::map<std::string, Fn>& table, const char* op, const char* family) {
    const std::string name = text(op, "op");
    auto it = table.find(name);
    if (it != table.end()) return it->second;
    std::string known;
    for (const auto& [k, fn] : table) known += (known.empty() ? "" : " ") + k;
    throw Error("unknown " + std::string(family) + " op '" + name + "'; known: " + known);
}

using Unary = std::function<Tensor(Graph&, Tensor)>;
using Binary = std::function<Tensor(Graph&, Tensor, Tensor)>;
using Reduce = std::function<Tensor(Graph&, Tensor, std::vector<int64_t>, bool)>;

const std::map<std::string, Unary> kUnary = {
    {"neg", &Graph::neg},         {"exp", &Graph::exp},     {"log", &Graph::log},
    {"sqrt", &Graph::sqrt},       {"rsqrt", &Graph::rsqrt}, {"abs", &Graph::abs},
    {"relu", &Graph::relu},       {"sigmoid", &Graph::sigmoid}, {"tanh", &Graph::tanh},
    {"silu", &Graph::silu},       {"sign", &Graph::sign},
    {"gelu", [](Graph& g, Tensor x) { return g.gelu(x, "none"); }},
    {"gelu_tanh", [](Graph& g, Tensor x) { return g.gelu(x, "tanh"); }},
};
const std::map<std::string, Binary> kBinary = {
    {"add", &Graph::add},         {"sub", &Graph::sub},         {"mul", &Graph::mul},
    {"div", &Graph::div},         {"maximum", &Graph::maximum}, {"minimum", &Graph::minimum},
    {"pow", [](Graph& g, Tensor a, Tensor b) { return g.pow(a, b); }},
    {"greater", &Graph::greater}, {"equal", &Graph::equal},
};
const std::map<std::string, Reduce> kReduce = {{"sum", &Graph::sum}, {"mean", &Graph::mean}, {"max", &Graph::max}};

// Runs `build` on the graph and writes the tensor it returns to *out.
template <class Build>
mn_status emit(mn_graph* g, mn_tensor* out, Build&& build) {
    return guard([&] {
        required(out, "out") = MN_NO_TENSOR;
        *out = build(required(g, "graph")).id;
    });
}

}  // namespace

}  // namespace mn::capi

using namespace mn::capi;

extern "C" {

mn_status mn_graph_new(mn_graph** graph) {
    return guard([&] { required(graph, "graph") = new mn_graph; });
}

void mn_graph_free(mn_graph* graph) { delete graph; }

mn_status mn_graph_shape(const mn_graph* graph, mn_tensor t, int64_t* dims, int capacity, int* ndim) {
    return guard([&] {
        auto& g = const_cast<mn_graph&>(required(graph, "graph"));
        write_shape(tensor(g, t, "t").shape(), dims, capacity, ndim);
    });
}

mn_status mn_graph_dtype(const mn_graph* graph, mn_tensor t, mn_dtype* dtype) {
    return guard([&] {
        auto& g = const_cast<mn_graph&>(required(graph, "graph"));
        const mn::DType d = tensor(g, t, "t").dtype();
        required(dtype, "dtype") = d == mn::DType::F32 ? MN_F32 : d == mn::DType::F16 ? MN_F16 : MN_I32;
    });
}

mn_status mn_graph_input(mn_graph* g, const char* name, int ndim, const int64_t* shape, mn_dtype dtype, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) {
        return h.graph.input(text(name, "name"), ints(ndim, shape, "shape"), dtype_of(dtype));
    });
}

mn_status mn_graph_parameter(mn_graph* g, const char* name, int ndim, const int64_t* shape, mn_init init, double a,
                             double b, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) {
        return h.graph.parameter(text(name, "name"), ints(ndim, shape, "shape"), init_of(init, a, b));
    });
}

mn_status mn_graph_scalar(mn_graph* g, double value, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) { return h.graph.scalar(value); });
}

mn_status mn_graph_output(mn_graph* g, const char* name, mn_tensor t) {
    return guard([&] {
        mn_graph& h = required(g, "graph");
        h.graph.output(text(name, "name"), tensor(h, t, "t"));
    });
}

mn_status mn_graph_unary(mn_graph* g, const char* op, mn_tensor x, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) { return by_name(kUnary, op, "unary")(h.graph, tensor(h, x, "x")); });
}

mn_status mn_graph_binary(mn_graph* g, const char* op, mn_tensor a, mn_tensor b, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) {
        return by_name(kBinary, op, "binary")(h.graph, tensor(h, a, "a"), tensor(h, b, "b"));
    });
}

mn_status mn_graph_matmul(mn_graph* g, mn_tensor a, mn_tensor b, int trans_a, int trans_b, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) {
        return h.graph.matmul(tensor(h, a, "a"), tensor(h, b, "b"), trans_a != 0, trans_b != 0);
    });
}

mn_status mn_graph_linear(mn_graph* g, mn_tensor x, mn_tensor weight, mn_tensor bias, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) {
        return h.graph.linear(tensor(h, x, "x"), tensor(h, weight, "weight"), optional_tensor(h, bias, "bias"));
    });
}

mn_status mn_graph_conv2d(mn_graph* g, mn_tensor x, mn_tensor weight, mn_tensor bias, int64_t stride, int64_t padding,
                          int64_t dilation, int64_t groups, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) {
        return h.graph.conv2d(tensor(h, x, "x"), tensor(h, weight, "weight"), optional_tensor(h, bias, "bias"),
                              {.stride = stride, .padding = padding, .dilation = dilation, .groups = groups});
    });
}

mn_status mn_graph_attention(mn_graph* g, mn_tensor q, mn_tensor k, mn_tensor v, int causal, double scale,
                             mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) {
        return h.graph.attention(tensor(h, q, "q"), tensor(h, k, "k"), tensor(h, v, "v"),
                                 {.causal = causal != 0, .scale = scale});
    });
}

mn_status mn_graph_reduce(mn_graph* g, const char* op, mn_tensor x, int naxes, const int64_t* axes, int keepdim,
                          mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) {
        return by_name(kReduce, op, "reduction")(h.graph, tensor(h, x, "x"), ints(naxes, axes, "axes"), keepdim != 0);
    });
}

mn_status mn_graph_softmax(mn_graph* g, mn_tensor x, int64_t axis, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) { return h.graph.softmax(tensor(h, x, "x"), axis); });
}

mn_status mn_graph_log_softmax(mn_graph* g, mn_tensor x, int64_t axis, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) { return h.graph.log_softmax(tensor(h, x, "x"), axis); });
}

mn_status mn_graph_layer_norm(mn_graph* g, mn_tensor x, mn_tensor weight, mn_tensor bias, double eps, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) {
        return h.graph.layer_norm(tensor(h, x, "x"), tensor(h, weight, "weight"), tensor(h, bias, "bias"), eps);
    });
}

mn_status mn_graph_rms_norm(mn_graph* g, mn_tensor x, mn_tensor weight, double eps, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) { return h.graph.rms_norm(tensor(h, x, "x"), tensor(h, weight, "weight"), eps); });
}

mn_status mn_graph_max_pool2d(mn_graph* g, mn_tensor x, int64_t kernel, int64_t stride, int64_t padding, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) { return h.graph.max_pool2d(tensor(h, x, "x"), kernel, stride, padding); });
}

mn_status mn_graph_avg_pool2d(mn_graph* g, mn_tensor x, int64_t kernel, int64_t stride, int64_t padding, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) { return h.graph.avg_pool2d(tensor(h, x, "x"), kernel, stride, padding); });
}

mn_status mn_graph_reshape(mn_graph* g, mn_tensor x, int ndim, const int64_t* shape, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) { return h.graph.reshape(tensor(h, x, "x"), ints(ndim, shape, "shape")); });
}

mn_status mn_graph_permute(mn_graph* g, mn_tensor x, int ndim, const int64_t* perm, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) { return h.graph.permute(tensor(h, x, "x"), ints(ndim, perm, "perm")); });
}

mn_status mn_graph_transpose(mn_graph* g, mn_tensor x, int64_t dim0, int64_t dim1, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) { return h.graph.transpose(tensor(h, x, "x"), dim0, dim1); });
}

mn_status mn_graph_flatten(mn_graph* g, mn_tensor x, int64_t start_dim, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) { return h.graph.flatten(tensor(h, x, "x"), start_dim); });
}

mn_status mn_graph_slice(mn_graph* g, mn_tensor x, int64_t axis, int64_t start, int64_t end, int64_t step,
                         mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) { return h.graph.slice(tensor(h, x, "x"), axis, start, end, step); });
}

mn_status mn_graph_concat(mn_graph* g, int count, const mn_tensor* xs, int64_t axis, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) {
        if (count < 1) throw mn::Error("concat needs at least one tensor, got " + std::to_string(count));
        required(xs, "xs");
        std::vector<mn::Tensor> tensors;
        for (int i = 0; i < count; ++i) tensors.push_back(tensor(h, xs[i], "xs[i]"));
        return h.graph.concat(tensors, axis);
    });
}

mn_status mn_graph_embedding(mn_graph* g, mn_tensor ids, mn_tensor weight, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) { return h.graph.embedding(tensor(h, ids, "ids"), tensor(h, weight, "weight")); });
}

mn_status mn_graph_cross_entropy(mn_graph* g, mn_tensor logits, mn_tensor labels, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) {
        return h.graph.cross_entropy(tensor(h, logits, "logits"), tensor(h, labels, "labels"));
    });
}

mn_status mn_graph_mse_loss(mn_graph* g, mn_tensor prediction, mn_tensor target, mn_tensor* out) {
    return emit(g, out, [&](mn_graph& h) {
        return h.graph.mse_loss(tensor(h, prediction, "prediction"), tensor(h, target, "target"));
    });
}

}  // extern "C"
