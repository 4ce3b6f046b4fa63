// `meganeura forward`: one model on given weights and inputs, outputs (and gradients) to a file.
// This is how meganeura is checked against another framework.
#include <cstdio>

#include "cli/flags.hpp"
#include "io/atomic_file.hpp"
#include "models/runner.hpp"

namespace mn::cli {

Precision parse_precision(const std::string& s) {
    if (s == "strict") return Precision::Strict;
    if (s == "fast") return Precision::Fast;
    throw Error("--precision must be strict or fast, got '" + s + "'");
}

int cmd_forward(const Args& args) {
    const Flags f(args, {{"model", ""}, {"size", "tiny"}, {"config", ""}, {"weights", ""}, {"inputs", ""},
                         {"out", ""}, {"backward", "false"}, {"precision", "strict"}});
    if (f.str("model").empty()) throw Error("--model is required");
    if (f.str("inputs").empty() || f.str("out").empty()) throw Error("--inputs and --out are required");
    if (f.str("size") != "tiny" && f.str("size") != "full") throw Error("--size must be tiny or full");
    (void)models::find_model(f.str("model"));  // an unknown name fails before any file is read
    io::check_can_write(f.str("out"), "--out");
    const CompileOptions options{.precision = parse_precision(f.str("precision"))};
    const io::TensorMap inputs = io::read_safetensors(f.str("inputs"));
    const models::ModelRequest request{.size = f.str("size"), .config_path = f.str("config"),
                                       .input_shapes = models::shapes_of(inputs)};
    const Device device = Device::open();
    models::PreparedModel p = models::prepare_model(device, f.str("model"), request, f.on("backward"), options);
    if (!f.str("weights").empty()) p.session.load(f.str("weights"));
    models::set_inputs(p.session, p.model, inputs);
    p.session.run();
    const io::TensorMap out = models::read_outputs(p);
    io::write_safetensors(f.str("out"), out);
    std::printf("%s on %s: loss %.6g, %zu tensors written to %s\n", f.str("model").c_str(), device.name().c_str(),
                static_cast<double>(p.session.get("loss")[0]), out.size(), f.str("out").c_str());
    return 0;
}

}  // namespace mn::cli
