// `meganeura forward`: one model on given weights and inputs, outputs (and gradients) to a file.
// This is how meganeura is checked against another framework.
#include <cstdio>

#include "cli/commands.hpp"
#include "io/atomic_file.hpp"
#include "models/runner.hpp"

namespace mn::cli {

Option precision_option() {
    return {"precision", "strict", "P", "strict (f32 everywhere) or fast (f16 tensor-core products where the device has them)"};
}

Precision parse_precision(const Flags& f) {
    return f.choice("precision", {"strict", "fast"}) == "fast" ? Precision::Fast : Precision::Strict;
}

namespace {

int run_forward(const Flags& f) {
    const std::string& model = f.required("model");
    const std::string& inputs_path = f.required("inputs");
    const std::string& out_path = f.required("out");
    const std::string& size = f.choice("size", {"tiny", "full"});
    (void)models::find_model(model);  // an unknown name fails before any file is read
    io::check_can_write(out_path, "--out");
    const CompileOptions options{.precision = parse_precision(f)};
    const io::TensorMap inputs = io::read_safetensors(inputs_path);
    const models::ModelRequest request{.size = size, .config_path = f.str("config"),
                                       .input_shapes = models::shapes_of(inputs)};
    const Device device = Device::open();
    models::PreparedModel p = models::prepare_model(device, model, request, f.on("backward"), options);
    if (!f.str("weights").empty()) p.session.load(f.str("weights"));
    models::set_inputs(p.session, p.model, inputs);
    p.session.run();
    const io::TensorMap out = models::read_outputs(p);
    io::write_safetensors(out_path, out);
    std::printf("%s on %s: loss %.6g, %zu tensors written to %s\n", model.c_str(), device.name().c_str(),
                static_cast<double>(p.session.get("loss")[0]), out.size(), out_path.c_str());
    return 0;
}

}  // namespace

const Command forward_command = {
    .name = "forward",
    .summary = "run a model on given weights and inputs, write its outputs (and gradients)",
    .description = "Runs one model of the registry (meganeura models) on the inputs in a safetensors file and\n"
                   "writes its output (logits or output) and loss, and with --backward grad.<parameter> for\n"
                   "every parameter. Input shapes come from the file; parameter names are the Hugging Face /\n"
                   "torchvision ones, so real checkpoints load by name.",
    .options = {{"model", "", "NAME", "the model (required; meganeura models lists them)"},
                {"size", "tiny", "SIZE", "tiny (the test configuration) or full (the published one)"},
                {"config", "", "FILE", "a Hugging Face config.json, overriding --size's configuration"},
                {"weights", "", "FILE", "safetensors weights by parameter name (default: random initialization)"},
                {"inputs", "", "FILE", "safetensors file with every input of the model (required)"},
                {"out", "", "FILE", "safetensors file to write (required)"},
                {"backward", "false", "", "also compute and write every parameter's gradient"},
                precision_option()},
    .run = run_forward,
};

}  // namespace mn::cli
