// optimize/'s equality saturation: each rewrite finds what it should, the graph computes what it did to the
// last bit (the reference, float64), the budgets stop it early with a correct graph, two runs give one graph,
// and the five models' inference and training steps saturate within the default budget.
#include <algorithm>

#include "compiler/training.hpp"
#include "gpu_check.hpp"
#include "models/registry.hpp"
#include "models/resnet.hpp"
#include "models/runner.hpp"
#include "optimize/optimize.hpp"

namespace mn::test {
namespace {

size_t count_op(const Graph& g, Op op) {
    return static_cast<size_t>(std::count_if(g.nodes().begin(), g.nodes().end(), [&](const Node& n) { return n.op == op; }));
}

Graph saturated(const Graph& g, optimize::Stats* stats = nullptr, optimize::SaturationBudget budget = {}) {
    return optimize::optimize(g, {.saturate = true, .budget = budget}, stats);
}

std::vector<int32_t> assignments(const Graph& g) {
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < static_cast<int32_t>(g.nodes().size()); ++i) {
        if (g.node(i).op == Op::Assign) ids.push_back(i);
    }
    return ids;
}

// The rewritten graph's outputs equal the original's in the reference, bit for bit, under their names, and so do
// the values its assignments write, in their order.
void expect_same_outputs(const Graph& before, const Graph& after, const ref::Feeds& feeds) {
    const auto want = ref::evaluate(before, feeds), got = ref::evaluate(after, feeds);
    ASSERT_EQ(before.outputs().size(), after.outputs().size());
    for (size_t i = 0; i < before.outputs().size(); ++i) {
        EXPECT_EQ(after.outputs()[i].first, before.outputs()[i].first);
        EXPECT_EQ(got[static_cast<size_t>(after.outputs()[i].second)].data, want[static_cast<size_t>(before.outputs()[i].second)].data)
            << before.outputs()[i].first;
    }
    const std::vector<int32_t> a = assignments(before), b = assignments(after);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(after.node(b[i]).name, before.node(a[i]).name);
        EXPECT_EQ(got[static_cast<size_t>(b[i])].data, want[static_cast<size_t>(a[i])].data) << "assignment " << i;
    }
}

void expect_same_outputs(const Graph& before, const Graph& after, uint64_t seed) {
    expect_same_outputs(before, after, random_feeds(before, seed));
}

// b + a is a + b, so the products that read them are one: common-subexpression elimination alone (the greedy
// pass) keeps both.
TEST(SaturateTest, SumsInEitherOrderAreOneAndSoAreTheirProducts) {
    Graph g;
    const Tensor a = g.input("a", {4, 5}), b = g.input("b", {4, 5}), w = g.parameter("w", {5, 3});
    g.output("y", g.tanh(g.matmul(a + b, w)) + g.exp(g.matmul(b + a, w)));
    EXPECT_EQ(count_op(optimize::optimize(g), Op::MatMul), 2u);
    optimize::Stats stats;
    const Graph o = saturated(g, &stats);
    EXPECT_EQ(count_op(o, Op::MatMul), 1u);
    EXPECT_EQ(count_op(o, Op::Add), 2u);  // a + b, and the output's
    EXPECT_EQ(stats.saturation.stop, "saturated");
    expect_same_outputs(g, o, 1);
}

// Each rewrite of saturate.cpp's table, and the identity tables it shares with the greedy pass.
TEST(SaturateTest, EachRewriteRemovesWhatItShouldExactly) {
    Graph g;
    const Tensor x = g.input("x", {2, 3, 4}), y = g.input("y", {2, 3, 4}), h = g.input("h", {3, 4}, DType::F16);
    g.output("permutes", g.tanh(g.permute(g.permute(x, {1, 2, 0}), {2, 0, 1})));  // p[q] = id: none
    g.output("permute", g.tanh(g.permute(g.permute(x, {0, 2, 1}), {2, 0, 1})));    // one: {1, 0, 2}
    g.output("reshapes", g.tanh(g.reshape(g.reshape(x, {6, 4}), {2, 3, 4})));        // x itself
    g.output("expands", g.tanh(g.expand(g.expand(g.reshape(y, {1, 2, 3, 4}), {5, 2, 3, 4}), {7, 5, 2, 3, 4})));
    g.output("round_trip", g.tanh(g.cast(g.cast(h, DType::F32), DType::F16)));       // h itself
    g.output("minus", g.tanh(x + (-y)));                                              // x - y
    g.output("plus", g.tanh(x - (-y)));                                               // x + y
    g.output("times", g.tanh((-x) * (-y)));                                           // x * y
    g.output("identities", g.tanh(g.neg(g.neg((x * 1.0 + 0.0) / 1.0))));             // x
    const Graph o = saturated(g);
    EXPECT_EQ(count_op(o, Op::Permute), 1u);
    EXPECT_EQ(count_op(o, Op::Reshape), 1u);  // y's to [1, 2, 3, 4]
    EXPECT_EQ(count_op(o, Op::Expand), 1u);
    EXPECT_EQ(count_op(o, Op::Cast), 0u);
    EXPECT_EQ(count_op(o, Op::Neg), 0u);
    EXPECT_EQ(count_op(o, Op::Sub), 1u);
    EXPECT_EQ(count_op(o, Op::Add), 1u);
    EXPECT_EQ(count_op(o, Op::Mul), 1u);
    EXPECT_EQ(count_op(o, Op::Div) + count_op(o, Op::Constant), 0u);
    expect_same_outputs(g, o, 2);
}

// Like the greedy pass: outputs, leaves and assignments stay themselves, gradients keep their flag and are not
// merged with the forward's products, and a pointwise node computed twice stays two nodes (fusion inlines each
// into its one reader, where one shared value would be a kernel of its own).
TEST(SaturateTest, KeepsWhatTheGreedyPassKeeps) {
    Graph g;
    const Tensor a = g.input("a", {4, 4}), w = g.parameter("w", {4, 4});
    g.input("unused", {2});
    const Tensor loss = g.sum(g.matmul(a, w));
    g.output("loss", loss);
    const Tensor dw = grad(loss, {w})[0];
    g.output("forward_again", g.sum(g.matmul(a, w)));
    g.output("grad.w", dw + g.matmul(a, w));
    g.output("twice", g.sum(g.exp(a)) + g.max(g.exp(a)));
    g.output("same", a * 1.0);
    g.assign(w, w - dw * 0.1, "sgd");
    const Graph o = saturated(g);
    size_t forward = 0, backward = 0;
    for (const Node& n : o.nodes()) {
        if (n.op == Op::MatMul) ++(n.gradient ? backward : forward);
    }
    EXPECT_EQ(forward, 1u);
    EXPECT_GE(backward, 1u);
    EXPECT_EQ(count_op(o, Op::Exp), 2u);
    EXPECT_EQ(count_op(o, Op::Assign), 1u);
    EXPECT_TRUE(o.find("unused").has_value());
    EXPECT_EQ(o.node(*o.find("same")).op, Op::Mul);  // an output is not replaced by its input
    expect_same_outputs(g, o, 3);
}

// A graph with a chain of rewrites: each budget stops the rounds early, and the graph is still right.
Graph rewritable() {
    Graph g;
    Tensor x = g.input("x", {3, 4, 5});
    const Tensor y = g.input("y", {3, 4, 5}), w = g.parameter("w", {5, 5});
    for (int i = 0; i < 20; ++i) {
        x = g.permute(g.permute(x + (-y), {1, 0, 2}), {1, 0, 2});
        x = g.tanh(g.matmul(y + x, w) + g.matmul(x + y, w));
    }
    g.output("x", x);
    return g;
}

TEST(SaturateTest, ANodeBudgetStopsItWithACorrectGraph) {
    const Graph g = rewritable();
    optimize::Stats stats;
    const Graph o = saturated(g, &stats, {.nodes = g.nodes().size() + 10});
    EXPECT_EQ(stats.saturation.stop, "node budget");
    EXPECT_EQ(stats.saturation.rounds, 1u);
    EXPECT_LE(stats.saturation.enodes, g.nodes().size() + 10 + 1);  // one rewrite adds at most one e-node
    EXPECT_GT(count_op(o, Op::MatMul), count_op(saturated(g), Op::MatMul));  // it did not get far
    expect_same_outputs(g, o, 4);
}

TEST(SaturateTest, ATimeBudgetStopsItWithACorrectGraph) {
    const Graph g = rewritable();
    optimize::Stats stats;
    const Graph o = saturated(g, &stats, {.ms = 0});
    EXPECT_EQ(stats.saturation.stop, "time budget");
    EXPECT_EQ(stats.saturation.rounds, 1u);
    expect_same_outputs(g, o, 5);
    optimize::Stats all;
    const Graph full = saturated(g, &all);
    EXPECT_EQ(all.saturation.stop, "saturated");
    EXPECT_EQ(count_op(full, Op::MatMul), 20u);
    EXPECT_EQ(count_op(full, Op::Permute) + count_op(full, Op::Neg), 0u);
    expect_same_outputs(g, full, 5);
}

TEST(SaturateTest, TwoRunsGiveOneGraph) {
    const Graph g = rewritable();
    EXPECT_EQ(saturated(g).str(), saturated(g).str());
}

// ---- the five models ----

// The tiny configurations, the convolutions' on small images (the reference's convolutions are slow). ResNet-50
// has no tiny size: a ResNet of its bottlenecks, one a stage for two stages, 8 channels wide.
models::ModelRequest tiny(const std::string& name) {
    if (name == "resnet50") return {.input_shapes = {{"images", {2, 3, 32, 32}}, {"labels", {2}}}};
    if (name == "sd_unet") return {.input_shapes = {{"noisy_latent", {1, 4, 8, 8}}, {"target", {1, 4, 8, 8}}}};
    return {};
}

models::BuiltModel build(const std::string& name, const std::string& size) {
    if (name == "resnet50" && size == "tiny") return models::build_resnet({.blocks = {1, 1}, .width = 8, .num_classes = 10}, {2, 3, 32, 32});
    models::ModelRequest r = size == "tiny" ? tiny(name) : models::ModelRequest{};
    r.size = size;
    return models::find_model(name).build(r);
}

// The model's graph for inference, or a training step's (backward, AdamW's updates as assignments).
Graph model_graph(const std::string& name, bool training, const std::string& size = "tiny") {
    models::BuiltModel m = build(name, size);
    Graph g = *m.graph;
    if (training) compiler::append_training(g, g.handle(m.loss.id), {.loss = m.loss});
    return g;
}

// A model's example inputs (valid token ids), and parameters, state and the training step's scalars in
// [0.1, 1): nothing the reference computes from them is NaN, which would equal nothing.
ref::Feeds model_feeds(const std::string& name, const Graph& g) {
    ref::Feeds feeds = random_feeds(g, 6, {.lo = 0.1, .hi = 1});
    for (const auto& [input, t] : models::find_model(name).example_inputs(tiny(name), false, 6)) {
        std::vector<double> data;
        if (t.dtype == "I32" || t.dtype == "I64") {
            for (int32_t v : t.to_i32(input)) data.push_back(v);
        } else {
            for (float v : t.to_f32(input)) data.push_back(v);
        }
        feeds[input] = {t.shape, std::move(data)};
    }
    if (name == "resnet50") feeds["labels"].data = {1, 7};  // the small ResNet's 10 classes
    for (const Node& n : g.nodes()) {
        if (n.op == Op::State) feeds[n.name] = {n.shape, std::vector<double>(static_cast<size_t>(numel(n.shape)), 0.5)};
    }
    return feeds;
}

class SaturateModels : public ::testing::TestWithParam<std::string> {};

// Within the default budget (saturated, not stopped), fewer or as many nodes as the greedy pass leaves, and the
// same outputs in the reference, bit for bit: the inference's and the training step's (loss, and the updated
// parameters and moments its assignments write).
TEST_P(SaturateModels, SaturateWithinTheBudgetAndComputeTheSame) {
    for (bool training : {false, true}) {
        const Graph g = model_graph(GetParam(), training);
        optimize::Stats stats;
        const Graph o = saturated(g, &stats);
        EXPECT_EQ(stats.saturation.stop, "saturated") << (training ? "training" : "inference");
        EXPECT_LT(stats.saturation.ms, optimize::SaturationBudget{}.ms);
        EXPECT_LE(o.nodes().size(), optimize::optimize(g).nodes().size()) << (training ? "training" : "inference");
        verify_graph(o);
        expect_same_outputs(g, o, model_feeds(GetParam(), g));
    }
}

// The full models (SmolLM2-135M, ResNet-50 at 224 x 224, ...), whose training steps are tens of thousands of
// nodes: saturated within the default budget, and no larger than the greedy pass leaves them.
TEST_P(SaturateModels, FullSizeGraphsSaturateWithinTheBudget) {
    for (bool training : {false, true}) {
        const Graph g = model_graph(GetParam(), training, "full");
        optimize::Stats stats;
        const Graph o = saturated(g, &stats);
        EXPECT_EQ(stats.saturation.stop, "saturated") << (training ? "training" : "inference");
        EXPECT_LE(o.nodes().size(), optimize::optimize(g).nodes().size()) << (training ? "training" : "inference");
        verify_graph(o);
    }
}

INSTANTIATE_TEST_SUITE_P(Models, SaturateModels, ::testing::Values("smollm2", "smolvla", "sd_unet", "resnet50", "whisper"),
                         [](const auto& info) { return info.param; });

// On the GPU (lavapipe in CI): each model's program with its gradients, compiled from the saturated graph, computes
// what the greedy pass's computes, bit for bit (the rewrites change no kernel's arithmetic), and AdamW steps of
// SmolLM2 give the same losses. ResNet-50 has no small size in the registry (its tiny graph above is the
// reference's).
class SaturateGpu : public GpuTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(SaturateGpu, GradientsEqualTheGreedyPassesBitForBit) {
    // Small inputs (a batch of one; SmolLM2's 8 tokens, as one has no label to predict): lavapipe's time is the
    // compiles'.
    const models::ModelEntry& model = models::find_model(GetParam());
    const io::TensorMap inputs = GetParam() == "smollm2" ? model.example_inputs({.input_shapes = {{"input_ids", {1, 8}}}}, false, 7)
                                                         : model.example_inputs(tiny(GetParam()), true, 7);
    const models::ModelRequest request{.input_shapes = models::shapes_of(inputs)};
    std::vector<io::TensorMap> results;
    for (bool saturate : {false, true}) {
        models::PreparedModel p = models::prepare_model(device(), GetParam(), request, true, {.saturate = saturate, .seed = 7});
        models::set_inputs(p.session, p.model, inputs);
        p.session.run();
        results.push_back(models::read_outputs(p));
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    for (const auto& [name, t] : results[0]) EXPECT_EQ(results[1].at(name).to_f32(name), t.to_f32(name)) << name;
}

INSTANTIATE_TEST_SUITE_P(Models, SaturateGpu, ::testing::Values("smollm2", "smolvla", "sd_unet", "whisper"),
                         [](const auto& info) { return info.param; });

using SaturateGpuTest = GpuTest;
TEST_F(SaturateGpuTest, AdamWStepsEqualTheGreedyPasses) {
    const io::TensorMap inputs = models::find_model("smollm2").example_inputs({.input_shapes = {{"input_ids", {1, 8}}}}, false, 8);
    std::vector<std::vector<float>> losses;
    for (bool saturate : {false, true}) {
        models::BuiltModel m = models::find_model("smollm2").build({.input_shapes = models::shapes_of(inputs)});
        Session s = compile(*m.graph, device(), {.loss = m.loss, .saturate = saturate, .seed = 8});
        models::set_inputs(s, m, inputs);
        std::vector<float> curve;
        for (int i = 0; i < 2; ++i) curve.push_back(s.step());
        losses.push_back(curve);
    }
    EXPECT_EQ(losses[0], losses[1]);
}

TEST_F(SaturateGpuTest, AnUnknownModeIsAnError) {
    Graph g;
    g.output("y", g.exp(g.input("x", {4})));
    setenv("MEGANEURA_OPTIMIZE", "eager", 1);
    std::string message;
    try {
        compile(g, device());
    } catch (const Error& e) {
        message = e.what();
    }
    unsetenv("MEGANEURA_OPTIMIZE");
    EXPECT_EQ(message, "MEGANEURA_OPTIMIZE must be greedy or saturate, got 'eager'");
}

}  // namespace
}  // namespace mn::test
