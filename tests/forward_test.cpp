// `meganeura forward` end to end on the registry's "mlp": outputs, loss and every parameter's
// gradient, read back from the file the command writes, against the float64 reference.
#include "gpu_check.hpp"
#include "host_tools.hpp"
#include "io/safetensors.hpp"
#include "meganeura/autodiff.hpp"
#include "models/runner.hpp"
#include "temp_dir.hpp"

namespace mn::test {
namespace {

struct CliResult {
    int status;
    std::string output;  // stdout and stderr
};

CliResult run_cli(const std::string& args) {
    int status = 0;
    std::string output = run_command(cli_binary() + " " + args, &status);
    return {status, std::move(output)};
}

ref::Value to_ref(const io::TensorData& t) {
    ref::Value v{t.shape, {}};
    if (t.dtype == "I32" || t.dtype == "I64") {
        for (int32_t x : t.to_i32()) v.data.push_back(x);
    } else {
        for (float x : t.to_f32()) v.data.push_back(x);
    }
    return v;
}

class ForwardTest : public GpuTest {};

TEST_F(ForwardTest, MlpOutputsAndGradientsMatchTheReference) {
    TempDir dir("forward");
    const models::ModelRequest request{.input_shapes = {{"images", {5, 784}}}};
    const io::TensorMap inputs = models::find_model("mlp").example_inputs(request, false, 7);
    io::write_safetensors(dir.path("inputs.safetensors"), inputs);
    // Weights: the model's own seeded initialization, saved by a session.
    models::PreparedModel p = models::prepare_model(device(), "mlp", request, false, {.seed = 3});
    p.session.save(dir.path("weights.safetensors"));

    ASSERT_EQ(run_cli("forward --model mlp --weights " + dir.path("weights.safetensors") + " --inputs " +
                      dir.path("inputs.safetensors") + " --out " + dir.path("out.safetensors") + " --backward").status,
              0);
    const io::TensorMap out = io::read_safetensors(dir.path("out.safetensors"));

    // The reference: the same model with d loss / d p for every parameter.
    models::BuiltModel m = models::find_model("mlp").build(request);
    Graph& g = *m.graph;
    ref::Feeds feeds;
    for (const auto& [name, t] : io::read_safetensors(dir.path("weights.safetensors"))) feeds[name] = to_ref(t);
    for (const auto& [name, t] : inputs) feeds[name] = to_ref(t);
    std::vector<Tensor> params;
    std::vector<std::string> names;
    for (int32_t id = 0; id < static_cast<int32_t>(g.nodes().size()); ++id) {
        if (g.node(id).op == Op::Parameter) params.push_back(g.handle(id)), names.push_back(g.node(id).name);
    }
    const std::vector<Tensor> grads = grad(m.loss, params);
    const auto want = ref::evaluate(g, feeds);
    auto expect_close = [&](const std::string& name, Tensor t) {
        ASSERT_TRUE(out.count(name)) << name;
        EXPECT_LE(relative_l2(out.at(name).to_f32(), want[static_cast<size_t>(t.id)].data), 1e-5) << name;
    };
    expect_close("logits", m.output);
    expect_close("loss", m.loss);
    for (size_t i = 0; i < params.size(); ++i) expect_close("grad." + names[i], grads[i]);
    EXPECT_EQ(out.size(), 2 + params.size());
}

TEST_F(ForwardTest, BadInputsFailWithAMessage) {
    TempDir dir("forward-bad");
    io::write_safetensors(dir.path("wrong.safetensors"),
                          {{"images", io::TensorData::from_f32({2, 10}, std::vector<float>(20, 0.f))}});
    const CliResult unknown = run_cli("forward --model nope --inputs x --out y");
    EXPECT_NE(unknown.status, 0);
    EXPECT_NE(unknown.output.find("unknown model 'nope'; known: "), std::string::npos) << unknown.output;
    const CliResult wrong =
        run_cli("forward --model mlp --inputs " + dir.path("wrong.safetensors") + " --out " + dir.path("o"));
    EXPECT_NE(wrong.status, 0);
    EXPECT_NE(wrong.output.find("images must be [N, 784], got (2,10)"), std::string::npos) << wrong.output;
    EXPECT_FALSE(std::filesystem::exists(dir.path("o")));
}

}  // namespace
}  // namespace mn::test
