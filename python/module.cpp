// The Python module `meganeura`: the C++ API (meganeura/graph.hpp, meganeura/session.hpp) one to
// one, with numpy arrays for data. mn::Error becomes meganeura.Error (a RuntimeError, as torch's
// errors are). Every Tensor keeps its Graph alive, so a graph dropped while its tensors are in use
// is never freed under them; run, step and compile release the GIL.
#include <pybind11/numpy.h>
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <set>
#include <span>

#include "meganeura/meganeura.hpp"
#include "meganeura/onnx.hpp"
#include "meganeura/version.h"

namespace py = pybind11;

namespace {

using mn::Graph;
using mn::Tensor;

py::tuple shape_tuple(const mn::Shape& shape) { return py::tuple(py::cast(shape)); }

void check_shape(const mn::Session& s, const std::string& name, const py::array& array) {
    const mn::Shape want = s.shape(name);
    const mn::Shape got(array.shape(), array.shape() + array.ndim());
    if (got != want)
        throw mn::Error("set '" + name + "': the array is " + mn::shape_str(got) + ", the tensor " + mn::shape_str(want));
}

bool integer(const py::array& array) { return array.dtype().kind() == 'i' || array.dtype().kind() == 'u'; }

std::vector<float> floats_of(const py::array& array) {
    auto floats = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(array);
    return {floats.data(), floats.data() + floats.size()};
}

// session.set: an integer array sets an i32 tensor, any other a float one; the shape must match.
void set_array(mn::Session& s, const std::string& name, const py::array& array) {
    check_shape(s, name, array);
    if (integer(array)) {
        auto ints = py::array_t<int32_t, py::array::c_style | py::array::forcecast>::ensure(array);
        s.set(name, std::vector<int32_t>(ints.data(), ints.data() + ints.size()));
    } else {
        s.set(name, floats_of(array));
    }
}

// session.set({name: array, ...}): each as set(name, array), the float ones in one transfer to the device. Every array
// is checked (shape, and an integer one's tensor i32) before any is written, as Session::set(map) does.
void set_arrays(mn::Session& s, const py::dict& arrays) {
    std::map<std::string, std::vector<float>> floats;
    std::vector<std::pair<std::string, py::array>> ints;  // inputs: written to host-visible memory, no transfer
    for (const auto& [key, value] : arrays) {
        const std::string name = py::cast<std::string>(key);
        const py::array array = py::array::ensure(value);
        if (!array) throw mn::Error("set '" + name + "': not an array");
        check_shape(s, name, array);
        if (!integer(array)) {
            floats[name] = floats_of(array);
        } else if (s.dtype(name) != mn::DType::I32) {
            throw mn::Error("set '" + name + "': the tensor is " + mn::dtype_name(s.dtype(name)) + "; pass float values");
        } else {
            ints.emplace_back(name, array);
        }
    }
    s.set(floats);
    for (const auto& [name, array] : ints) set_array(s, name, array);
}

// session.get: a numpy array of the tensor's shape, int32 for i32 tensors, float32 otherwise.
py::array get_array(const mn::Session& s, const std::string& name) {
    const mn::Shape shape = s.shape(name);
    if (s.dtype(name) == mn::DType::I32) {
        const std::vector<int32_t> values = s.get_i32(name);
        py::array_t<int32_t> out(shape);
        std::copy(values.begin(), values.end(), out.mutable_data());
        return std::move(out);
    }
    py::array_t<float> out(shape);
    s.get(name, std::span<float>(out.mutable_data(), static_cast<size_t>(out.size())));
    return std::move(out);
}

// session.get([name, ...]): {name: array} as get(name) gives each, the float ones in one transfer from the device.
py::dict get_arrays(const mn::Session& s, const std::vector<std::string>& names) {
    std::vector<std::string> floats;
    py::dict out;
    for (const std::string& name : names) {
        if (s.dtype(name) == mn::DType::I32) {
            out[py::str(name)] = get_array(s, name);
        } else {
            floats.push_back(name);
        }
    }
    for (auto& [name, values] : s.get(floats)) {
        py::array_t<float> array(s.shape(name));
        std::copy(values.begin(), values.end(), array.mutable_data());
        out[py::str(name)] = std::move(array);
    }
    return out;
}

mn::Precision precision_of(const std::string& name) {
    if (name == "strict") return mn::Precision::Strict;
    if (name == "fast") return mn::Precision::Fast;
    throw mn::Error("precision must be 'strict' or 'fast', got '" + name + "'");
}

mn::LrSchedule schedule_of(const std::string& decay, int64_t warmup_steps, int64_t total_steps, double min_lr_ratio) {
    if (decay != "constant" && decay != "cosine")
        throw mn::Error("decay must be 'constant' or 'cosine', got '" + decay + "'");
    if (decay == "cosine" && total_steps <= 0) throw mn::Error("a cosine schedule needs total_steps > 0");
    return {.decay = decay == "cosine" ? mn::LrSchedule::Decay::Cosine : mn::LrSchedule::Decay::Constant,
            .warmup_steps = warmup_steps, .total_steps = total_steps, .min_lr_ratio = min_lr_ratio};
}

// Every Graph method that returns a Tensor keeps the graph (argument 1, self) alive as long as it.
template <class... Extra>
void op(py::class_<Graph>& c, const char* name, auto&& fn, const Extra&... extra) {
    c.def(name, std::forward<decltype(fn)>(fn), py::keep_alive<0, 1>(), extra...);
}

void bind_graph(py::module_& m) {
    py::enum_<mn::DType>(m, "DType").value("float32", mn::DType::F32).value("float16", mn::DType::F16)
        .value("int32", mn::DType::I32);
    m.attr("float32") = mn::DType::F32;
    m.attr("float16") = mn::DType::F16;
    m.attr("int32") = mn::DType::I32;

    py::class_<mn::Init>(m, "Init", "How a parameter is filled before training (as torch.nn.init)")
        .def_static("zeros", &mn::Init::zeros)
        .def_static("ones", &mn::Init::ones)
        .def_static("uniform", &mn::Init::uniform, py::arg("low"), py::arg("high"))
        .def_static("normal", &mn::Init::normal, py::arg("mean"), py::arg("std"));

    const py::keep_alive<0, 1> keep;  // a tensor an operator returns keeps its operand, so its graph, alive
    py::class_<Tensor>(m, "Tensor", "A node of a Graph; arithmetic operators build nodes in its graph")
        .def_property_readonly("shape", [](const Tensor& t) { return shape_tuple(t.shape()); })
        .def_property_readonly("dtype", &Tensor::dtype)
        .def("__repr__", [](const Tensor& t) {
            return "Tensor(" + std::to_string(t.id) + ", shape=" + mn::shape_str(t.shape()) + ", " + mn::dtype_name(t.dtype()) + ")";
        })
        .def(py::self + py::self, keep).def(py::self - py::self, keep).def(py::self * py::self, keep)
        .def(py::self / py::self, keep).def(py::self + double(), keep).def(py::self - double(), keep)
        .def(py::self * double(), keep).def(py::self / double(), keep).def(double() * py::self, keep)
        .def(-py::self, keep)
        .def("__radd__", [](Tensor t, double a) { return t + a; }, keep)
        .def("__rsub__", [](Tensor t, double a) { return -t + a; }, keep);

    py::class_<Graph> g(m, "Graph", "The typed static graph: every builder checks shapes as it is called");
    g.def(py::init<>()).def("__str__", &Graph::str);
    op(g, "input", &Graph::input, py::arg("name"), py::arg("shape"), py::arg("dtype") = mn::DType::F32);
    op(g, "parameter", &Graph::parameter, py::arg("name"), py::arg("shape"), py::arg("init") = mn::Init::zeros(),
       py::arg("dtype") = mn::DType::F32);
    op(g, "scalar", &Graph::scalar, py::arg("value"), py::arg("dtype") = mn::DType::F32);
    op(g, "full", &Graph::full, py::arg("shape"), py::arg("value"), py::arg("dtype") = mn::DType::F32);
    for (const auto& [name, fn] : std::initializer_list<std::pair<const char*, Tensor (Graph::*)(Tensor)>>{
             {"neg", &Graph::neg}, {"exp", &Graph::exp}, {"log", &Graph::log}, {"sqrt", &Graph::sqrt},
             {"rsqrt", &Graph::rsqrt}, {"abs", &Graph::abs}, {"relu", &Graph::relu}, {"sigmoid", &Graph::sigmoid},
             {"tanh", &Graph::tanh}, {"silu", &Graph::silu}, {"sign", &Graph::sign},
             {"global_avg_pool2d", &Graph::global_avg_pool2d}, {"upsample_nearest2x", &Graph::upsample_nearest2x}})
        op(g, name, fn, py::arg("x"));
    for (const auto& [name, fn] : std::initializer_list<std::pair<const char*, Tensor (Graph::*)(Tensor, Tensor)>>{
             {"add", &Graph::add}, {"sub", &Graph::sub}, {"mul", &Graph::mul}, {"div", &Graph::div},
             {"maximum", &Graph::maximum}, {"minimum", &Graph::minimum}, {"greater", &Graph::greater},
             {"equal", &Graph::equal}, {"mse_loss", &Graph::mse_loss},
             {"embedding", &Graph::embedding}})
        op(g, name, fn, py::arg("a"), py::arg("b"));
    op(g, "cross_entropy", &Graph::cross_entropy, py::arg("logits"), py::arg("labels"),
       py::arg("ignore_index") = Graph::kIgnoreIndex);
    op(g, "gelu", [](Graph& self, Tensor x, const std::string& approximate) { return self.gelu(x, approximate); },
       py::arg("x"), py::arg("approximate") = "none");
    op(g, "pow", [](Graph& self, Tensor a, Tensor b) { return self.pow(a, b); }, py::arg("a"), py::arg("b"));
    op(g, "cast", &Graph::cast, py::arg("x"), py::arg("dtype"));
    op(g, "matmul", &Graph::matmul, py::arg("a"), py::arg("b"), py::arg("trans_a") = false, py::arg("trans_b") = false);
    op(g, "linear", &Graph::linear, py::arg("x"), py::arg("weight"), py::arg("bias") = py::none());
    op(g, "conv2d",
       [](Graph& self, Tensor x, Tensor w, std::optional<Tensor> b, int64_t stride, int64_t padding, int64_t dilation,
          int64_t groups) { return self.conv2d(x, w, b, {stride, padding, dilation, groups}); },
       py::arg("x"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1, py::arg("padding") = 0,
       py::arg("dilation") = 1, py::arg("groups") = 1);
    op(g, "attention",
       [](Graph& self, Tensor q, Tensor k, Tensor v, bool causal, double scale) {
           return self.attention(q, k, v, {.causal = causal, .scale = scale});
       },
       py::arg("q"), py::arg("k"), py::arg("v"), py::arg("causal") = false, py::arg("scale") = 0.0);
    op(g, "group_norm", &Graph::group_norm, py::arg("x"), py::arg("groups"), py::arg("weight"), py::arg("bias"),
       py::arg("eps") = 1e-5);
    op(g, "layer_norm", &Graph::layer_norm, py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("eps") = 1e-5);
    op(g, "rms_norm", &Graph::rms_norm, py::arg("x"), py::arg("weight"), py::arg("eps") = 1e-6);
    op(g, "max_pool2d", &Graph::max_pool2d, py::arg("x"), py::arg("kernel"), py::arg("stride") = 0, py::arg("padding") = 0);
    op(g, "avg_pool2d", &Graph::avg_pool2d, py::arg("x"), py::arg("kernel"), py::arg("stride") = 0, py::arg("padding") = 0);
    for (const auto& [name, fn] : std::initializer_list<std::pair<const char*, Tensor (Graph::*)(Tensor, std::vector<int64_t>, bool)>>{
             {"sum", &Graph::sum}, {"mean", &Graph::mean}, {"max", &Graph::max}})
        op(g, name, fn, py::arg("x"), py::arg("axes") = std::vector<int64_t>{}, py::arg("keepdim") = false);
    op(g, "softmax", &Graph::softmax, py::arg("x"), py::arg("axis") = -1);
    op(g, "log_softmax", &Graph::log_softmax, py::arg("x"), py::arg("axis") = -1);
    op(g, "reshape", &Graph::reshape, py::arg("x"), py::arg("shape"));
    op(g, "permute", &Graph::permute, py::arg("x"), py::arg("perm"));
    op(g, "transpose", &Graph::transpose, py::arg("x"), py::arg("dim0"), py::arg("dim1"));
    op(g, "slice", &Graph::slice, py::arg("x"), py::arg("axis"), py::arg("start"), py::arg("end"), py::arg("step") = 1);
    op(g, "concat", &Graph::concat, py::arg("xs"), py::arg("axis"));
    op(g, "expand", &Graph::expand, py::arg("x"), py::arg("shape"));
    op(g, "flatten", &Graph::flatten, py::arg("x"), py::arg("start_dim") = 1);
    g.def("output", &Graph::output, py::arg("name"), py::arg("x"), "Names a value the session can read back with get(name)");
}

void bind_session(py::module_& m) {
    py::class_<mn::SGD>(m, "SGD")
        .def(py::init([](double lr, double momentum, double weight_decay) { return mn::SGD{lr, momentum, weight_decay}; }),
             py::arg("lr") = mn::SGD{}.lr, py::arg("momentum") = 0.0, py::arg("weight_decay") = 0.0);
    py::class_<mn::Adam>(m, "Adam")
        .def(py::init([](double lr, double beta1, double beta2, double eps, double weight_decay) {
                 return mn::Adam{lr, beta1, beta2, eps, weight_decay};
             }),
             py::arg("lr") = mn::Adam{}.lr, py::arg("beta1") = 0.9, py::arg("beta2") = 0.999, py::arg("eps") = 1e-8,
             py::arg("weight_decay") = 0.0);
    py::class_<mn::AdamW>(m, "AdamW")
        .def(py::init([](double lr, double beta1, double beta2, double eps, double weight_decay) {
                 return mn::AdamW{lr, beta1, beta2, eps, weight_decay};
             }),
             py::arg("lr") = mn::AdamW{}.lr, py::arg("beta1") = 0.9, py::arg("beta2") = 0.999, py::arg("eps") = 1e-8,
             py::arg("weight_decay") = mn::AdamW{}.weight_decay);
    py::class_<mn::LrSchedule>(m, "LrSchedule", "lr(step): linear warm-up, then constant or a cosine decay")
        .def(py::init(&schedule_of), py::arg("decay") = "constant", py::arg("warmup_steps") = 0,
             py::arg("total_steps") = 0, py::arg("min_lr_ratio") = 0.0);

    py::class_<mn::Device>(m, "Device")
        .def_static("open", &mn::Device::open, py::arg("selector") = "",
                    "The best device, or the one `selector` names (an index or part of the name)")
        .def_property_readonly("name", &mn::Device::name)
        .def("describe", &mn::Device::describe)
        .def("__repr__", [](const mn::Device& d) { return "Device('" + d.name() + "')"; });

    py::class_<mn::Session>(m, "Session")
        .def("set", &set_array, py::arg("name"), py::arg("array"))
        .def("set", &set_arrays, py::arg("arrays"))
        .def("get", &get_array, py::arg("name"))
        .def("get", &get_arrays, py::arg("names"))
        .def("shape", [](const mn::Session& s, const std::string& name) { return shape_tuple(s.shape(name)); })
        .def("run", &mn::Session::run, py::call_guard<py::gil_scoped_release>())
        .def("step", &mn::Session::step, py::call_guard<py::gil_scoped_release>())
        .def_property_readonly("step_count", &mn::Session::step_count)
        .def("save", py::overload_cast<const std::string&>(&mn::Session::save, py::const_), py::arg("path"))
        .def("load", py::overload_cast<const std::string&>(&mn::Session::load), py::arg("path"))
        .def_property_readonly("stats", [](const mn::Session& s) {
            const mn::SessionStats& st = s.stats();
            return py::dict(py::arg("dispatches") = st.dispatches, py::arg("barriers") = st.barriers,
                            py::arg("pipelines") = st.pipelines, py::arg("logical_bytes") = st.logical_bytes,
                            py::arg("physical_bytes") = st.physical_bytes, py::arg("compile_ms") = st.compile_ms);
        });

    m.def(
        "compile",
        [](const Graph& graph, std::optional<mn::Device> device, std::optional<Tensor> loss, mn::Optimizer optimizer,
           std::optional<mn::LrSchedule> schedule, double clip_grad_norm, const std::string& precision, uint64_t seed,
           const std::vector<std::string>& skip_init) {
            mn::CompileOptions options{.loss = loss, .optimizer = optimizer,
                                       .schedule = schedule.value_or(mn::LrSchedule{}),
                                       .clip_grad_norm = clip_grad_norm, .precision = precision_of(precision),
                                       .seed = seed};
            for (const std::string& name : skip_init) {
                const std::optional<Tensor> t = graph.find(name);
                if (!t || graph.node(*t).op != mn::Op::Parameter) {
                    throw mn::Error("skip_init: '" + name + "' is not a parameter of the graph");
                }
            }
            if (!skip_init.empty()) {
                options.skip_init = [names = std::set<std::string>(skip_init.begin(), skip_init.end())](const std::string& n) {
                    return names.count(n) > 0;
                };
            }
            py::gil_scoped_release release;
            return mn::compile(graph, device ? *device : mn::Device::open(), options);
        },
        py::arg("graph"), py::arg("device") = py::none(), py::arg("loss") = py::none(), py::arg("optimizer") = mn::AdamW{},
        py::arg("schedule") = py::none(), py::arg("clip_grad_norm") = 0.0, py::arg("precision") = "strict",
        py::arg("seed") = 0, py::arg("skip_init") = std::vector<std::string>{},
        "Compiles the graph for the device (the best one when None); with a loss, a training session whose step() "
        "runs forward, backward and the optimizer's update in one submit. skip_init: parameters loaded or set next, "
        "which start at zero instead of drawing their initial values (a name that is no parameter is an error)");
}

void bind_onnx(py::module_& m) {
    py::class_<mn::OnnxModel>(m, "OnnxModel", "An ONNX file lowered into a Graph (import_onnx)")
        .def_property_readonly("graph", [](const mn::OnnxModel& o) -> Graph& { return *o.graph; },
                               py::return_value_policy::reference_internal)
        .def_readonly("inputs", &mn::OnnxModel::inputs)
        .def_readonly("outputs", &mn::OnnxModel::outputs)
        .def_property_readonly("parameters", [](const mn::OnnxModel& o) {
            py::dict out;
            for (const auto& [name, values] : o.parameters) {
                const mn::Shape shape = o.graph->find(name)->shape();
                py::array_t<float> a(shape);
                std::copy(values.begin(), values.end(), a.mutable_data());
                out[py::str(name)] = a;
            }
            return out;
        })
        .def("load_parameters", &mn::OnnxModel::load_parameters, py::arg("session"));
    m.def("import_onnx", &mn::import_onnx, py::arg("path"), py::arg("input_shapes") = std::map<std::string, mn::Shape>{},
          "Lowers an ONNX file into a Graph: initializers become parameters under their ONNX names");
}

}  // namespace

PYBIND11_MODULE(meganeura, m) {
    m.doc() = "Train and run neural networks on any GPU through Vulkan";
    m.attr("__version__") = MEGANEURA_VERSION;
    py::register_exception<mn::Error>(m, "Error", PyExc_RuntimeError);
    bind_graph(m);
    bind_session(m);
    bind_onnx(m);
}
