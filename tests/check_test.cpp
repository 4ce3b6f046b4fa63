// MEGANEURA_CHECK: every value a dispatch writes against the float64 reference after each run.
#include <cmath>
#include <random>

#include "gpu_check.hpp"
#include "error_of.hpp"
#include "temp_dir.hpp"
#include "compiler/check.hpp"
#include "meganeura/autodiff.hpp"

namespace mn::test {
namespace {

using CheckTest = GpuTest;

// logits = relu(x @ w1 + b1) @ w2; loss = cross entropy: a matmul storing through its bias and relu (an
// epilogue), a matmul, a reduction.
struct Mlp {
    Graph g;
    Tensor loss;
    Mlp() {
        const Tensor x = g.input("x", {6, 5});
        const Tensor h = g.relu(g.matmul(x, g.parameter("w1", {5, 7}, Init::uniform(-0.5, 0.5))) +
                                g.parameter("b1", {7}, Init::uniform(-0.5, 0.5)));
        const Tensor logits = g.matmul(h, g.parameter("w2", {7, 3}, Init::uniform(-0.5, 0.5)));
        g.output("logits", logits);
        loss = g.cross_entropy(logits, g.input("labels", {6}, DType::I32));
        g.output("loss", loss);
    }
};

void feed(Session& s) {
    s.set("x", std::vector<float>{0.1f, -0.4f, 0.9f, 0.3f, -0.7f, 0.5f, 0.2f, -0.1f, 0.8f, -0.6f, 0.4f, 0.0f, 0.6f, -0.3f, 0.7f,
                                  -0.2f, 0.9f, -0.8f, 0.1f, 0.3f, -0.5f, 0.6f, 0.2f, -0.9f, 0.4f, 0.7f, -0.1f, 0.5f, -0.4f, 0.8f});
    s.set("labels", std::vector<int32_t>{0, 2, 1, 1, 0, 2});
}

TEST_F(CheckTest, CorrectRunsAndStepsPass) {
    const ScopedEnv check("MEGANEURA_CHECK", "1");
    Mlp m;
    Session inference = compile(m.g, device());
    feed(inference);
    inference.run();
    Session training = compile(m.g, device(), {.loss = m.loss});
    feed(training);
    for (int i = 0; i < 3; ++i) training.step();  // the updated parameters feed the next check
}

TEST_F(CheckTest, NamesTheFirstNodeThatDiverges) {
    // No f32 kernel meets 1e-15 against float64: the first dispatch's node is the one named.
    const ScopedEnv check("MEGANEURA_CHECK", "1e-15");
    Mlp m;
    Session s = compile(m.g, device());
    feed(s);
    const std::string what = error_of([&] { s.run(); });
    EXPECT_EQ(what.rfind("MEGANEURA_CHECK: node ", 0), 0u) << what;
    EXPECT_NE(what.find("(relu, (6,7)), written by dispatch 0 'matmul+add+relu', is the first to diverge from the "
                        "reference: relative L2 "), std::string::npos) << what;
    EXPECT_NE(what.find("; limit 1e-15"), std::string::npos) << what;
}

// A convolution's input gradient (2 x 8 x 16 x 16, 16 channels summed over 3 x 3 taps) with random
// operands, its float64 value, and the same rounded to float32.
struct ConvGradInput {
    Graph g;
    Node node;
    ref::Value gy, w;
    std::vector<double> want, rounded;
    ConvGradInput() {
        const std::vector<int64_t> attrs{1, 1, 1, 1, 1, 1, 1};
        const Tensor t = g.conv2d_grad_input(g.input("gy", {2, 16, 16, 16}), g.input("w", {16, 8, 3, 3}), {2, 8, 16, 16}, attrs);
        node = g.node(t);
        const ref::Feeds feeds = random_feeds(g, 7);
        gy = feeds.at("gy");
        w = feeds.at("w");
        want = ref::evaluate_node(node, {&gy, &w}, {}).data;
        for (double x : want) rounded.push_back(static_cast<float>(x));
    }
    compiler::NodeError error(const std::vector<double>& got) const {
        return compiler::node_error(node, got, {&gy, &w}, {}, std::ldexp(1.0, -24));
    }
};

// The kind of error issue 11 suspected: one element of a gradient 1% off. Its relative L2 over 4,096
// elements is ~1e-4, under the limit; the element-wise measure sees it.
TEST(CheckCriterion, OneWrongElementAmongManyIsCaught) {
    const ConvGradInput c;
    std::vector<double> got = c.rounded;
    size_t typical = 0;
    while (std::fabs(c.want[typical]) < 1.0) ++typical;
    got[typical] *= 1.01;
    const compiler::NodeError e = c.error(got);
    EXPECT_LT(e.relative_l2, 1e-3);
    EXPECT_GT(e.worst_element, 3e-3);
    EXPECT_EQ(e.worst_at, typical);
}

TEST(CheckCriterion, Float32RoundingIsNoError) {
    const ConvGradInput c;
    const compiler::NodeError e = c.error(c.rounded);
    EXPECT_LT(e.relative_l2, 1e-7);
    EXPECT_EQ(e.worst_element, 0);
}

// A sum that cancels to almost nothing (a batch norm's mean gradient) is judged by its terms' size.
TEST(CheckCriterion, CancellingSumsAreJudgedByTheirTerms) {
    Graph g;
    const Node sum = g.node(g.sum(g.input("x", {2, 1000}), {1}));
    ref::Value x{{2, 1000}, {}};
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> d(-1, 1);
    for (int row = 0; row < 2; ++row) {
        double total = 0;
        for (int i = 0; i < 999; ++i) total += x.data.emplace_back(static_cast<float>(d(rng)));
        x.data.push_back(-total);  // the row sums to 0 in float64
    }
    std::vector<double> got;
    for (int row = 0; row < 2; ++row) {
        float acc = 0;  // float32's sequential sum: ~1e-6 left over
        for (int i = 0; i < 1000; ++i) acc += static_cast<float>(x.data[static_cast<size_t>(row * 1000 + i)]);
        got.push_back(acc);
    }
    const compiler::NodeError e = compiler::node_error(sum, got, {&x}, {}, std::ldexp(1.0, -24));
    EXPECT_EQ(e.worst_element, 0);
    EXPECT_LT(e.relative_l2, 1e-3);
}

// Issue 11's mechanism, in the smallest graph: h = [1, 2^-30] . [1, 1] - 1 is 2^-30 in float64 and
// exactly 0 in float32 (1 + 2^-30 rounds to 1), so relu(h)'s gradient mask is 1 in float64 and 0 on
// any IEEE float32 device. Every kernel is right; the gradient of b is 3 in float64 and 0 here. The
// check passes every node and reports the decision.
TEST_F(CheckTest, ReportsADecisionFloat32TakesOnTheOtherSide) {
    const ScopedEnv check("MEGANEURA_CHECK", "1e-6");
    Graph g;
    const Tensor x = g.input("x", {1, 2});
    const Tensor w = g.parameter("w", {2, 1});
    const Tensor b = g.parameter("b", {1});
    const Tensor loss = g.sum(g.relu(g.matmul(x, w) + b) * 3.0);
    g.output("grad.b", grad(loss, {b})[0]);
    Session s = compile(g, device());
    s.set("x", std::vector<float>{1.0f, std::ldexp(1.0f, -30)});
    s.set("w", std::vector<float>{1.0f, 1.0f});
    s.set("b", std::vector<float>{-1.0f});
    ::testing::internal::CaptureStderr();
    s.run();
    const std::string report = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(s.get("grad.b"), std::vector<float>{0.0f});
    const ref::Feeds feeds{{"x", {{1, 2}, {1.0, std::ldexp(1.0, -30)}}}, {"w", {{2, 1}, {1.0, 1.0}}}, {"b", {{1}, {-1.0}}}};
    EXPECT_EQ(ref::evaluate(g, feeds)[static_cast<size_t>(g.outputs()[0].second)].data, std::vector<double>{3.0});
    EXPECT_NE(report.find("(greater, (1,1)) decided 1 of 1 elements differently from float64 end to end; element 0's "
                          "argument is 9.31e-10 in float64 and 0 on the device"), std::string::npos) << report;
}

TEST_F(CheckTest, BadLimitIsNamed) {
    const ScopedEnv check("MEGANEURA_CHECK", "often");
    Mlp m;
    EXPECT_EQ(error_of([&] { compile(m.g, device()); }),
              "MEGANEURA_CHECK must be 1 or a positive limit such as 1e-5, got 'often'");
}

}  // namespace
}  // namespace mn::test
