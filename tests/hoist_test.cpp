// Steps that depend on nothing but parameters and constants run only after a parameter changes
// (sched::hoist_parameter_work): the per-run program skips them, and set, load and copy_to of a
// parameter bring them back for the next run. Checked against the float64 reference each time.
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "gpu_check.hpp"
#include "temp_dir.hpp"

namespace mn::test {
namespace {

// A convolution over weights folded from a per-channel scale (ResNet-50's batch norm), and an
// output that depends on parameters alone.
struct Folded {
    Graph g;
    Tensor y;
    Folded() {
        Tensor x = g.input("x", {2, 3, 8, 8});
        Tensor w = g.parameter("w", {4, 3, 3, 3});
        Tensor scale = g.parameter("scale", {4, 1, 1, 1});
        y = g.relu(g.conv2d(x, w * g.exp(scale)));
        g.output("y", y);
        g.output("gain", g.exp(scale) + 1.0);
    }
};

ref::Feeds feeds_with_scale(const Graph& g, uint64_t seed, double scale) {
    ref::Feeds f = random_feeds(g, seed);
    for (double& v : f.at("scale").data) v = scale * v;
    return f;
}

void expect_session_matches(Session& s, const Graph& g, const ref::Feeds& feeds) {
    const auto want = ref::evaluate(g, feeds);
    for (const auto& [name, id] : g.outputs())
        EXPECT_LE(relative_l2(s.get(name), want[static_cast<size_t>(id)].data), 1e-5) << name;
}

// A value of parameters alone that two kernels of the run read stays a hoisted kernel of its own: the first reader's
// kernel, which would store it for the second (FusionPlan::stored_in), runs every time.
TEST(HoistTest, AParameterOnlyValueTwoRunKernelsReadStaysHoisted) {
    Graph g;
    const Tensor x = g.input("x", {5, 33});
    const Tensor folded = g.exp(g.parameter("p", {5, 33})) * 2.0;
    g.output("y", g.tanh(x + folded));
    g.output("z", x * folded);
    Session s = compile(g, device());
    EXPECT_EQ(s.stats().hoisted_dispatches, 1u);  // exp(p) * 2
    EXPECT_EQ(s.stats().dispatches, 1u);          // y and z, one batch (of an input and exp(p) * 2)
    const ref::Feeds feeds = random_feeds(g, 14);
    set_feeds(s, g, feeds);
    s.run();
    expect_session_matches(s, g, feeds);
}

TEST(HoistTest, ParameterOnlyStepsRunWhenAParameterChanges) {
    Folded m;
    Session s = compile(m.g, device());
    EXPECT_EQ(s.stats().hoisted_dispatches, 1u);  // w * exp(scale) for the convolution, and the gain: one batch
    EXPECT_EQ(s.stats().dispatches, 1u);          // the convolution and its ReLU
    ref::Feeds feeds = feeds_with_scale(m.g, 11, 1);
    set_feeds(s, m.g, feeds);
    s.run();
    expect_session_matches(s, m.g, feeds);
    // A new input only: the folded weights stay as they were computed.
    feeds.at("x") = random_feeds(m.g, 12).at("x");
    s.set("x", std::vector<float>(feeds.at("x").data.begin(), feeds.at("x").data.end()));
    s.run();
    expect_session_matches(s, m.g, feeds);
    // A new parameter: folded again before the convolution reads it.
    feeds.at("scale") = feeds_with_scale(m.g, 13, 0.5).at("scale");
    s.set("scale", std::vector<float>(feeds.at("scale").data.begin(), feeds.at("scale").data.end()));
    s.run();
    expect_session_matches(s, m.g, feeds);
    s.run();
    expect_session_matches(s, m.g, feeds);

    // load and copy_to write parameters too.
    TempDir dir("hoist");
    Session other = compile(m.g, device());
    const ref::Feeds other_feeds = feeds_with_scale(m.g, 14, 2);
    set_feeds(other, m.g, other_feeds);
    other.save(dir.path("weights.safetensors"));
    s.load(dir.path("weights.safetensors"));
    s.run();
    ref::Feeds loaded = other_feeds;
    loaded.at("x") = feeds.at("x");
    expect_session_matches(s, m.g, loaded);
    set_feeds(other, m.g, feeds);
    other.copy_to(s, {"scale", "w"});
    s.run();
    expect_session_matches(s, m.g, feeds);
}

// State that no step writes (an eval batch norm's running variance) is as invariant as a parameter;
// set, it takes effect in the next run. State a step writes (a KV cache) is not: see KvCacheTest.
TEST(HoistTest, StateNoStepWritesIsHoistedToo) {
    Graph g;
    Tensor var = g.state("var", {5}, Init::ones());
    // A max over (var + 1)^-1/2 as its own value: the reader would compute a broadcast operand itself.
    g.output("y", g.input("x", {3, 5}) * g.max(g.rsqrt(var + 1.0), {0}, true));
    Session s = compile(g, device());
    EXPECT_EQ(s.stats().hoisted_dispatches, 1u);  // the max, which evaluates rsqrt(var + 1) as it reads it
    EXPECT_EQ(s.stats().dispatches, 1u);
    const std::vector<float> x = {1, 2, 3, 4, 5, -1, -2, -3, -4, -5, 0.5, 0.25, 8, 16, 32};
    s.set("x", x);
    for (const std::vector<float>& v : {std::vector<float>(5, 1.f), std::vector<float>{3, 0, 8, 15, 24}}) {
        s.set("var", v);
        s.run();
        const std::vector<float> y = s.get("y");
        const float smallest = *std::min_element(v.begin(), v.end());
        for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(y[i], x[i] / std::sqrt(smallest + 1.f)) << i;
    }
}

// Training changes the parameters every run: nothing is hoisted.
TEST(HoistTest, TrainingHoistsNothing) {
    Folded m;
    CompileOptions train;
    train.loss = m.g.mean(m.y);
    train.optimizer = SGD{.lr = 0.1};
    EXPECT_EQ(compile(m.g, device(), train).stats().hoisted_dispatches, 0u);
}

}  // namespace
}  // namespace mn::test
