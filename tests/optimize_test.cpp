// optimize/: each rewrite removes what it should and the graph computes what it did.
#include <algorithm>

#include "gpu_check.hpp"
#include "meganeura/autodiff.hpp"
#include "optimize/optimize.hpp"

namespace mn::test {
namespace {

size_t count_op(const Graph& g, Op op) {
    return static_cast<size_t>(std::count_if(g.nodes().begin(), g.nodes().end(), [&](const Node& n) { return n.op == op; }));
}

// The optimized graph's outputs equal the original's in the reference, to the last bit.
void expect_same_outputs(const Graph& before, const Graph& after, uint64_t seed) {
    const ref::Feeds feeds = random_feeds(before, seed);
    const auto want = ref::evaluate(before, feeds), got = ref::evaluate(after, feeds);
    ASSERT_EQ(before.outputs().size(), after.outputs().size());
    for (size_t i = 0; i < before.outputs().size(); ++i) {
        EXPECT_EQ(after.outputs()[i].first, before.outputs()[i].first);
        EXPECT_EQ(got[static_cast<size_t>(after.outputs()[i].second)].data, want[static_cast<size_t>(before.outputs()[i].second)].data);
    }
}

TEST(OptimizeTest, IdentitiesAreRemoved) {
    Graph g;
    const Tensor x = g.input("x", {3, 4});
    const Tensor y = g.neg(g.neg((x * 1.0 + 0.0) / 1.0));
    g.output("y", g.tanh(g.reshape(y, {3, 4})));
    optimize::Stats stats;
    const Graph o = optimize::optimize(g, &stats);
    EXPECT_EQ(stats.identities, 5u);  // mul, add, div, the double negation, the reshape
    EXPECT_EQ(stats.dead, 3u);  // the inner negation and the constants 1 and 0, which nothing reads any more
    EXPECT_EQ(count_op(o, Op::Mul) + count_op(o, Op::Add) + count_op(o, Op::Div) + count_op(o, Op::Neg), 0u);
    expect_same_outputs(g, o, 1);
}

TEST(OptimizeTest, IdentitiesThatBroadcastStay) {
    Graph g;
    const Tensor x = g.input("x", {4});
    g.output("y", g.tanh(x * g.full({3, 4}, 1.0)));  // the product broadcasts x to [3, 4]
    const Graph o = optimize::optimize(g);
    EXPECT_EQ(count_op(o, Op::Mul), 1u);
    expect_same_outputs(g, o, 2);
}

TEST(OptimizeTest, RepeatedProductsAndConstantsAreMergedPointwiseRepeatsLeftToFusion) {
    Graph g;
    const Tensor a = g.input("a", {5, 6}), b = g.input("b", {6, 7});
    const Tensor p = g.matmul(a, b) * 2.0, q = g.matmul(a, b) * 2.0;
    g.output("y", g.exp(p) + g.exp(q));
    optimize::Stats stats;
    const Graph o = optimize::optimize(g, &stats);
    EXPECT_EQ(count_op(o, Op::MatMul), 1u);
    EXPECT_EQ(count_op(o, Op::Constant), 1u);  // the two scalars 2
    EXPECT_EQ(count_op(o, Op::Exp), 2u);
    EXPECT_EQ(stats.merged, 2u);
    expect_same_outputs(g, o, 3);
}

TEST(OptimizeTest, DeadNodesGoLeavesStay) {
    Graph g;
    const Tensor x = g.input("x", {8});
    g.input("unused", {2});
    g.sum(g.exp(x));  // feeds nothing
    g.output("y", g.sum(x));
    optimize::Stats stats;
    const Graph o = optimize::optimize(g, &stats);
    EXPECT_EQ(stats.dead, 2u);
    EXPECT_TRUE(o.find("unused").has_value());
    EXPECT_EQ(o.nodes().size(), 3u);
    expect_same_outputs(g, o, 4);
}

// The fast precision runs forward products in f16 and gradient products in f32: a gradient node equal
// to a forward one stays its own node, and the optimized graph keeps the boundary.
TEST(OptimizeTest, ForwardAndGradientNodesAreNotMerged) {
    Graph g;
    const Tensor a = g.input("a", {4, 4}), w = g.parameter("w", {4, 4});
    const Tensor loss = g.sum(g.matmul(a, w));
    g.output("loss", loss);
    const Tensor dw = grad(loss, {w})[0];
    g.output("forward_again", g.sum(g.matmul(a, w)));
    g.output("grad.w", dw + g.matmul(a, w));
    const Graph o = optimize::optimize(g);
    size_t forward = 0, backward = 0;
    for (int32_t id = 0; id < static_cast<int32_t>(o.nodes().size()); ++id) {
        if (o.node(id).op == Op::MatMul) ++(o.node(id).gradient ? backward : forward);
    }
    EXPECT_EQ(forward, 1u);
    EXPECT_GE(backward, 1u);
    expect_same_outputs(g, o, 5);
}

// A permute that keeps the order of its dims of size > 1 is a reshape (a decode step's split of the heads at
// one token); one that moves them stays a permute.
TEST(OptimizeTest, PermutesThatMoveNoElementAreReshapes) {
    Graph g;
    const Tensor x = g.input("x", {2, 1, 3, 4});
    g.output("split", g.tanh(g.permute(x, {0, 2, 1, 3})));  // [2, 3, 1, 4]: the 3 and the 4 keep their order
    g.output("moved", g.tanh(g.permute(x, {0, 3, 1, 2})));  // [2, 4, 1, 3]: they swap
    optimize::Stats stats;
    const Graph o = optimize::optimize(g, &stats);
    EXPECT_EQ(stats.identities, 1u);
    EXPECT_EQ(count_op(o, Op::Permute), 1u);
    EXPECT_EQ(count_op(o, Op::Reshape), 1u);
    expect_same_outputs(g, o, 8);
}

// A reduction over axes of size 1 (the gradient of a broadcast over a batch of one) is a reshape, not a kernel
// of one element per output; one over an axis longer than 1 stays.
TEST(OptimizeTest, ReductionsOverAxesOfOneAreReshapes) {
    Graph g;
    const Tensor x = g.input("x", {1, 5, 1, 7});
    g.output("sum", g.tanh(g.sum(x, {0})));
    g.output("mean", g.tanh(g.mean(x, {0, 2}, true)));
    g.output("max", g.tanh(g.max(x, {2})));
    g.output("kept", g.tanh(g.sum(x, {0, 1})));  // over 5 elements
    optimize::Stats stats;
    const Graph o = optimize::optimize(g, &stats);
    EXPECT_EQ(stats.identities, 3u);
    EXPECT_EQ(count_op(o, Op::Sum), 1u);
    EXPECT_EQ(count_op(o, Op::Mean) + count_op(o, Op::Max), 0u);
    expect_same_outputs(g, o, 9);
}

// Linear layers reading one input (q, k and v) become one product over their weights stacked by rows and
// a slice of its columns each, computing the same values bit for bit; one read by a pointwise op (a SwiGLU's
// gate, which its reader stores as the product's epilogue) stays its own product, and one nothing reads
// goes. With biases (Whisper's q and v; k has none) the product adds the biases stacked the same way, zeros in k's
// place, and each bias's add is a slice of that sum (a view of it for a 3-D input's rows); one whose bias another
// pointwise op reads after (an activation, a LoRA delta added) stays apart: that op is its product's epilogue.
TEST(OptimizeTest, SiblingProductsBecomeOneOverTheirStackedWeights) {
    for (const bool biased : {false, true}) {
        Graph g;
        const Tensor x = g.input("x", {2, 3, 8});
        const auto linear = [&](const std::string& name, int64_t rows, bool bias) {
            const Tensor w = g.parameter(name, {rows, 8});
            return bias ? g.linear(x, w, g.parameter(name + ".bias", {rows})) : g.linear(x, w);
        };
        const Tensor q = linear("q", 6, biased), k = linear("k", 4, false), v = linear("v", 5, biased);
        const Tensor gate = linear("gate", 7, biased);
        linear("unused", 3, false);
        g.output("q", g.softmax(q, -1));
        g.output("k", k);
        g.output("v", g.sum(v, {1}));
        g.output("gated", g.silu(gate));
        optimize::Stats stats;
        const Graph o = optimize::optimize(g, &stats);
        EXPECT_EQ(stats.siblings, 2u) << biased;                       // k and v are slices of q's product now
        EXPECT_EQ(count_op(o, Op::MatMul), 2u) << biased;              // the stacked one, and the gate's
        EXPECT_EQ(count_op(o, Op::Concat), biased ? 2u : 1u) << biased;  // the weights, and the biases
        EXPECT_EQ(count_op(o, Op::Add), biased ? 2u : 0u) << biased;     // the stacked biases', and the gate's
        EXPECT_EQ(count_op(o, Op::Slice), 3u) << biased;
        for (const char* name : {"q", "k", "v", "gate", "unused"}) EXPECT_TRUE(o.find(name).has_value()) << name;
        expect_same_outputs(g, o, biased ? 8 : 7);
    }
}

// A program that trains (here one assignment of a parameter) keeps its siblings apart: its weights change
// every step, so stacking them would be copies every step, not once.
TEST(OptimizeTest, SiblingProductsOfAProgramThatTrainsStayApart) {
    Graph g;
    const Tensor x = g.input("x", {3, 8});
    const Tensor wq = g.parameter("q", {6, 8});
    g.output("q", g.matmul(x, wq, false, true));
    g.output("k", g.matmul(x, g.parameter("k", {4, 8}), false, true));
    g.assign(wq, wq * 0.5);
    optimize::Stats stats;
    const Graph o = optimize::optimize(g, &stats);
    EXPECT_EQ(stats.siblings, 0u);
    EXPECT_EQ(count_op(o, Op::MatMul), 2u);
}

// On the GPU, a training step of a model whose graph the pass changes is the same with it and without it.
using OptimizeGpuTest = GpuTest;
TEST_F(OptimizeGpuTest, TrainingStepsAgreeWithAndWithoutTheRewrites) {
    Graph g;
    const Tensor x = g.input("x", {6, 5});
    const Tensor w = g.parameter("w", {5, 5}, Init::uniform(-0.5, 0.5));
    const Tensor h = g.tanh(g.matmul(x, w) * 1.0) + g.tanh(g.matmul(x, w));
    const Tensor loss = g.mean(h * h);
    g.output("loss", loss);
    const ref::Feeds feeds = random_feeds(g, 6);
    std::vector<std::vector<float>> losses;
    for (bool rewrite : {true, false}) {
        Session s = compile(g, device(), {.loss = loss, .optimizer = SGD{.lr = 0.1}, .optimize = rewrite});
        s.set("x", std::vector<float>(feeds.at("x").data.begin(), feeds.at("x").data.end()));
        std::vector<float> curve;
        for (int i = 0; i < 3; ++i) curve.push_back(s.step());
        losses.push_back(curve);
    }
    EXPECT_EQ(losses[0], losses[1]);
}

}  // namespace
}  // namespace mn::test
