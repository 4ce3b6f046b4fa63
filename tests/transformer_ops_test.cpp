// The transformer ops on the GPU against the float64 reference (NaN-poisoned outputs), at odd
// sizes: rows longer than a workgroup, repeated ids, positions in the thousands; and their
// builders' errors. Their VJPs are checked by finite differences in autodiff_test.cpp.
#include "gpu_check.hpp"
#include "error_of.hpp"

namespace mn::test {
namespace {

using TransformerOpsTest = GpuTest;

ref::Value ids_value(Shape shape, int64_t count, uint64_t seed) {
    std::mt19937_64 rng(seed);
    ref::Value v{shape, {}};
    for (int64_t i = 0; i < numel(shape); ++i) v.data.push_back(static_cast<double>(rng() % static_cast<uint64_t>(count)));
    return v;
}

TEST_F(TransformerOpsTest, EmbeddingAndItsGradientWithRepeatedIds) {
    for (const auto& [ids_shape, vocab, dim] : std::vector<std::tuple<Shape, int64_t, int64_t>>{
             {{1}, 1, 1}, {{3, 11}, 7, 33}, {{2, 40}, 301, 257}}) {
        SCOPED_TRACE(shape_str(ids_shape) + " vocab " + std::to_string(vocab) + " dim " + std::to_string(dim));
        Graph g;
        Tensor ids = g.input("ids", ids_shape, DType::I32);
        Tensor w = g.input("w", {vocab, dim});
        Shape up_shape = ids_shape;
        up_shape.push_back(dim);
        g.output("rows", g.embedding(ids, w));
        g.output("grad", g.embedding_grad(ids, g.input("up", up_shape), vocab));
        ref::Feeds feeds = random_feeds(g, 1 + vocab);
        feeds["ids"] = ids_value(ids_shape, vocab, 7 + vocab);  // fewer ids than positions: repeats
        expect_matches_reference(g, feeds);
    }
}

TEST_F(TransformerOpsTest, EmbeddingOfAnIdOutOfRangeIsNaNOnTheGpuAndAnErrorInTheReference) {
    Graph g;
    g.output("rows", g.embedding(g.input("ids", {2}, DType::I32), g.input("w", {3, 4})));
    Session s = compile(g, device());
    s.set("ids", std::vector<int32_t>{1, 3});
    s.set("w", std::vector<float>(12, 1.0f));
    s.run();
    const auto rows = s.get("rows");
    EXPECT_EQ(rows[0], 1.0f);
    EXPECT_TRUE(std::isnan(rows[4]));
    ref::Feeds feeds{{"ids", {{2}, {1, 3}}}, {"w", {{3, 4}, std::vector<double>(12, 1.0)}}};
    EXPECT_THROW(ref::evaluate(g, feeds), Error);
}

TEST_F(TransformerOpsTest, NormsAndTheirInputGradients) {
    // 1000 > any workgroup: every thread strides over the row; offset rows test the two-pass mean.
    // (Rows of 1 are left out: their d / d x is a cancellation to ~0 that f32 cannot resolve.)
    for (const Shape& shape : std::vector<Shape>{{1, 3}, {7, 33}, {2, 3, 257}, {3, 1000}}) {
        SCOPED_TRACE(shape_str(shape));
        const Shape d{shape.back()};
        Graph g;
        Tensor x = g.input("x", shape) + 3.0;
        Tensor w = g.input("w", d), b = g.input("b", d), up = g.input("up", shape);
        g.output("rms", g.rms_norm(x, w, 1e-5));
        g.output("layer", g.layer_norm(x, w, b, 1e-5));
        g.output("rms_grad", g.rms_norm_grad(x, w, up, 1e-5));
        g.output("layer_grad", g.layer_norm_grad(x, w, up, 1e-5));
        expect_matches_reference(g, random_feeds(g, 40 + shape.back()), 2e-5);
    }
}

TEST_F(TransformerOpsTest, RopeRotatesHalvesAtLargePositions) {
    for (const auto& [shape, max_pos] : std::vector<std::pair<Shape, int>>{{{1, 2}, 3}, {{2, 3, 5, 34}, 4096}, {{7, 128}, 100}}) {
        SCOPED_TRACE(shape_str(shape));
        Graph g;
        Tensor x = g.input("x", shape);
        Tensor pos = g.input("pos", {shape[shape.size() - 2]}, DType::I32);
        Tensor y = g.rope(x, pos, 10000.0);
        g.output("y", y);
        g.output("back", g.rope_rotate(y, pos, g.handle(g.node(y).inputs[2]), true));  // undoes y
        ref::Feeds feeds = random_feeds(g, 90 + max_pos);
        feeds["pos"] = ids_value({shape[shape.size() - 2]}, max_pos, 3);
        expect_matches_reference(g, feeds, 1e-5);
    }
}

// A value of HF's convention computed by hand: D = 4, position 1, theta 10000: pair (0, 2)
// turns by 1 rad, pair (1, 3) by 1e-2 rad.
TEST(TransformerOps, RopePairsTheHalvesLikeHuggingFace) {
    Graph g;
    Tensor y = g.rope(g.input("x", {1, 4}), g.input("pos", {1}, DType::I32), 10000.0);
    const auto v = ref::evaluate(g, {{"x", {{1, 4}, {1, 0, 0, 0}}}, {"pos", {{1}, {1}}}})[static_cast<size_t>(y.id)].data;
    EXPECT_NEAR(v[0], std::cos(1.0), 1e-12);
    EXPECT_NEAR(v[2], std::sin(1.0), 1e-12);
    EXPECT_EQ(v[1], 0.0);
    EXPECT_EQ(v[3], 0.0);
}

TEST_F(TransformerOpsTest, SliceScatterWritesAtARunTimeStart) {
    for (int start : {0, 3, 6}) {
        SCOPED_TRACE(start);
        Graph g;
        Tensor cache = g.input("cache", {2, 3, 9, 5});
        Tensor rows = g.input("rows", {2, 3, 3, 5});
        g.output("y", g.slice_scatter(cache, rows, 2, g.input("start", {}, DType::I32)));
        ref::Feeds feeds = random_feeds(g, 5 + start);
        feeds["start"] = {{}, {static_cast<double>(start)}};
        expect_matches_reference(g, feeds, 0);
    }
}

TEST(TransformerOps, BuildersNameTheOpAndShapes) {
    Graph g;
    Tensor ids = g.input("ids", {4}, DType::I32);
    Tensor x = g.input("x", {4, 6});
    EXPECT_EQ(error_of([&] { g.embedding(x, x); }), "[embedding] ids must be i32, got f32");
    EXPECT_EQ(error_of([&] { g.rms_norm(x, g.input("w5", {5})); }), "[rms_norm] x is (4,6), weight is (5): expected (6)");
    EXPECT_EQ(error_of([&] { g.rope(x, g.input("p3", {3}, DType::I32)); }),
              "[rope] x is (4,6), positions are i32(3): expected i32 (4)");
    EXPECT_EQ(error_of([&] { g.slice_scatter(x, g.input("big", {5, 6}), 0, g.input("s", {}, DType::I32)); }),
              "[slice_scatter] x is (4,6), src is (5,6): they must agree outside axis 0 and src must fit");
    ref::Feeds feeds{{"ids", {{4}, {0, 1, 2, 3}}}, {"x", {{4, 6}, std::vector<double>(24, 0.0)}},
                     {"r", {{1, 6}, std::vector<double>(6, 0.0)}}, {"at", {{}, {4}}}};
    Graph h;
    Tensor y = h.slice_scatter(h.input("x", {4, 6}), h.input("r", {1, 6}), 0, h.input("at", {}, DType::I32));
    (void)y;
    EXPECT_THROW(ref::evaluate(h, feeds), Error);  // row 4 of 4
}

}  // namespace
}  // namespace mn::test
