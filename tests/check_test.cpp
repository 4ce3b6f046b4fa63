// MEGANEURA_CHECK: every value a dispatch writes against the float64 reference after each run.
#include "gpu_check.hpp"
#include "error_of.hpp"
#include "temp_dir.hpp"

namespace mn::test {
namespace {

using CheckTest = GpuTest;

// logits = relu(x @ w1 + b1) @ w2; loss = cross entropy: a matmul, a fused pointwise kernel, a
// reduction.
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
    EXPECT_NE(what.find("(matmul, (6,7)), written by dispatch 0 'matmul', is the first to diverge from the "
                        "reference: relative L2 "), std::string::npos) << what;
    EXPECT_NE(what.find(" > 1e-15"), std::string::npos) << what;
}

TEST_F(CheckTest, BadLimitIsNamed) {
    const ScopedEnv check("MEGANEURA_CHECK", "often");
    Mlp m;
    EXPECT_EQ(error_of([&] { compile(m.g, device()); }),
              "MEGANEURA_CHECK must be 1 or a positive limit such as 1e-5, got 'often'");
}

}  // namespace
}  // namespace mn::test
