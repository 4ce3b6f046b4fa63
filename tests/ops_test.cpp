// Every op on the GPU against the float64 reference, at odd sizes that are multiples of no tile.
#include <cstring>

#include "gpu_check.hpp"
#include "temp_dir.hpp"

namespace mn::test {
namespace {

using OpsTest = GpuTest;

const std::vector<Shape> kShapes = {{1}, {7, 33}, {2, 3, 257}};

TEST_F(OpsTest, Unary) {
    using Fn = Tensor (Graph::*)(Tensor);
    const std::vector<std::pair<const char*, Fn>> ops = {
        {"neg", &Graph::neg},   {"exp", &Graph::exp},         {"abs", &Graph::abs},   {"relu", &Graph::relu},
        {"sigmoid", &Graph::sigmoid}, {"tanh", &Graph::tanh}, {"silu", &Graph::silu}};
    const std::vector<std::pair<const char*, Fn>> positive_ops = {
        {"log", &Graph::log}, {"sqrt", &Graph::sqrt}, {"rsqrt", &Graph::rsqrt}};
    uint64_t seed = 1;
    for (const Shape& shape : kShapes) {
        for (bool positive : {false, true}) {
            for (const auto& [name, fn] : positive ? positive_ops : ops) {
                SCOPED_TRACE(std::string(name) + " " + shape_str(shape));
                Graph g;
                g.output("y", (g.*fn)(g.input("x", shape)));
                expect_matches_reference(g, random_feeds(g, seed++, positive ? FeedRange{0.1, 4} : FeedRange{-4, 4}));
            }
        }
        for (const char* approx : {"none", "tanh"}) {
            Graph g;
            g.output("y", g.gelu(g.input("x", shape), approx));
            expect_matches_reference(g, random_feeds(g, seed++, {-5, 5}));
        }
    }
}

TEST_F(OpsTest, BinaryWithBroadcasting) {
    using Fn = Tensor (Graph::*)(Tensor, Tensor);
    const std::vector<std::pair<const char*, Fn>> ops = {
        {"add", &Graph::add}, {"sub", &Graph::sub}, {"mul", &Graph::mul}, {"div", &Graph::div},
        {"maximum", &Graph::maximum}, {"minimum", &Graph::minimum}};
    const std::vector<std::pair<Shape, Shape>> shapes = {
        {{1}, {1}}, {{7, 33}, {33}}, {{2, 1, 257}, {3, 1}}, {{257}, {257}}, {{}, {4, 7}}};
    uint64_t seed = 100;
    for (const auto& [sa, sb] : shapes) {
        for (const auto& [name, fn] : ops) {
            SCOPED_TRACE(std::string(name) + " " + shape_str(sa) + " " + shape_str(sb));
            Graph g;
            g.output("y", (g.*fn)(g.input("a", sa), g.input("b", sb)));
            // keep divisors away from zero
            expect_matches_reference(g, random_feeds(g, seed++, name == std::string("div") ? FeedRange{0.5, 3} : FeedRange{}));
        }
    }
}

TEST_F(OpsTest, PowHandlesNegativeBasesWithIntegerExponents) {
    Graph g;
    auto x = g.input("x", {7, 33});
    g.output("cube", g.pow(x, 3.0));
    g.output("square", g.pow(x, 2.0));
    g.output("zero", g.pow(x, 0.0));
    expect_matches_reference(g, random_feeds(g, 7));
    g.output("frac", g.pow(g.abs(x), 0.5));  // non-integer exponent on a non-negative base
    expect_matches_reference(g, random_feeds(g, 8));
}

TEST_F(OpsTest, Reductions) {
    const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
        {{1}, {}},         {{257}, {0}},         {{7, 33}, {1}},         {{7, 33}, {0}},
        {{3, 7, 33}, {1}}, {{2, 3, 4, 5}, {0, 2}}, {{2, 3, 4, 5}, {1, 3}}, {{5, 1, 7}, {0, 2}}, {{4, 1000}, {}},
        {{3, 6, 5, 7}, {0, 2, 3}}, {{2, 1, 5, 3, 1}, {0, 3}},
        // short rows, several to a workgroup: a global average pool's 49 pixels, 300 of them (38 workgroups of 8)
        {{3, 100, 7, 7}, {2, 3}},
        // wide rows (column reductions): one piece, several, a leading axis, partial column blocks
        {{64, 32}, {0}}, {{1000, 33}, {0}}, {{2, 150, 100}, {0, 1}}, {{4, 3, 70, 40}, {0, 2}}, {{3, 130, 64}, {1}}};
    uint64_t seed = 200;
    for (const auto& [shape, axes] : cases) {
        for (bool keepdim : {false, true}) {
            SCOPED_TRACE(shape_str(shape) + " axes " + shape_str(axes) + (keepdim ? " keepdim" : ""));
            Graph g;
            auto x = g.input("x", shape);
            g.output("sum", g.sum(x, axes, keepdim));
            g.output("mean", g.mean(x, axes, keepdim));
            g.output("max", g.max(x, axes, keepdim));
            expect_matches_reference(g, random_feeds(g, seed++));
        }
    }
}

// A per-channel sum over images and pixels (a norm's weight gradient, a batch norm's statistics) reads the
// NCHW tensor in place: one kernel, no transposed copy first.
TEST_F(OpsTest, PerChannelReductionIsOneKernel) {
    Graph g;
    g.output("sum", g.sum(g.input("x", {3, 6, 5, 7}), {0, 2, 3}));
    EXPECT_EQ(compile(g, device()).stats().dispatches, 1u);
    expect_matches_reference(g, random_feeds(g, 250));
}

// g's output "y", three runs of one session, with a reduction's pieces summed where MEGANEURA_SPLIT_SUM says (by
// the workgroup that stores an output's last piece, or a dispatch of their own), and the session's dispatches.
std::vector<std::vector<float>> three_runs(const Graph& g, const ref::Feeds& feeds, const char* where, uint64_t* dispatches) {
    const ScopedEnv sum("MEGANEURA_SPLIT_SUM", where);
    Session s = compile(g, device());
    *dispatches = s.stats().dispatches;
    set_feeds(s, g, feeds);
    std::vector<std::vector<float>> runs;
    for (int run = 0; run < 3; ++run) {
        s.run();
        runs.push_back(s.get("y"));
    }
    return runs;
}

// A reduction in pieces (`pieces`: several, or one) is one kernel whose last piece of each output sums the pieces,
// and two with MEGANEURA_SPLIT_SUM=dispatch (a sum kernel after the pieces): the same additions in the same order, so
// the same bits, on every run (the counters are zero again after each). Against the float64 reference too.
void expect_pieces_summed_in_the_kernel(const Graph& g, const ref::Feeds& feeds, bool pieces) {
    uint64_t in_kernel = 0, apart = 0;
    const auto summed = three_runs(g, feeds, "product", &in_kernel), dispatched = three_runs(g, feeds, "dispatch", &apart);
    EXPECT_EQ(in_kernel, 1u);
    EXPECT_EQ(apart, pieces ? 2u : 1u);
    for (size_t run = 0; run < summed.size(); ++run) {
        ASSERT_EQ(summed[run].size(), dispatched[run].size());
        EXPECT_EQ(std::memcmp(summed[run].data(), dispatched[run].data(), summed[run].size() * sizeof(float)), 0) << "run " << run;
    }
    expect_matches_reference(g, feeds);
}

// A sum over the rows of [rows, features] (a bias's gradient) reads the rows coalesced, in pieces of rows; under
// 128 rows, one piece. 96 and 97 columns: whole and partial blocks of 32.
TEST_F(OpsTest, ColumnSumsReadRowsInPieces) {
    for (const auto& [rows, pieces] : std::vector<std::pair<int64_t, bool>>{{3000, true}, {100, false}}) {
        for (const int64_t columns : {96, 97}) {
            for (const bool mean : {false, true}) {
                SCOPED_TRACE(testing::Message() << rows << " x " << columns << (mean ? " mean" : " sum"));
                Graph g;
                const Tensor x = g.input("x", {rows, columns});
                g.output("y", mean ? g.mean(x, {0}) : g.sum(x, {0}));
                expect_pieces_summed_in_the_kernel(g, random_feeds(g, 260), pieces);
            }
        }
    }
}

// Few outputs over long rows (a loss's mean over a whole tensor, a per-channel sum over images and pixels)
// cut each row into pieces, a workgroup a piece. A max, and rows under two pieces of 4096, stay one piece.
TEST_F(OpsTest, LongRowsAreReducedInPieces) {
    struct Case { Shape shape; std::vector<int64_t> axes; bool pieces; };
    for (const Case& c : std::vector<Case>{{{3, 5000, 2}, {0, 1, 2}, true}, {{9000}, {0}, true}, {{4, 3, 70, 40}, {0, 2, 3}, true},
                                           {{2, 7, 4000}, {2}, false}, {{8000}, {0}, false}}) {
        SCOPED_TRACE(shape_str(c.shape) + " axes " + shape_str(c.axes));
        for (int which = 0; which < 3; ++which) {
            Graph g;
            auto x = g.input("x", c.shape);
            g.output("y", which == 0 ? g.sum(x, c.axes) : which == 1 ? g.mean(x, c.axes) : g.max(x, c.axes));
            expect_pieces_summed_in_the_kernel(g, random_feeds(g, 270 + which), which != 2 && c.pieces);
        }
    }
}

TEST_F(OpsTest, SoftmaxAndLogSoftmax) {
    uint64_t seed = 300;
    for (const auto& [shape, axis] : std::vector<std::pair<Shape, int64_t>>{
             {{1}, -1}, {{7, 33}, -1}, {{7, 33}, 0}, {{2, 257, 3}, 1}, {{3, 1000}, -1}}) {
        SCOPED_TRACE(shape_str(shape));
        Graph g;
        auto x = g.input("x", shape);
        g.output("softmax", g.softmax(x, axis));
        g.output("log_softmax", g.log_softmax(x, axis));
        expect_matches_reference(g, random_feeds(g, seed++, {-10, 10}));
    }
}

TEST_F(OpsTest, Matmul) {
    struct Case { Shape a, b; bool ta, tb; };
    const std::vector<Case> cases = {
        {{1, 1}, {1, 1}, false, false},       {{7, 33}, {33, 257}, false, false},
        {{33, 7}, {33, 257}, true, false},    {{7, 33}, {257, 33}, false, true},
        {{33, 7}, {257, 33}, true, true},     {{257, 33}, {33, 7}, false, false},
        {{512, 512}, {512, 512}, false, false}, {{2, 3, 17, 9}, {3, 9, 13}, false, false},
        {{4, 5, 7}, {1, 7, 6}, false, false}, {{3, 9, 17}, {3, 13, 9}, true, true}};
    uint64_t seed = 400;
    for (const auto& c : cases) {
        SCOPED_TRACE(shape_str(c.a) + (c.ta ? "^T" : "") + " @ " + shape_str(c.b) + (c.tb ? "^T" : ""));
        Graph g;
        g.output("c", g.matmul(g.input("a", c.a), g.input("b", c.b), c.ta, c.tb));
        expect_matches_reference(g, random_feeds(g, seed++));
    }
}

TEST_F(OpsTest, LinearWithBias) {
    Graph g;
    auto x = g.input("x", {2, 5, 33});
    g.output("y", g.linear(x, g.parameter("w", {7, 33}), g.parameter("b", {7})));
    expect_matches_reference(g, random_feeds(g, 500));
}

TEST_F(OpsTest, DataMovement) {
    Graph g;
    auto x = g.input("x", {2, 7, 33});
    auto y = g.input("y", {2, 3, 33});
    g.output("reshape", g.reshape(x, {14, -1}));
    g.output("permute", g.permute(x, {2, 0, 1}));
    g.output("transpose", g.transpose(x, 0, 1));
    g.output("slice", g.slice(x, 1, 1, 6, 2));
    g.output("slice_neg", g.slice(x, -1, -5, 100));
    g.output("concat", g.concat({x, y, x}, 1));
    g.output("expand", g.expand(g.input("z", {7, 1}), {3, 7, 5}));
    g.output("flatten", g.flatten(x));
    expect_matches_reference(g, random_feeds(g, 600));
}

// A concatenation is one kernel along any axis (a U-Net's skip connection), and a copy a piece where the pieces
// would take more storage buffers than a fused kernel may bind.
TEST_F(OpsTest, ConcatenationIsOneKernel) {
    for (int64_t axis = 0; axis < 3; ++axis) {
        SCOPED_TRACE(testing::Message() << "axis " << axis);
        Graph g;
        std::vector<Tensor> pieces;
        for (int64_t length : {3, 1, 5}) {
            Shape shape{2, 4, 6};
            shape[static_cast<size_t>(axis)] = length;
            pieces.push_back(g.input("x" + std::to_string(pieces.size()), shape));
        }
        g.output("y", g.concat(pieces, axis));
        EXPECT_EQ(compile(g, device()).stats().dispatches, 1u);
        expect_matches_reference(g, random_feeds(g, 610 + static_cast<uint64_t>(axis)));
    }
    Graph g;
    std::vector<Tensor> pieces;
    for (int p = 0; p < 20; ++p) pieces.push_back(g.input("x" + std::to_string(p), {2, 1, 3}));
    g.output("y", g.concat(pieces, 1));
    EXPECT_EQ(compile(g, device()).stats().dispatches, 20u);
    expect_matches_reference(g, random_feeds(g, 613));
}

// A nearest upsampling that a concatenation alone reads (the U-Net's skip connections) is read by the concatenation's
// kernel through its expand's strides, not copied first: one kernel, where the copy took a kernel and a level. Both
// orders of the pieces; then one that the output reads too, which is stored (two kernels), against float64.
TEST_F(OpsTest, UpsampledPieceIsReadByTheConcatenation) {
    for (const bool upsampled_first : {true, false}) {
        SCOPED_TRACE(upsampled_first ? "upsampled first" : "upsampled second");
        Graph g;
        const Tensor up = g.upsample_nearest2x(g.input("x", {2, 3, 4, 5}));
        const Tensor skip = g.input("skip", {2, 2, 8, 10});
        g.output("y", upsampled_first ? g.concat({up, skip}, 1) : g.concat({skip, up}, 1));
        EXPECT_EQ(compile(g, device()).stats().dispatches, 1u);
        expect_matches_reference(g, random_feeds(g, 614));
    }
    Graph g;
    const Tensor up = g.upsample_nearest2x(g.input("x", {1, 2, 3, 3}));
    g.output("y", g.concat({up, g.input("skip", {1, 1, 6, 6})}, 1));
    g.output("up", up);
    EXPECT_EQ(compile(g, device()).stats().dispatches, 2u);
    expect_matches_reference(g, random_feeds(g, 615));
}

TEST_F(OpsTest, Losses) {
    for (int64_t classes : {1, 10, 257}) {
        Graph g;
        auto logits = g.input("logits", {33, classes});
        auto labels = g.input("labels", {33}, DType::I32);
        g.output("ce", g.cross_entropy(logits, labels));
        g.output("mse", g.mse_loss(logits, g.input("target", {33, classes})));
        auto feeds = random_feeds(g, 700 + static_cast<uint64_t>(classes), {-5, 5});
        std::mt19937 rng(1);
        for (auto& l : feeds["labels"].data) l = static_cast<double>(rng() % static_cast<uint32_t>(classes));
        expect_matches_reference(g, feeds);
        // every third row ignored (-100): the mean over the counted rows
        for (size_t r = 0; r < feeds["labels"].data.size(); r += 3) feeds["labels"].data[r] = Graph::kIgnoreIndex;
        expect_matches_reference(g, feeds);
    }
}

// The mean squared error is one reduction that squares the differences as it reads them: one kernel, and with its
// elements in pieces (two workgroups' worth of 4096 at least), the pieces' sum.
TEST_F(OpsTest, MeanSquaredErrorIsOneReduction) {
    for (const auto& [elements, dispatches] : std::vector<std::pair<int64_t, size_t>>{{1000, 1}, {20000, 2}}) {
        Graph g;
        g.output("mse", g.mse_loss(g.input("prediction", {elements}), g.input("target", {elements})));
        EXPECT_EQ(compile(g, device()).stats().dispatches, dispatches) << elements;
        expect_matches_reference(g, random_feeds(g, 720));
    }
}

// The loss is one kernel whose last row's workgroup takes the mean (a counter it resets for the next run): more
// rows than a workgroup has threads, every run of one session, new labels each run, all of them ignored in the last.
TEST_F(OpsTest, CrossEntropyMeanEveryRun) {
    const int64_t rows = 600, classes = 7;
    Graph g;
    auto logits = g.input("logits", {rows, classes});
    auto labels = g.input("labels", {rows}, DType::I32);
    const Tensor ce = g.cross_entropy(logits, labels);
    g.output("ce", ce);
    Session s = compile(g, device(), {.poison_outputs = true});
    ref::Feeds feeds = random_feeds(g, 710, {-5, 5});
    std::mt19937 rng(2);
    for (int run = 0; run < 4; ++run) {
        for (auto& l : feeds["labels"].data) {
            l = run == 3 ? Graph::kIgnoreIndex : rng() % 4 == 0 ? Graph::kIgnoreIndex : static_cast<double>(rng() % classes);
        }
        set_feeds(s, g, feeds);
        s.run();
        const double want = ref::evaluate(g, feeds)[static_cast<size_t>(ce.id)].data[0];
        const float got = s.get("ce")[0];
        if (run == 3) {
            EXPECT_TRUE(std::isnan(want) && std::isnan(got)) << "every label ignored: the mean of nothing, " << got;
        } else {
            EXPECT_NEAR(got, want, 1e-5 * std::abs(want)) << "run " << run;
        }
    }
}

TEST_F(OpsTest, HalfAndIntegerTensors) {
    Graph g;
    auto x = g.input("x", {7, 33});
    auto h = g.cast(x, DType::F16);
    g.output("half_exp", g.exp(h));
    g.output("half_matmul", g.matmul(h, g.cast(g.input("w", {33, 5}), DType::F16)));
    g.output("back", g.cast(g.mul(h, h), DType::F32));
    auto i = g.input("i", {7, 33}, DType::I32);
    g.output("int_ops", g.add(g.mul(i, i), g.neg(i)));
    g.output("to_int", g.cast(x, DType::I32));
    expect_matches_reference(g, random_feeds(g, 800, {-3, 3}), 2e-3);
}

TEST_F(OpsTest, IdenticalLayersShareOnePipeline) {
    Graph g;
    auto x = g.input("x", {8, 16});
    for (int i = 0; i < 4; ++i) x = g.relu(g.linear(x, g.parameter("w" + std::to_string(i), {16, 16})));
    g.output("y", x);
    Session s = compile(g, device());
    EXPECT_EQ(s.stats().dispatches, 4u);  // each matmul stores its relu (an epilogue)
    EXPECT_EQ(s.stats().pipelines, 1u);
}

}  // namespace
}  // namespace mn::test
