// `meganeura forward`: one model on given weights and inputs, outputs (and gradients) to a file.
// This is how meganeura is checked against another framework.
#include <cstdio>

#include "cli/commands.hpp"
#include "cli/model_arg.hpp"
#include "io/atomic_file.hpp"
#include "meganeura/autodiff.hpp"
#include "meganeura/onnx.hpp"
#include "models/runner.hpp"

namespace mn::cli {

Option precision_option() {
    return {"precision", "strict", "P", "strict (f32 everywhere) or fast (f16 tensor-core products where the device has them)"};
}

Precision parse_precision(const Flags& f) {
    return f.choice("precision", {"strict", "fast"}) == "fast" ? Precision::Fast : Precision::Strict;
}

namespace {

bool is_onnx(const std::string& model) { return model.size() > 5 && model.compare(model.size() - 5, 5, ".onnx") == 0; }

// An ONNX file: its outputs by their names, and with --backward the gradient of the sum of its first
// output (an ONNX graph has no loss) with respect to every initializer, as grad.<initializer>.
int run_onnx(const Flags& f, const io::TensorMap& inputs, const CompileOptions& options) {
    OnnxModel m = import_onnx(f.str("model"), models::shapes_of(inputs));
    if (f.on("backward")) {
        Graph& g = *m.graph;
        std::vector<Tensor> wrt;
        for (const auto& [name, data] : m.parameters) wrt.push_back(*g.find(name));
        const std::vector<Tensor> d = grad(g.sum(*g.find(m.outputs.at(0))), wrt);
        size_t i = 0;
        for (const auto& [name, data] : m.parameters) g.output("grad." + name, d[i++]);
    }
    const Device device = Device::open();
    CompileOptions loaded = options;  // every parameter is an initializer of the file, set next
    loaded.skip_init = CompileOptions::every_parameter;
    Session s = compile(*m.graph, device, loaded);
    m.load_parameters(s);
    for (const std::string& name : m.inputs) {
        auto it = inputs.find(name);
        if (it == inputs.end()) throw Error("--inputs " + f.str("inputs") + " has no tensor '" + name + "'");
        s.set(name, it->second.to_f32(name));
    }
    s.run();
    io::TensorMap out;
    for (const auto& [name, id] : m.graph->outputs()) out[name] = io::TensorData::from_f32(s.shape(name), s.get(name));
    io::write_safetensors(f.str("out"), out);
    std::printf("%s on %s: %zu tensors written to %s\n", f.str("model").c_str(), device.name().c_str(), out.size(),
                f.str("out").c_str());
    return 0;
}

int run_forward(const Flags& f) {
    if (is_onnx(f.str("model"))) {
        const std::string& inputs_path = f.required("inputs");
        io::check_can_write(f.required("out"), "--out");
        return run_onnx(f, io::read_safetensors(inputs_path), {.precision = parse_precision(f)});
    }
    ModelArg m = model_arg(f);
    const std::string& inputs_path = f.required("inputs");
    const std::string& out_path = f.required("out");
    io::check_can_write(out_path, "--out");
    CompileOptions options{.precision = parse_precision(f)};
    if (!m.weights.empty()) options.skip_init = CompileOptions::every_parameter;
    const io::TensorMap inputs = io::read_safetensors(inputs_path);
    m.request.input_shapes = models::shapes_of(inputs);
    const Device device = Device::open();
    models::PreparedModel p = models::prepare_model(device, m.name, m.request, f.on("backward"), options);
    if (!m.weights.empty()) p.session.load(m.weights);
    models::set_inputs(p.session, p.model, inputs);
    p.session.run();
    const io::TensorMap out = models::read_outputs(p);
    io::write_safetensors(out_path, out);
    std::printf("%s on %s: loss %.6g, %zu tensors written to %s\n", m.name.c_str(), device.name().c_str(),
                static_cast<double>(p.session.get("loss")[0]), out.size(), out_path.c_str());
    return 0;
}

}  // namespace

const Command forward_command = {
    .name = "forward",
    .summary = "run a model on given weights and inputs, write its outputs (and gradients)",
    .description = "Runs one model of the registry (meganeura models), or a Hugging Face model folder (-m DIR:\n"
                   "config.json, model.safetensors or its shards), on the inputs in a safetensors file and\n"
                   "writes its output (logits or output) and loss, and with --backward grad.<parameter> for\n"
                   "every parameter. Input shapes come from the file; parameter names are the Hugging Face /\n"
                   "torchvision ones, so real checkpoints load by name. An .onnx file runs with its initializers as\n"
                   "its weights and writes its outputs by name; --backward then differentiates the sum of its\n"
                   "first output.",
    .options = model_options("", "tiny", {{"inputs", "", "FILE", "safetensors file with every input of the model (required)"},
                                      {"out", "", "FILE", "safetensors file to write (required)"},
                                      {"backward", "false", "", "also compute and write every parameter's gradient"},
                                      precision_option()}),
    .run = run_forward,
};

}  // namespace mn::cli
