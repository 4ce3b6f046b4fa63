// Pointwise fusion and in-place assignment (schedule/fusion.hpp): fewer kernels, same values.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "compiler/program_kernels.hpp"
#include "compiler/training.hpp"
#include "gpu_check.hpp"
#include "meganeura/autodiff.hpp"
#include "optimize/optimize.hpp"
#include "schedule/schedule.hpp"
#include "temp_dir.hpp"

namespace mn::test {
namespace {

class FusionTest : public GpuTest {};

size_t dispatches_of(const Graph& g) { return compile(g, device()).stats().dispatches; }

// K unsplit; split in 3 pieces that the product's last piece of each tile sums; or that a dispatch of their own does.
struct SplitK {
    const char* pieces;
    const char* sum;  // MEGANEURA_SPLIT_SUM
    bool summed_apart() const { return std::strcmp(pieces, "1") != 0 && std::strcmp(sum, "dispatch") == 0; }
    friend std::ostream& operator<<(std::ostream& os, const SplitK& s) { return os << s.pieces << " pieces, sum " << s.sum; }
};
constexpr SplitK kSplitKs[] = {{"1", "product"}, {"3", "product"}, {"3", "dispatch"}};

// The labels of the kernels that compute g's outputs on this device, in the lowering's order.
std::vector<std::string> kernel_labels(const Graph& g) {
    std::vector<int32_t> roots;
    for (const auto& output : g.outputs()) roots.push_back(output.second);
    std::vector<std::string> labels;
    for (const sched::Step& step : sched::lower(g, roots, sched::tune_for(device().context()->caps())).steps) {
        labels.push_back(step.kernel.label);
    }
    return labels;
}

TEST_F(FusionTest, ChainWithBroadcastLeavesIsOneKernel) {
    Graph g;
    Tensor a = g.input("a", {3, 33});
    Tensor b = g.input("b", {33});
    Tensor c = g.input("c", {3, 1});
    g.output("y", g.exp(a * b + c) - a / (g.abs(a) + 1.0));
    EXPECT_EQ(dispatches_of(g), 1u);
    expect_matches_reference(g, random_feeds(g, 1));
}

// A permute that only pointwise nodes read is no copy: their kernels read its input through its strides (Whisper's
// convolution's channels and frames swapped into the positions' add, and back in the backward). Broadcast against a
// bias and read by two kernels; a permute a product reads stays a copy. With its gradient (the permute back into a
// GELU's derivative), against the float64 reference.
TEST_F(FusionTest, PermuteOnlyPointwiseNodesReadIsNoCopy) {
    Graph g;
    const Tensor x = g.input("x", {2, 6, 1, 9});
    const Tensor w = g.parameter("w", {6, 6, 1, 3}, Init::uniform(-0.5, 0.5));
    const Tensor h = g.gelu(g.conv2d(x, w, std::nullopt, {.padding = 0}));  // [2, 6, 1, 7]
    const Tensor t = g.permute(h, {0, 2, 3, 1});                            // [2, 1, 7, 6]
    const Tensor y = t + g.parameter("positions", {7, 6});
    g.output("y", y);
    g.output("z", g.exp(t) * 0.5);
    g.output("p", g.matmul(g.permute(y, {0, 1, 3, 2}), g.input("m", {7, 3})));
    const std::vector<Tensor> grads = grad(g.sum(y * y), {x, w});
    g.output("dx", grads[0]);
    g.output("dw", grads[1]);
    int copies = 0;
    for (const codegen::KernelSource& k : compiler::program_kernels(g, device().context()->caps(), {})) copies += k.label == "copy";
    EXPECT_EQ(copies, 1);  // the permute of y that the product reads (the loss's seed, expanded, is read through strides)
    expect_matches_reference(g, random_feeds(g, 31), 1e-4);
}

TEST_F(FusionTest, SharedValuesAndOutputsAreMaterialized) {
    Graph g;
    Tensor x = g.input("x", {257});
    Tensor t = g.tanh(x * 3.0);  // two consumers: computed once, stored by y's kernel, its first reader
    Tensor e = g.exp(x);
    g.output("e", e);  // an output inside a chain keeps its own value, stored by z's kernel, its one reader
    g.output("y", t + 1.0);
    g.output("z", t * e);
    EXPECT_EQ(dispatches_of(g), 2u);  // y with t; z with e
    expect_matches_reference(g, random_feeds(g, 2));
}

// A broadcast operand is computed in its reader's kernel, once per element that reads it: a dispatch
// and a barrier cost more than a few ALU ops per element of a bandwidth-bound kernel.
// A sum, mean or max of a fused pointwise tree that it alone reads evaluates the tree as it reads it (FusionPlan::
// reduced_in): one kernel, labelled by both, on every walk of the reduction: a row per output (the BN fold's scale
// gradient, sum(dW * w) over each filter), 32 columns a workgroup (a bias's gradient over rows), a leading axis too (a
// per-channel sum over NCHW), a long row in pieces with their sum apart or in the last piece's workgroup; and a max.
// Where the reduction permutes its input first, the tree is stored for the copy; a tree read twice is stored once.
TEST_F(FusionTest, ReductionEvaluatesThePointwiseTreeItReads) {
    struct Case {
        const char* what;
        Shape shape;
        std::vector<int64_t> axes;
        Op op;
        size_t dispatches;
    };
    const Case cases[] = {
        {"per filter", {8, 3, 5, 5}, {1, 2, 3}, Op::Sum, 1},
        {"over rows", {300, 40}, {0}, Op::Sum, 2},         // rows in pieces, and their sum
        {"per channel", {4, 6, 7, 7}, {0, 2, 3}, Op::Mean, 1},
        {"long row", {1, 20000}, {1}, Op::Mean, 2},         // pieces, and their sum
        {"max", {5, 9, 4}, {1}, Op::Max, 1},
        {"permuted", {3, 4, 5, 6}, {1, 3}, Op::Sum, 3},      // the tree, its copy, the sum
    };
    for (const char* sum : {"dispatch", "reduction"}) {
        const ScopedEnv in_kernels("MEGANEURA_SPLIT_SUM", sum);
        for (const Case& c : cases) {
            Graph g;
            const Tensor a = g.input("a", c.shape), b = g.input("b", c.shape);
            const Tensor tree = g.exp(a * 0.5) * b + 1.0;
            g.output("y", c.op == Op::Sum ? g.sum(tree, c.axes) : c.op == Op::Mean ? g.mean(tree, c.axes) : g.max(tree, c.axes));
            const bool permuted = std::string(c.what) == "permuted";
            const std::vector<std::string> labels = kernel_labels(g);
            EXPECT_EQ(labels.size(), c.dispatches - (std::string(sum) == "reduction" && c.dispatches == 2)) << c.what << ", " << sum;
            const std::string reduced = permuted ? labels.back() : labels.front();
            EXPECT_EQ(reduced.ends_with("+mul+exp+mul+add"), !permuted) << c.what << ": " << reduced;
            expect_matches_reference(g, random_feeds(g, 31));
        }
    }
    Graph g;  // read twice: stored, and reduced from memory
    const Tensor a = g.input("a", {8, 20});
    const Tensor tree = g.exp(a) * a;
    g.output("y", g.sum(tree, {1}));
    g.output("z", g.max(tree, {0}));
    EXPECT_EQ(dispatches_of(g), 3u);
    expect_matches_reference(g, random_feeds(g, 32));
}

// Kernels of graph leaves alone run as one batch where the first of them would (FusionPlan::leaf_batch): three batch
// norms' scale and shift (the shift a co-root of the scale's kernel), of parameters, one dispatch that inference hoists;
// two of inputs, one dispatch a run; and the three y, of inputs and the first batch's roots, one more. The values
// against float64.
TEST_F(FusionTest, KernelsOfGraphLeavesRunAsOneBatch) {
    Graph g;
    for (int64_t l = 0; l < 3; ++l) {
        const std::string bn = "bn" + std::to_string(l) + ".";
        const Shape c{5 + l};
        const Tensor scale = g.parameter(bn + "weight", c) * g.rsqrt(g.parameter(bn + "running_var", c) + 1e-5);
        const Tensor shift = g.parameter(bn + "bias", c) - g.parameter(bn + "running_mean", c) * scale;
        g.output("y" + std::to_string(l), g.input("x" + std::to_string(l), {4, 5 + l}) * scale + shift);
    }
    const Tensor a = g.input("a", {6}), b = g.input("b", {2, 3});
    g.output("u", g.exp(a) * 2.0);
    g.output("w", b * b + 1.0);
    const Session s = compile(g, device());
    EXPECT_EQ(s.stats().hoisted_dispatches, 1u);  // the batch norms' batch
    EXPECT_EQ(s.stats().dispatches, 2u);          // the inputs' batch, and the three y's
    ref::Feeds feeds = random_feeds(g, 34);
    for (int64_t l = 0; l < 3; ++l) {  // variances above zero
        for (double& v : feeds.at("bn" + std::to_string(l) + ".running_var").data) v = std::abs(v) + 0.1;
    }
    expect_matches_reference(g, feeds);
}

TEST_F(FusionTest, BroadcastOperandIsComputedInItsReader) {
    Graph g;
    Tensor x = g.input("x", {4, 1});
    Tensor s = g.input("s", {50});
    Tensor y = g.input("y", {4, 50});
    g.output("out", g.sigmoid(x) * y + g.rsqrt(s + 1.0));  // [4, 1] and [50] operands of a [4, 50] kernel
    EXPECT_EQ(dispatches_of(g), 1u);
    expect_matches_reference(g, random_feeds(g, 3, {.lo = 0.1, .hi = 2}));
}

// Eval batch norm is one kernel: its per-channel scale is computed in it (graph/conv.cpp).
TEST_F(FusionTest, EvalBatchNormIsOneKernel) {
    Graph g;
    Tensor x = g.input("x", {2, 3, 5, 5});
    Tensor mean = g.input("mean", {3});
    Tensor var = g.input("var", {3});
    g.output("y", g.relu(g.batch_norm(x, g.input("w", {3}), g.input("b", {3}), mean, var, false)));
    EXPECT_EQ(dispatches_of(g), 1u);
    ref::Feeds feeds = random_feeds(g, 4);
    for (double& v : feeds.at("var").data) v = std::abs(v) + 0.1;
    expect_matches_reference(g, feeds);
}

// Convolutions and matmuls store their pointwise readers' values through an epilogue (fusion.hpp): a
// ResNet block's conv, eval batch norm, residual add and relu are one kernel; with K split, the split sum
// applies it. Each is checked against the float64 reference.
ref::Feeds positive_variances(ref::Feeds feeds) {
    for (auto& [name, v] : feeds) {
        if (name.find("var") != std::string::npos) for (double& x : v.data) x = std::abs(x) + 0.1;
    }
    return feeds;
}

// ResNet-50's batch norms folded into their convolutions' weights where the norms' weights train: each weight scaled
// by its norm's per-channel scale, a batch that reads the scales' batch (FusionPlan::leaf_batch, a depth past it), one
// dispatch for the three where they were three; with the scales' batch and the convolutions, five dispatches. Where
// nothing trains, inference hoists both batches. The values against float64.
TEST_F(FusionTest, FoldedWeightsRunAsOneBatchAfterTheirScales) {
    for (const bool trained : {true, false}) {
        SCOPED_TRACE(trained ? "norm weights as inputs" : "norm weights as parameters");
        Graph g;
        Tensor h = g.input("x", {2, 3, 6, 6});
        int64_t in = 3;
        for (int64_t l = 0; l < 3; ++l) {
            const std::string bn = "bn" + std::to_string(l) + ".";
            const int64_t out = 4 + l;
            const Shape c{out};
            const Tensor gamma = trained ? g.input(bn + "weight", c) : g.parameter(bn + "weight", c);
            const Tensor scale = gamma * g.rsqrt(g.parameter(bn + "running_var", c) + 1e-5);
            const Tensor w = g.parameter("conv" + std::to_string(l) + ".weight", {out, in, 3, 3});
            const Tensor shift = g.parameter(bn + "bias", c) - g.parameter(bn + "running_mean", c) * scale;
            h = g.relu(g.conv2d(h, w * g.reshape(scale, {out, 1, 1, 1}), shift, {.padding = 1}));
            in = out;
        }
        g.output("y", h);
        const Session s = compile(g, device());
        EXPECT_EQ(s.stats().hoisted_dispatches, trained ? 0u : 2u);  // the scales and shifts; the scaled weights
        EXPECT_EQ(s.stats().dispatches, trained ? 5u : 3u);           // and the convolutions
        expect_matches_reference(g, positive_variances(random_feeds(g, 35)));
    }
}

Graph conv_block() {
    Graph g;
    Tensor x = g.input("x", {2, 8, 9, 9});  // K = 72: three pieces of 32 when split
    Tensor y = g.conv2d(x, g.parameter("w", {4, 8, 3, 3}), std::nullopt, {.stride = 2, .padding = 1});
    y = g.batch_norm(y, g.parameter("bn.w", {4}), g.parameter("bn.b", {4}), g.input("bn.mean", {4}),
                     g.input("bn.var", {4}), false);
    g.output("y", g.relu(y + g.input("residual", {2, 4, 5, 5})));
    return g;
}

TEST_F(FusionTest, ConvolutionStoresThroughItsEpilogue) {
    const Graph g = conv_block();
    EXPECT_EQ(dispatches_of(g), 1u);
    expect_matches_reference(g, positive_variances(random_feeds(g, 5)));
}

// A residual block with a projection shortcut, built as torchvision builds it (the shortcut's convolution after the
// block's last): the block's last convolution, the deeper product, adds the shortcut through its epilogue, so the
// shortcut runs beside the block's first convolution. Two levels, not three: three barriers, with the inputs' upload
// and the copy back.
TEST_F(FusionTest, TheDeeperProductAddsTheShortcut) {
    Graph g;
    const Tensor x = g.input("x", {2, 8, 6, 6});
    const Tensor a = g.relu(g.conv2d(x, g.parameter("w1", {4, 8, 3, 3}), std::nullopt, {.padding = 1}));
    const Tensor b = g.conv2d(a, g.parameter("w2", {16, 4, 3, 3}), std::nullopt, {.padding = 1});
    const Tensor shortcut = g.conv2d(x, g.parameter("ws", {16, 8, 1, 1}), std::nullopt, {});
    g.output("y", g.relu(b + shortcut));
    EXPECT_EQ(dispatches_of(g), 3u);
    EXPECT_EQ(compile(g, device()).stats().barriers, 3u);
    expect_matches_reference(g, random_feeds(g, 6));
}

// A convolution's or a matmul's pieces are summed through the epilogue by the last piece of each tile
// (MatmulKernels::tile_counters), or with MEGANEURA_SPLIT_SUM=dispatch by a dispatch of their own.
TEST_F(FusionTest, SplitSumAppliesTheEpilogue) {
    const ScopedEnv splits("MEGANEURA_MATMUL_SPLITS", "3");
    for (const SplitK split_k : {kSplitKs[1], kSplitKs[2]}) {
        SCOPED_TRACE(testing::Message() << split_k);
        const ScopedEnv where("MEGANEURA_SPLIT_SUM", split_k.sum);
        const size_t dispatches = split_k.summed_apart() ? 2 : 1;
        const Graph g = conv_block();
        EXPECT_EQ(dispatches_of(g), dispatches);
        expect_matches_reference(g, positive_variances(random_feeds(g, 6)));
        Graph m;  // 4 elements per thread
        m.output("y", m.gelu(m.linear(m.input("x", {6, 40}), m.parameter("w", {8, 40}), m.parameter("b", {8}))));
        EXPECT_EQ(dispatches_of(m), dispatches);
        expect_matches_reference(m, random_feeds(m, 7));
    }
}

// A model's split of the heads (reshape, permute {0, 2, 1, 3}) read by RoPE alone is no copy: the rope
// kernel reads the unsplit rows (FusionPlan::heads_split_by). Inference is the one rope kernel; in the
// gradient, the inverse rope stores the merge back itself (heads_merged_into): no permute is a copy.
TEST_F(FusionTest, RopeReadsTheSplitOfTheHeadsInPlace) {
    Graph g;
    const Tensor x = g.parameter("x", {2, 5, 3 * 8});  // [batch, seq, heads * dim]
    const Tensor positions = g.input("positions", {5}, DType::I32);
    const Tensor q = g.rope(g.permute(g.reshape(x, {2, 5, 3, 8}), {0, 2, 1, 3}), positions, 100.0);
    g.output("q", q);
    EXPECT_EQ(dispatches_of(g), 1u);
    ref::Feeds feeds = random_feeds(g, 11);
    feeds["positions"] = {{5}, {0, 3, 1, 7, 2}};
    expect_matches_reference(g, feeds);
    g.output("dx", grad(g.sum(q * g.input("w", q.shape())), {x})[0]);
    std::vector<int32_t> roots;
    for (const auto& output : g.outputs()) roots.push_back(output.second);
    std::string labels;
    for (const sched::Step& step : sched::lower(g, roots, sched::tune_for(device().context()->caps())).steps) {
        labels += step.kernel.label + " ";
    }
    EXPECT_EQ(labels, "rope mul rope_inverse ");  // mul: the sum's gradient, expanded (read through strides), times w
    feeds = random_feeds(g, 12);
    feeds["positions"] = {{5}, {4, 0, 9, 2, 6}};
    expect_matches_reference(g, feeds);
}

// Sibling products (optimize/siblings.cpp) are one product whose kernel stores each slice of its columns
// as a tensor of its own (FusionPlan::column_slices): one dispatch per run (where K is split, its last piece of a
// tile stores the parts; with the split sum a dispatch of its own, two), the weights' concatenation hoisted (one
// kernel: their rows are not whole binding alignments, so no stack in place). Odd widths, so no part is
// stored 16 bytes at a time; on the GEMV (one row) and the tiled kernel. With biases on q and v (Whisper's), the
// product stores the stacked biases' add as its epilogue into the slices, as many dispatches; the biases' stacking
// (q's, zeros for k, v's) one hoisted concatenation more.
TEST_F(FusionTest, SiblingProductsStoreTheirColumnSlices) {
    for (const bool biased : {false, true}) {
        for (const SplitK split_k : kSplitKs) {
            const ScopedEnv forced("MEGANEURA_MATMUL_SPLITS", split_k.pieces);
            const ScopedEnv sum("MEGANEURA_SPLIT_SUM", split_k.sum);
            for (const int64_t rows : {1, 5}) {
                Graph g;
                const Tensor x = g.input("x", {rows, 70});
                for (const auto& [name, width] : {std::pair{"q", 7}, {"k", 12}, {"v", 3}}) {
                    const Tensor w = g.parameter(std::string("w") + name, {width, 70});
                    const bool bias = biased && std::string(name) != "k";
                    g.output(name, bias ? g.linear(x, w, g.parameter(std::string("b") + name, {width})) : g.linear(x, w));
                }
                const SessionStats stats = compile(g, device()).stats();
                const bool summed_apart = rows > 1 && split_k.summed_apart();  // a GEMV never splits K
                EXPECT_EQ(stats.dispatches, summed_apart ? 2u : 1u) << rows << " rows, biased " << biased << ", " << split_k;
                EXPECT_EQ(stats.hoisted_dispatches, biased ? 2u : 1u) << rows << " rows, biased " << biased;
                expect_matches_reference(g, random_feeds(g, 21));
            }
        }
    }
}

// A q/k/v product stores each slice of its columns (sibling products, one kernel), and a q product alone its one
// value, in the layout of the model's split of the heads (reshape to [batch, seq, heads, head_dim], permute
// {0, 2, 1, 3}: FusionPlan::heads_split_stored), and the attention stores the merge back (heads_merged_into): the
// products (which sum their pieces where K is split, or with their split sums) and the attention, no copy. Self-attention and attention to a
// context of another length (q alone; k and v siblings), 3 query heads over 1 (GQA); the weights' gradients too.
TEST_F(FusionTest, QkvProductsStoreTheSplitOfTheHeads) {
    for (const bool cross : {false, true}) {
        for (const SplitK split_k : kSplitKs) {
            const ScopedEnv forced("MEGANEURA_MATMUL_SPLITS", split_k.pieces);
            const ScopedEnv sum("MEGANEURA_SPLIT_SUM", split_k.sum);
            constexpr int64_t batch = 2, seq = 5, context = 3, head_dim = 8;
            Graph g;
            const Tensor x = g.input("x", {batch * seq, 70});
            const Tensor source = cross ? g.input("context", {batch * context, 70}) : x;
            std::vector<Tensor> weights;
            auto heads = [&](const char* name, Tensor from, int64_t count) {
                weights.push_back(g.parameter(std::string("w") + name, {count * head_dim, 70}));
                return g.permute(g.reshape(g.linear(from, weights.back()), {batch, from.shape()[0] / batch, count, head_dim}),
                                 {0, 2, 1, 3});
            };
            const Tensor q = heads("q", x, 3), k = heads("k", source, 1), v = heads("v", source, 1);
            const Tensor y = g.reshape(g.permute(g.attention(q, k, v), {0, 2, 1, 3}), {batch * seq, 3 * head_dim});
            g.output("y", y);
            const size_t products = cross ? 2 : 1, split = split_k.summed_apart() ? 2 : 1;
            EXPECT_EQ(dispatches_of(g), products * split + 1) << (cross ? "cross" : "self") << ", " << split_k;
            // Scores of O(1) (not a saturated softmax, whose weights' gradients cancel to a few ulps of their terms).
            const FeedRange small{-0.3, 0.3};
            expect_matches_reference(g, random_feeds(g, 23, small));
            const std::vector<Tensor> dw = grad(g.sum(y * g.input("dy", y.shape())), weights);
            for (size_t i = 0; i < dw.size(); ++i) g.output("dw" + std::to_string(i), dw[i]);
            expect_matches_reference(g, random_feeds(g, 24, small));
        }
    }
}

// A prefill's q and k rotated by RoPE (SmolLM2's: reshape to [batch, seq, heads, head_dim], permute {0, 2, 1, 3},
// rope) are stored rotated by their product's split sum, its last piece of a tile or a dispatch of its own
// (FusionPlan::rope_in_gemv, the sum's column pairs): no RoPE kernel. The q, k and v siblings of inference (one
// product, its v part stored split into heads), and q and k products of their own (a training step's, whose gradients
// read the rotated rows). K unsplit, the RoPE kernels stay. Against the float64 reference.
TEST_F(FusionTest, RopeOfSplitProductRowsIsStoredByTheSum) {
    for (const SplitK split_k : kSplitKs) {
        for (const bool training : {false, true}) {
            SCOPED_TRACE(testing::Message() << split_k << (training ? ", training" : ""));
            const ScopedEnv forced("MEGANEURA_MATMUL_SPLITS", split_k.pieces);
            const ScopedEnv where("MEGANEURA_SPLIT_SUM", split_k.sum);
            constexpr int64_t batch = 2, seq = 5, head_dim = 8, kv_heads = 1, q_heads = 3;
            Graph g;
            const Tensor x = g.input("x", {batch * seq, 96});
            const Tensor positions = g.input("positions", {seq}, DType::I32);
            std::vector<Tensor> weights;
            auto heads = [&](const char* name, int64_t count, bool rotate) {
                weights.push_back(g.parameter(std::string("w") + name, {count * head_dim, 96}));
                const Tensor split = g.permute(g.reshape(g.linear(x, weights.back()), {batch, seq, count, head_dim}), {0, 2, 1, 3});
                return rotate ? g.rope(split, positions, 100.0) : split;
            };
            const Tensor q = heads("q", q_heads, true), k = heads("k", kv_heads, true), v = heads("v", kv_heads, false);
            const Tensor y = g.attention(q, k, v, {.causal = true});
            g.output("y", y);
            if (training) {
                const std::vector<Tensor> dw = grad(g.sum(y * g.input("dy", y.shape())), weights);
                for (size_t i = 0; i < dw.size(); ++i) g.output("dw" + std::to_string(i), dw[i]);
            }
            int ropes = 0;
            for (const codegen::KernelSource& kernel : compiler::program_kernels(g, device().context()->caps(), {})) {
                ropes += kernel.label == "rope";
            }
            EXPECT_EQ(ropes, std::string(split_k.pieces) != "1" ? 0 : 2);
            ref::Feeds feeds = random_feeds(g, 40 + training, {-0.5, 0.5});
            feeds["positions"] = {{seq}, {0, 3, 1, 7, 2}};
            expect_matches_reference(g, feeds, training ? 1e-4 : 1e-5);
        }
    }
}

// Whisper's q and v products have a bias (and q a scale): the matmul stores its epilogue's value split into heads as
// it would its own, so no copy moves q or v into the heads' layout; from rows of two dims or, as a linear layer of
// [batch, seq, features] gives them, three.
TEST_F(FusionTest, EpiloguesStoreTheSplitOfTheHeads) {
    for (const bool three_dims : {false, true}) {
        for (const char* splits : {"1", "3"}) {
            SCOPED_TRACE(std::string(three_dims ? "3" : "2") + " dims, splits " + splits);
            const ScopedEnv forced("MEGANEURA_MATMUL_SPLITS", splits);
            constexpr int64_t batch = 2, seq = 5, heads = 3, head_dim = 8;
            Graph g;
            const Tensor x = g.input("x", three_dims ? Shape{batch, seq, 70} : Shape{batch * seq, 70});
            std::vector<Tensor> weights;
            auto split = [&](Tensor t) { return g.permute(g.reshape(t, {batch, seq, heads, head_dim}), {0, 2, 1, 3}); };
            auto linear = [&](const char* name, bool bias) {
                weights.push_back(g.parameter(std::string("w") + name, {heads * head_dim, 70}));
                if (!bias) return g.linear(x, weights.back());
                weights.push_back(g.parameter(std::string("b") + name, {heads * head_dim}));
                return g.linear(x, weights[weights.size() - 2], weights.back());
            };
            const Tensor q = split(linear("q", true) * 0.5), k = split(linear("k", false)), v = split(linear("v", true));
            const Tensor y = g.reshape(g.permute(g.attention(q, k, v), {0, 2, 1, 3}), {batch * seq, heads * head_dim});
            g.output("y", y);
            for (const std::string& label : kernel_labels(g)) EXPECT_NE(label, "copy");
            const std::vector<Tensor> dw = grad(g.sum(y * g.input("dy", y.shape())), weights);
            for (size_t i = 0; i < dw.size(); ++i) g.output("dw" + std::to_string(i), dw[i]);
            expect_matches_reference(g, random_feeds(g, 25, FeedRange{-0.3, 0.3}));
        }
    }
}

// The gradient of an attention's merged output through its output projection (SmolLM2's o_proj: dO = dY Wo, stored
// split into heads) where K is split: the sum dispatch stores the backward's delta = rowsum(dO * O) too
// (FusionPlan::sum_delta), so no attention_delta kernel; summed by the product's last pieces, the delta keeps its
// kernel. O read merged, and in its heads' layout where the forward's output is stored so too (an output itself).
// Against the float64 reference.
TEST_F(FusionTest, TheSplitSumOfTheOutputsGradientStoresTheAttentionDelta) {
    for (const SplitK split_k : kSplitKs) {
        for (const bool heads_output : {false, true}) {
            SCOPED_TRACE(testing::Message() << split_k << (heads_output ? ", the heads an output" : ""));
            const ScopedEnv forced("MEGANEURA_MATMUL_SPLITS", split_k.pieces);
            const ScopedEnv where("MEGANEURA_SPLIT_SUM", split_k.sum);
            constexpr int64_t batch = 2, seq = 5, heads = 3, head_dim = 8;
            Graph g;
            const Tensor x = g.input("x", {batch * seq, 96});
            std::vector<Tensor> weights;
            auto project = [&](Tensor in, const char* name, int64_t out) {
                weights.push_back(g.parameter(std::string("w") + name, {out, in.shape()[1]}));
                return g.linear(in, weights.back());
            };
            auto split = [&](Tensor t) { return g.permute(g.reshape(t, {batch, seq, heads, head_dim}), {0, 2, 1, 3}); };
            const Tensor o = g.attention(split(project(x, "q", heads * head_dim)), split(project(x, "k", heads * head_dim)),
                                         split(project(x, "v", heads * head_dim)), {.causal = true});
            if (heads_output) g.output("o", o);
            const Tensor y = project(g.reshape(g.permute(o, {0, 2, 1, 3}), {batch * seq, heads * head_dim}), "o", 96);
            g.output("y", y);
            const std::vector<Tensor> dw = grad(g.sum(y * g.input("dy", y.shape())), weights);
            for (size_t i = 0; i < dw.size(); ++i) g.output("dw" + std::to_string(i), dw[i]);
            std::map<std::string, int> labels;
            for (const std::string& label : kernel_labels(g)) ++labels[label];
            EXPECT_EQ(labels["attention_delta"], split_k.summed_apart() ? 0 : 1);
            EXPECT_EQ(labels["matmul_split_sum+attention_delta"], split_k.summed_apart() ? 1 : 0);
            expect_matches_reference(g, random_feeds(g, 26, FeedRange{-0.5, 0.5}), 1e-4);
        }
    }
}

// A pre-norm residual block's backward (SmolLM2's, Whisper's): the gradient of the norm's output is a product's (the
// output projection's input gradient) or a SwiGLU pair's (dG Wg + dU Wu); where K is split and a sum dispatch adds the
// pieces, that sum computes the norm's backward too, with the residual's gradient added (FusionPlan::sum_norm_grad): no
// norm gradient kernel of its own. Summed by the product's last pieces, it keeps its kernel. The sum stores the norm
// weight's gradient's dy * xhat too (FusionPlan::up_xhat_of), where a unit-weight norm's kernel computed it.
// RMSNorm and LayerNorm, against the float64 reference.
TEST_F(FusionTest, TheSplitSumOfANormsOutputGradientComputesTheNormsBackward) {
    for (const SplitK split_k : kSplitKs) {
        for (const bool layer : {false, true}) {
            for (const bool pair : {false, true}) {
                SCOPED_TRACE(testing::Message() << split_k << (layer ? ", LayerNorm" : ", RMSNorm") << (pair ? ", SwiGLU" : ""));
                const ScopedEnv forced("MEGANEURA_MATMUL_SPLITS", split_k.pieces);
                const ScopedEnv where("MEGANEURA_SPLIT_SUM", split_k.sum);
                Graph g;
                const Tensor x = g.parameter("x", {10, 64}, Init::uniform(-1, 1));
                const Tensor w = g.parameter("w", {64}, Init::uniform(0.5, 1.5));
                const Tensor n = layer ? g.layer_norm(x, w, g.parameter("b", {64}, Init::uniform(-0.5, 0.5))) : g.rms_norm(x, w);
                auto linear = [&](Tensor in, const char* name, int64_t out) {
                    return g.linear(in, g.parameter(name, {out, in.shape()[1]}, Init::uniform(-0.2, 0.2)));
                };
                const Tensor y = pair ? linear(g.silu(linear(n, "wg", 48)) * linear(n, "wu", 48), "wd", 64) : linear(n, "wo", 64);
                const Tensor h = x + y;
                g.output("h", h);
                std::vector<Tensor> params;
                for (const char* name : {"x", "w", "b", "wg", "wu", "wd", "wo"}) {
                    if (const auto t = g.find(name)) params.push_back(*t);
                }
                const std::vector<Tensor> grads = grad(g.sum(h * g.input("dy", h.shape())), params);
                for (size_t i = 0; i < grads.size(); ++i) g.output("d" + std::to_string(i), grads[i]);
                const std::string norm_grad = layer ? "layer_norm_grad" : "rms_norm_grad";
                int own = 0, in_sum = 0, unit_norms = 0;
                for (const std::string& label : kernel_labels(g)) {
                    own += label.starts_with(norm_grad);
                    in_sum += label.starts_with("matmul_split_sum") && label.find("+" + norm_grad) != std::string::npos;
                    unit_norms += label == (layer ? "layer_norm+mul" : "rms_norm+mul");
                }
                EXPECT_EQ(own, split_k.summed_apart() ? 0 : 1);
                EXPECT_EQ(in_sum, split_k.summed_apart() ? 1 : 0);
                // w's gradient's dy * xhat: stored by the sum that computes the norm's gradient (the norm gradient's own
                // kernel, with the residual's gradient its epilogue, runs after it)
                EXPECT_EQ(unit_norms, split_k.summed_apart() ? 0 : 1);
                expect_matches_reference(g, random_feeds(g, 27), 1e-4);
            }
        }
    }
}

// In a training step, sibling products whose weights and biases are whole multiples of 256 bytes are one product over
// the weights stacked in place (Lowering::stack_leaves: each a part of the stack's bytes, no copy, nothing hoisted), the
// biases too (zeros for k's), read here by products as attention's are. Three AdamW steps from the same weights give the
// program the losses and weights (read back by name from the stack's parts) of the one without the optimize pass;
// weights loaded from a checkpoint into the parts are what the next step reads; a part that is an output comes back from
// its place in the stack, which is read back whole.
TEST_F(FusionTest, SiblingProductsOfATrainingStepAreStackedInPlace) {
    Graph g;
    const Tensor x = g.input("x", {8, 64});
    const auto weight = [&](const char* name, int64_t rows) { return g.parameter(name, {rows, 64}, Init::uniform(-0.2, 0.2)); };
    const auto bias = [&](const char* name, int64_t rows) { return g.parameter(name, {rows}, Init::uniform(-1, 1)); };
    const Tensor wk = weight("wk", 64);
    const Tensor q = g.linear(x, weight("wq", 64), bias("bq", 64)), k = g.linear(x, wk);
    const Tensor v = g.linear(x, weight("wv", 128), bias("bv", 128));
    const Tensor scores = g.matmul(q, k, false, true);
    const Tensor loss = g.mean(scores * scores) * 1e-2 + g.mean(g.tanh(g.matmul(scores, v)));
    g.output("scores", scores);
    g.output("wk out", wk);  // in inference, read back after a run with the whole stack, of which it is a part
    const std::vector<std::string> names = {"wq", "bq", "wk", "wv", "bv"};
    const CompileOptions training{.loss = loss, .optimizer = AdamW{.lr = 1e-2}};
    size_t stacked = 0;
    for (const codegen::KernelSource& kernel : compiler::program_kernels(g, device().context()->caps(), training)) {
        EXPECT_NE(kernel.label, "copy");
        stacked += kernel.choice.find("M x N x K 8x256x64") != std::string::npos;
    }
    EXPECT_EQ(stacked, 1u);  // q, k and v's product
    Session fused = compile(g, device(), training);
    EXPECT_EQ(fused.stats().hoisted_dispatches, 0u);
    CompileOptions unfused = training;
    unfused.optimize = false;
    Session apart = compile(g, device(), unfused);
    fused.copy_to(apart, names);
    const ref::Feeds feeds = random_feeds(g, 33);
    const std::vector<float> xs(feeds.at("x").data.begin(), feeds.at("x").data.end());
    const auto expect_same_step = [&](const std::string& what) {
        fused.set("x", xs);
        apart.set("x", xs);
        EXPECT_NEAR(fused.step(), apart.step(), 1e-6) << what;
        EXPECT_EQ(fused.get("wk out"), fused.get("wk")) << what;
        for (const std::string& name : names) {
            const std::vector<float> want = apart.get(name);
            EXPECT_LE(relative_l2(fused.get(name), std::vector<double>(want.begin(), want.end())), 1e-6) << name << ", " << what;
        }
    };
    for (int step = 0; step < 3; ++step) expect_same_step("step " + std::to_string(step));
    apart.set("x", std::vector<float>(xs.rbegin(), xs.rend()));
    apart.step();  // weights fused has not seen, loaded into its stack's parts
    TempDir dir("stacked");
    apart.save(dir.path("weights.safetensors"));
    fused.load(dir.path("weights.safetensors"));
    expect_same_step("after a load");
    Session inference = compile(g, device());
    fused.copy_to(inference, {"wq", "bq", "wk"});  // what the outputs read
    inference.set("x", xs);
    inference.run();
    EXPECT_EQ(inference.get("wk out"), fused.get("wk"));
}

// SmolVLA's action expert projects its VLM context with the k and v weights of every layer: 16 siblings, one product
// of 16 column parts, whose fifth part was named c4 like c's 4-wide view, and no kernel compiled.
TEST_F(FusionTest, SiblingProductsOfFiveOrMorePartsCompile) {
    for (const int64_t rows : {1, 5}) {
        Graph g;
        const Tensor x = g.input("x", {rows, 24});
        for (int p = 0; p < 7; ++p) g.output("y" + std::to_string(p), g.linear(x, g.parameter("w" + std::to_string(p), {4 + p, 24})));
        // the weights' concatenation
        EXPECT_EQ(compile(g, device()).stats().hoisted_dispatches, 1u) << rows << " rows";
        expect_matches_reference(g, random_feeds(g, 22));
    }
}

TEST_F(FusionTest, MatmulStoresThroughItsEpilogue) {
    for (const Shape& x_shape : {Shape{5, 7}, Shape{1, 7}}) {  // the tiled kernel; gemv
        Graph g;
        Tensor x = g.input("x", x_shape);
        g.output("y", g.silu(g.linear(x, g.parameter("w", {6, 7}), g.parameter("b", {6}))) * 2.0);
        EXPECT_EQ(dispatches_of(g), 1u) << shape_str(x_shape);
        expect_matches_reference(g, random_feeds(g, 8));
    }
}

// In precision Fast the products run on cooperative matrices where the device has them (the H200), and
// store through the epilogue there too (f16 operands: ~1e-3, see ConvOpsTest's fast test), K whole or split.
TEST_F(FusionTest, EpiloguesInFastPrecision) {
    const bool coop = sched::tune_for(device().context()->caps(), Precision::Fast).matmul.coop_subgroup != 0;
    CompileOptions fast;
    fast.precision = Precision::Fast;
    for (const char* splits : {"", "1", "3"}) {
        SCOPED_TRACE(std::string("splits '") + splits + "'");
        const ScopedEnv forced_splits("MEGANEURA_MATMUL_SPLITS", splits);
        const Graph conv = conv_block();
        expect_matches_reference(conv, positive_variances(random_feeds(conv, 10)), coop ? 2e-3 : 1e-5, fast);
        Graph m;  // N % 4 == 0: the cooperative kernel would store whole tiles, but not through an epilogue
        m.output("y", m.gelu(m.linear(m.input("x", {70, 96}), m.parameter("w", {48, 96}), m.parameter("b", {48}))));
        expect_matches_reference(m, random_feeds(m, 11), coop ? 2e-3 : 1e-5, fast);
    }
}

// A linear layer over [B, T, K] multiplies [B*T, K] and reshapes the product back: the residual add
// reads it through that view, and the product stores the sum all the same.
TEST_F(FusionTest, ProductReadThroughAReshapeStoresThroughItsEpilogue) {
    Graph g;
    Tensor x = g.input("x", {2, 3, 8});
    Tensor y = g.matmul(g.reshape(x, {6, 8}), g.parameter("w", {8, 8}), false, true);
    g.output("y", g.reshape(y, {2, 3, 8}) + x);
    EXPECT_EQ(dispatches_of(g), 1u);
    expect_matches_reference(g, random_feeds(g, 12));
}

// A product read twice (here: also an output) is stored, by the kernel that stores its reader's value through
// the epilogue (as a SwiGLU's gate product stores the gate, which the backward reads, and its SiLU).
TEST_F(FusionTest, ProductReadTwiceKeepsItsValue) {
    Graph g;
    Tensor y = g.matmul(g.input("a", {4, 4}), g.input("b", {4, 4}));
    g.output("y", y);
    g.output("z", g.exp(y));
    EXPECT_EQ(dispatches_of(g), 1u);
    expect_matches_reference(g, random_feeds(g, 9));
}

// A norm stores its pointwise reader's value through an epilogue, as a product does: a U-Net's GroupNorm and
// SiLU are one kernel, and so are a LayerNorm or RMSNorm and the scaling and residual add that read it. Read by
// later kernels too (as training's SiLU backward reads it; here an output), the norm's kernel stores its value as
// well as its reader's.
TEST_F(FusionTest, NormsStoreThroughTheirEpilogue) {
    Graph g;
    Tensor x = g.input("x", {2, 6, 5, 7});
    g.output("y", g.silu(g.group_norm(x, 3, g.parameter("w", {6}), g.parameter("b", {6}))));
    EXPECT_EQ(dispatches_of(g), 1u);
    expect_matches_reference(g, random_feeds(g, 13));

    Graph t;
    Tensor h = t.input("h", {3, 5, 40});
    t.output("layer", t.layer_norm(h, t.parameter("w", {40}), t.parameter("b", {40})) * 2.0 + h);
    t.output("rms", t.gelu(t.rms_norm(h, t.parameter("rw", {40}))));
    EXPECT_EQ(dispatches_of(t), 2u);
    expect_matches_reference(t, random_feeds(t, 14));

    Graph twice;
    Tensor n = twice.group_norm(twice.input("x", {2, 6, 5, 7}), 2, twice.parameter("w", {6}), twice.parameter("b", {6}));
    twice.output("n", n);
    twice.output("y", twice.silu(n));
    EXPECT_EQ(dispatches_of(twice), 1u);
    expect_matches_reference(twice, random_feeds(twice, 15));

    // A reader of the norm that runs before the SiLU's kernel needs the norm stored first.
    Graph before;
    Tensor m = before.group_norm(before.input("x", {2, 6, 5, 7}), 2, before.parameter("w", {6}), before.parameter("b", {6}));
    Tensor s = before.sum(m, {0, 2, 3});
    before.output("y", before.silu(m) * before.reshape(s, {1, 6, 1, 1}));
    EXPECT_EQ(dispatches_of(before), 3u);  // the norm, the sum, then the product through the SiLU
    expect_matches_reference(before, random_feeds(before, 16));
}

// The input gradient of a pre-norm block, y = x + f(norm(x)), is the residual's gradient plus the norm's: the norm
// gradient's kernel stores the sum through its epilogue (a transformer's backward: a dispatch and a level per norm),
// for an RMSNorm and a LayerNorm. Against the float64 reference, outputs NaN-poisoned first.
TEST_F(FusionTest, NormGradientsStoreThroughTheirEpilogue) {
    for (const bool layer : {false, true}) {
        Graph g;
        const Tensor x = g.parameter("x", {3, 5, 40}), w = g.parameter("w", {40});
        const Tensor h = layer ? g.layer_norm(x, w, g.parameter("b", {40})) : g.rms_norm(x, w);
        const Tensor y = x + g.gelu(h);
        g.output("dx", grad(g.sum(y * g.input("t", y.shape())), {x})[0]);
        std::string labels;
        for (const codegen::KernelSource& k : compiler::program_kernels(g, device().context()->caps(), {})) labels += k.label + " ";
        EXPECT_NE(labels.find(layer ? "layer_norm_grad+add " : "rms_norm_grad+add "), std::string::npos) << labels;
        expect_matches_reference(g, random_feeds(g, layer ? 18 : 17));
    }
}

// Training's GroupNorm + SiLU: the forward's one kernel stores the norm as well, which the SiLU's backward reads, and
// here computes that backward too (a co-root: it reads the norm and the upstream gradient, an input); the backward's
// gy * xhat is the recomputed norm's epilogue.
TEST_F(FusionTest, GroupNormAndSiluTrainInTheirKernels) {
    Graph g;
    Tensor x = g.input("x", {2, 6, 5, 7});
    Tensor w = g.parameter("w", {6}), b = g.parameter("b", {6});
    Tensor y = g.silu(g.group_norm(x, 3, w, b));
    Tensor loss = g.sum(y * g.input("up", {2, 6, 5, 7}));
    const std::vector<Tensor> grads = grad(loss, {x, w, b});
    g.output("y", y);
    for (size_t k = 0; k < grads.size(); ++k) g.output("g" + std::to_string(k), grads[k]);
    const std::vector<std::string> labels = kernel_labels(g);
    EXPECT_EQ(labels[0], "group_norm+silu+mul+sigmoid+mul+sub+mul+add+mul");
    EXPECT_EQ(std::count(labels.begin(), labels.end(), "group_norm"), 0);
    EXPECT_EQ(std::count(labels.begin(), labels.end(), "silu"), 0);
    expect_matches_reference(g, random_feeds(g, 17));
}

// A ReLU's gradient mask reads the ReLU's output, not its input (autodiff.cpp), so the forward product stores the
// ReLU through its epilogue; and the product of the gradient upstream of the mask (the second convolution's input
// gradient, or with K split the sum of its pieces) stores the masked gradient through its own: neither the ReLU nor
// its mask is a kernel.
TEST_F(FusionTest, ReluAndItsGradientMaskTrainInTheirProducts) {
    for (const SplitK split_k : kSplitKs) {
        SCOPED_TRACE(testing::Message() << split_k);
        const ScopedEnv forced_splits("MEGANEURA_MATMUL_SPLITS", split_k.pieces);
        const ScopedEnv where("MEGANEURA_SPLIT_SUM", split_k.sum);
        Graph g;
        Tensor x = g.input("x", {2, 4, 6, 6});
        // K = 8 * 3 * 3 = 72 for the second convolution's input gradient: three pieces of 32 when split
        Tensor w1 = g.parameter("w1", {5, 4, 3, 3}), w2 = g.parameter("w2", {8, 5, 3, 3});
        Tensor h = g.relu(g.conv2d(x, w1, std::nullopt, {.padding = 1}));
        Tensor loss = g.sum(g.conv2d(h, w2, std::nullopt, {.padding = 1}) * g.input("up", {2, 8, 6, 6}));
        const std::vector<Tensor> grads = grad(loss, {x, w1, w2});
        for (size_t k = 0; k < grads.size(); ++k) g.output("g" + std::to_string(k), grads[k]);
        const std::vector<std::string> labels = kernel_labels(g);
        const bool apart = split_k.summed_apart();
        EXPECT_EQ(std::count(labels.begin(), labels.end(), apart ? "matmul_split_sum+relu" : "conv2d+relu"), 1);
        EXPECT_EQ(std::count(labels.begin(), labels.end(), apart ? "matmul_split_sum+greater+mul" : "conv2d_grad_input+greater+mul"), 1);
        EXPECT_EQ(std::count(labels.begin(), labels.end(), "relu"), 0);
        EXPECT_EQ(std::count(labels.begin(), labels.end(), "greater+mul"), 0);
        expect_matches_reference(g, random_feeds(g, 18));
    }
}

size_t occurrences(const std::string& text, const std::string& what) {
    size_t count = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
    return count;
}

// exp(x) squared four times: each inlined value is computed once, however often its consumers read
// it (1 exp and 4 products, not 16 and 15).
TEST_F(FusionTest, InlinedValuesReadTwiceAreComputedOnce) {
    Graph g;
    Tensor y = g.exp(g.input("x", {100}));
    for (int i = 0; i < 4; ++i) y = y * y;
    g.output("y", y);
    const sched::Schedule s = sched::lower(g, {g.outputs()[0].second}, sched::tune_for(device().context()->caps()));
    ASSERT_EQ(s.steps.size(), 1u);
    EXPECT_EQ(s.steps[0].kernel.label, "exp+mul+mul+mul+mul");
    EXPECT_EQ(occurrences(s.steps[0].kernel.glsl, " = float(exp("), 1u);
    EXPECT_EQ(occurrences(s.steps[0].kernel.glsl, " * r"), 4u);
    expect_matches_reference(g, random_feeds(g, 6, {-1, 1}));
}

// Adam's moments are read only by the parameter's update: one kernel computes all three and stores
// each in place (m, v and p), where it took three, and that kernel is the gradient's matmul, storing
// through the update as its epilogue, as SGD's is. A step then costs SGD's dispatches and the two
// bias-correction scalars every parameter shares, one batch of kernels of graph leaves (FusionPlan::leaf_batch). (The
// optimizer tests check the values against torch.optim.)
TEST_F(FusionTest, AdamUpdatesOneParameterInOneKernel) {
    Graph g;
    const Tensor x = g.input("x", {4, 6});
    const Tensor h = g.tanh(g.matmul(x, g.parameter("w1", {6, 5})));
    const Tensor loss = g.mean(g.tanh(g.matmul(h, g.parameter("w2", {5, 3}))));
    const Session adam = compile(g, device(), {.loss = loss, .optimizer = Adam{}});
    const Session sgd = compile(g, device(), {.loss = loss, .optimizer = SGD{}});
    EXPECT_EQ(adam.stats().dispatches, sgd.stats().dispatches + 1);
}

TEST_F(FusionTest, ManyInputsSplitIntoKernelsThatFit) {
    Graph g;
    Tensor sum = g.input("x0", {65});
    for (int i = 1; i < 20; ++i) sum = sum * 0.5 + g.input("x" + std::to_string(i), {65});
    g.output("y", sum);
    EXPECT_GT(dispatches_of(g), 1u);
    expect_matches_reference(g, random_feeds(g, 4));
}

// assign(s, f(s, x)) runs in place; readers of the old s created before or after it still see
// the old contents (then the copy stays at the end).
// s <- s - 0.1 * (s @ b): the product reads s across workgroups, so its epilogue must not write s in place
// (through a view too); the update is right after several steps.
TEST_F(FusionTest, ProductReadingItsTargetIsNotUpdatedInPlace) {
    constexpr int64_t N = 96;  // several workgroups, several K slices: a workgroup would read tiles another updated
    for (bool through_view : {false, true}) {
        Graph g;
        Tensor s = g.state("s", {N, N});
        Tensor a = through_view ? g.reshape(g.reshape(s, {N * N}), {N, N}) : s;
        g.assign(s, s - g.matmul(a, g.input("b", {N, N})) * 0.1);
        Session sess = compile(g, device());
        std::vector<float> b(N * N), s0(N * N);
        for (size_t i = 0; i < b.size(); ++i) b[i] = 0.01f * static_cast<float>(i % 17) - 0.08f, s0[i] = 0.02f * static_cast<float>(i % 13);
        sess.set("b", b);
        sess.set("s", s0);
        std::vector<double> want(s0.begin(), s0.end());
        for (int step = 0; step < 3; ++step) {
            sess.run();
            std::vector<double> next = want;
            for (size_t r = 0; r < N; ++r) {
                for (size_t c = 0; c < N; ++c) {
                    double dot = 0;
                    for (size_t k = 0; k < N; ++k) dot += want[r * N + k] * b[k * N + c];
                    next[r * N + c] -= 0.1 * dot;
                }
            }
            want = next;
        }
        EXPECT_LE(relative_l2(sess.get("s"), want), 1e-5) << (through_view ? "through a view" : "directly");
    }
}

TEST_F(FusionTest, AssignmentsSeeOldValuesAndUpdateState) {
    for (bool read_after : {false, true}) {
        Graph g;
        Tensor x = g.input("x", {37});
        Tensor s = g.state("s", {37});
        Tensor before = g.sum(s * x);
        Tensor updated = g.assign(s, s * 0.5 + x);
        g.output("before", before);
        g.output("updated_plus_one", updated + 1.0);
        if (read_after) g.output("after", g.sum(s));  // still the old contents
        Session sess = compile(g, device());
        std::vector<float> xv(37);
        for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.25f * static_cast<float>(i) - 3;
        sess.set("x", xv);
        std::vector<double> state(37, 0.0);
        for (int step = 0; step < 3; ++step) {
            sess.run();
            double want_before = 0, want_after = 0;
            for (size_t i = 0; i < xv.size(); ++i) want_before += state[i] * xv[i], want_after += state[i];
            EXPECT_NEAR(sess.get("before")[0], want_before, 1e-3) << "step " << step;
            if (read_after) EXPECT_NEAR(sess.get("after")[0], want_after, 1e-3) << "step " << step;
            for (size_t i = 0; i < xv.size(); ++i) state[i] = state[i] * 0.5 + xv[i];
            const auto s_now = sess.get("s");
            const auto plus_one = sess.get("updated_plus_one");
            for (size_t i = 0; i < xv.size(); ++i) {
                ASSERT_NEAR(s_now[i], state[i], 1e-5) << "step " << step;
                ASSERT_NEAR(plus_one[i], state[i] + 1, 1e-5) << "step " << step;
            }
        }
    }
}

// assign(s, slice_scatter(s, src, 1, start)), a KV cache's new rows, writes the rows in place (one slice_write of
// src's size, no copy of s) when every other reader of s's old contents runs in an earlier kernel: the write
// then comes in a later level than each of them, and what reads the assignment in a later level still. A reader
// of s built after the assignment, or the slice_scatter read as an output too, keep the copy and the assignment.
// Three runs at moving starts (the last rows among them), outputs and state against the float64 reference.
TEST_F(FusionTest, CacheRowsAreWrittenInPlaceAfterTheOldContentsAreRead) {
    enum Case { OldReadBefore, OldReadAfter, ScatterReadToo };
    for (Case c : {OldReadBefore, OldReadAfter, ScatterReadToo}) {
        Graph g;
        const Tensor src = g.input("src", {3, 2, 33}), start = g.input("start", {}, DType::I32), x = g.input("x", {3, 40, 33});
        const Tensor s = g.state("s", {3, 40, 33});
        if (c == OldReadBefore) g.output("old", g.sum(s * x, {1}));
        const Tensor scattered = g.slice_scatter(s, src, 1, start);
        g.output("attended", g.sum(g.assign(s, scattered) * x, {2}));
        if (c == OldReadAfter) g.output("old", g.sum(s * x, {1}));
        if (c == ScatterReadToo) g.output("scattered", scattered + 1.0);

        sched::Schedule plan = compiler::lower_program(optimize::optimize(g), sched::tune_for(device().context()->caps()));
        sched::order_by_level(plan);
        const int32_t state = plan.node_value[static_cast<size_t>(s.id)];
        size_t writes = 0, copies = 0;
        int32_t write_level = -1;
        for (size_t i = 0; i < plan.steps.size(); ++i) {
            const std::string& label = plan.steps[i].kernel.label;
            copies += label == "slice_scatter" || label == "assign";
            if (label != "slice_write") continue;
            ++writes, write_level = plan.step_level[i];
            EXPECT_EQ(plan.root(plan.steps[i].values.back()), state);
        }
        EXPECT_EQ(writes, c == OldReadBefore ? 1u : 0u) << c;
        EXPECT_EQ(copies, c == OldReadBefore ? 0u : 2u) << c;
        for (size_t i = 0; i < plan.steps.size() && writes == 1; ++i) {  // the readers of s, before and after the write
            const auto& values = plan.steps[i].values;
            if (plan.steps[i].kernel.label == "slice_write" ||
                std::none_of(values.begin(), values.end(), [&](int32_t v) { return plan.root(v) == state; })) {
                continue;
            }
            EXPECT_NE(plan.step_level[i], write_level) << plan.steps[i].kernel.label;  // a barrier between them
        }

        Session sess = compile(g, device(), {.poison_outputs = true});
        ref::Feeds feeds = random_feeds(g, 11 + c);
        feeds["s"] = {{3, 40, 33}, random_feeds(g, 7).at("x").data};
        sess.set("s", std::vector<float>(feeds["s"].data.begin(), feeds["s"].data.end()));
        for (const int32_t at : {5, 38, 0}) {  // 38: the last rows
            feeds["start"].data = {static_cast<double>(at)};
            feeds["src"] = random_feeds(g, static_cast<uint64_t>(at)).at("src");
            for (const char* name : {"src", "x"}) sess.set(name, std::vector<float>(feeds[name].data.begin(), feeds[name].data.end()));
            sess.set("start", std::vector<int32_t>{at});
            sess.run();
            const std::vector<ref::Value> want = ref::evaluate(g, feeds);
            for (const auto& [name, id] : g.outputs()) {
                EXPECT_LE(relative_l2(sess.get(name), want[static_cast<size_t>(id)].data), 1e-5) << c << " " << name << " at " << at;
            }
            feeds["s"] = want[static_cast<size_t>(scattered.id)];
            EXPECT_LE(relative_l2(sess.get("s"), feeds["s"].data), 1e-6) << c << " s at " << at;
        }
    }
}

// Rotated keys that only a cache write in place reads: the RoPE stores them into the cache at the start itself
// (FusionPlan::rope_into_cache; the cache declared after the RoPE, as SmolLM2 declares it), and no slice_write
// runs. A reader of the cache's old contents between the RoPE and the write in graph order keeps the slice_write,
// after that reader, since the RoPE runs before it. Odd sizes, the heads read split, three starts (the last rows
// among them), every output and the cache against the float64 reference.
TEST_F(FusionTest, RopeStoresRotatedKeysIntoTheCache) {
    constexpr int64_t T = 3, H = 3, D = 10, L = 17;
    for (const bool old_read_between : {false, true}) {
        Graph g;
        const Tensor x = g.input("x", {1, T, H, D}), start = g.input("start", {}, DType::I32);
        const Tensor positions = g.input("positions", {T}, DType::I32), inv_freq = g.input("inv_freq", {D / 2});
        const Tensor k = g.rope_rotate(g.permute(x, {0, 2, 1, 3}), positions, inv_freq, false);
        const Tensor cache = g.state("cache", {1, H, L, D});
        if (old_read_between) g.output("old", g.sum(cache, {2}));
        const Tensor scattered = g.slice_scatter(cache, k, 2, start);
        g.output("read", g.sum(g.assign(cache, scattered), {3}));
        std::map<std::string, int> kernels;
        for (const codegen::KernelSource& kernel : compiler::program_kernels(g, device().context()->caps(), {})) ++kernels[kernel.label];
        EXPECT_EQ(kernels["rope"], 1);
        EXPECT_EQ(kernels["slice_write"], old_read_between ? 1 : 0);
        EXPECT_EQ(kernels["slice_scatter"] + kernels["assign"] + kernels["copy"], 0);

        Session sess = compile(g, device(), {.poison_outputs = true});
        ref::Feeds feeds = random_feeds(g, 5);
        feeds["cache"] = {{1, H, L, D}, std::vector<double>(static_cast<size_t>(H * L * D))};
        for (size_t i = 0; i < feeds["cache"].data.size(); ++i) feeds["cache"].data[i] = static_cast<float>(0.01 * static_cast<double>(i % 97) - 0.4);
        sess.set("cache", std::vector<float>(feeds["cache"].data.begin(), feeds["cache"].data.end()));
        for (const int32_t at : {4, static_cast<int>(L - T), 0}) {
            const ref::Feeds fresh = random_feeds(g, static_cast<uint64_t>(at) + 20);
            feeds["x"] = fresh.at("x"), feeds["inv_freq"] = fresh.at("inv_freq");
            feeds["start"].data = {static_cast<double>(at)};
            feeds["positions"].data = {static_cast<double>(at), static_cast<double>(at + 1), static_cast<double>(at + 2)};
            set_feeds(sess, g, {{"x", feeds["x"]}, {"inv_freq", feeds["inv_freq"]}, {"start", feeds["start"]}, {"positions", feeds["positions"]}});
            sess.run();
            const std::vector<ref::Value> want = ref::evaluate(g, feeds);
            for (const auto& [name, id] : g.outputs()) {
                EXPECT_LE(relative_l2(sess.get(name), want[static_cast<size_t>(id)].data), 1e-5) << name << " at " << at;
            }
            feeds["cache"] = want[static_cast<size_t>(scattered.id)];
            EXPECT_LE(relative_l2(sess.get("cache"), feeds["cache"].data), 1e-6) << "cache at " << at;
        }
    }
}

// A decode step's q, k and v as the column slices of one product of one row (optimize/'s sibling fusion), each
// viewed as [1, heads, 1, head_dim]: q rotated by a RoPE (an output), k rotated into its cache, v written into its
// own. The product's GEMV stores all three (FusionPlan::rope_in_gemv, cache_in_gemv): no rope and no slice_write
// runs. The RoPEs' positions and frequencies and the writes' start declared after the product (leaves lowered on
// demand). Head dims 10 and 16, 3 query heads and 1 kv head, K odd (scalar loads) and a multiple of 4, the inverse
// rotation, starts at 0, in the middle and the last row. A reader of the caches' old contents after the product
// keeps the RoPE kernels and the write. Outputs and caches against the float64 reference, outputs NaN-poisoned.
TEST_F(FusionTest, DecodeGemvRotatesQAndKAndWritesTheCacheRows) {
    constexpr int64_t H = 3, L = 9;
    for (const int64_t D : {10, 16}) {
        for (const int64_t K : {37, 40}) {
            for (const bool old_read_after : {false, true}) {
                Graph g;
                const Tensor x = g.input("x", {1, K});
                const Tensor qkv = g.matmul(x, g.parameter("qkv.weight", {(H + 2) * D, K}), false, true);
                const Tensor k_cache = g.state("k_cache", {1, 1, L, D}), v_cache = g.state("v_cache", {1, 1, L, D});
                if (old_read_after) g.output("old", g.sum(k_cache, {2}) + g.sum(v_cache, {2}));
                const Tensor positions = g.input("positions", {1}, DType::I32), inv_freq = g.input("inv_freq", {D / 2});
                const Tensor start = g.input("start", {}, DType::I32);
                const Tensor q = g.rope_rotate(g.reshape(g.slice(qkv, 1, 0, H * D), {1, H, 1, D}), positions, inv_freq, D == 16);
                const Tensor k = g.rope_rotate(g.reshape(g.slice(qkv, 1, H * D, (H + 1) * D), {1, 1, 1, D}), positions, inv_freq, D == 16);
                const Tensor v = g.reshape(g.slice(qkv, 1, (H + 1) * D, (H + 2) * D), {1, 1, 1, D});
                const Tensor k_rows = g.slice_scatter(k_cache, k, 2, start), v_rows = g.slice_scatter(v_cache, v, 2, start);
                g.output("q", q);
                g.output("k", g.sum(g.assign(k_cache, k_rows), {3}));
                g.output("v", g.sum(g.assign(v_cache, v_rows), {3}));
                std::map<std::string, int> kernels;
                for (const codegen::KernelSource& kernel : compiler::program_kernels(g, device().context()->caps(), {})) ++kernels[kernel.label];
                const std::string what = std::to_string(D) + " " + std::to_string(K) + " " + std::to_string(old_read_after);
                EXPECT_EQ(kernels["matmul_gemv"], 1) << what;
                EXPECT_EQ(kernels["rope"] + kernels["rope_inverse"], old_read_after ? 2 : 0) << what;
                EXPECT_EQ(kernels["slice_write"], old_read_after ? 1 : 0) << what;

                Session sess = compile(g, device(), {.poison_outputs = true});
                ref::Feeds feeds = random_feeds(g, static_cast<uint64_t>(D + K));
                for (const char* cache : {"k_cache", "v_cache"}) {
                    feeds[cache] = {{1, 1, L, D}, std::vector<double>(static_cast<size_t>(L * D))};
                    for (size_t i = 0; i < feeds[cache].data.size(); ++i) {
                        feeds[cache].data[i] = static_cast<float>(0.01 * static_cast<double>((i * 7 + cache[0]) % 97) - 0.4);
                    }
                }
                set_feeds(sess, g, feeds);  // the weight and the caches
                for (const int32_t at : {4, static_cast<int>(L - 1), 0}) {
                    const ref::Feeds fresh = random_feeds(g, static_cast<uint64_t>(at) + 20);
                    feeds["x"] = fresh.at("x"), feeds["inv_freq"] = fresh.at("inv_freq");
                    feeds["start"].data = {static_cast<double>(at)};
                    feeds["positions"].data = {static_cast<double>(at + 1000)};  // a large angle: the reduction into [-pi, pi]
                    set_feeds(sess, g, {{"x", feeds["x"]}, {"inv_freq", feeds["inv_freq"]}, {"start", feeds["start"]},
                                        {"positions", feeds["positions"]}});
                    sess.run();
                    const std::vector<ref::Value> want = ref::evaluate(g, feeds);
                    for (const auto& [name, id] : g.outputs()) {
                        EXPECT_LE(relative_l2(sess.get(name), want[static_cast<size_t>(id)].data), 1e-5) << what << " " << name << " at " << at;
                    }
                    feeds["k_cache"] = want[static_cast<size_t>(k_rows.id)], feeds["v_cache"] = want[static_cast<size_t>(v_rows.id)];
                    EXPECT_LE(relative_l2(sess.get("k_cache"), feeds["k_cache"].data), 1e-6) << what << " k_cache at " << at;
                    EXPECT_LE(relative_l2(sess.get("v_cache"), feeds["v_cache"].data), 1e-6) << what << " v_cache at " << at;
                }
            }
        }
    }
}

// An RMSNorm of one row that only products of one row read (a decode step's norms before q, k, v and before gate
// and up, through the linear layers' reshape) is computed by their GEMVs (FusionPlan::norm_in_products): no rms_norm
// dispatch. K odd (scalar loads) and a multiple of 4 (vec4 loads), one product with a bias and ReLU as its epilogue,
// one storing two column parts, one over W not transposed. The norm also an output, or read by a product of two
// rows, keeps its kernel. Against the float64 reference, outputs NaN-poisoned first.
TEST_F(FusionTest, RmsNormOfOneRowIsComputedByItsProducts) {
    enum Case { Products, NormIsOutput, TwoRowProduct };
    for (const int64_t K : {131, 132}) {
        for (const Case c : {Products, NormIsOutput, TwoRowProduct}) {
            Graph g;
            const Tensor x = g.input("x", {1, 1, K});
            const Tensor h = g.rms_norm(x, g.parameter("norm.weight", {K}), 1e-5);
            const Tensor row = g.reshape(h, {1, K});
            const Tensor y = g.relu(g.linear(row, g.parameter("a.weight", {37, K}), g.parameter("a.bias", {37})));
            const Tensor parts = g.matmul(row, g.parameter("b.weight", {300, K}), false, true);
            g.output("y", y);
            g.output("b0", g.slice(parts, 1, 0, 77));
            g.output("b1", g.slice(parts, 1, 77, 300));
            g.output("c", g.matmul(row, g.parameter("c.weight", {K, 9})));
            if (c == NormIsOutput) g.output("h", h);
            if (c == TwoRowProduct) g.output("two_rows", g.matmul(g.concat({row, row}, 0), g.parameter("d.weight", {K, 5})));
            int norms = 0;
            for (const codegen::KernelSource& k : compiler::program_kernels(g, device().context()->caps(), {})) norms += k.label == "rms_norm";
            EXPECT_EQ(norms, c == Products ? 0 : 1) << K << " " << c;
            expect_matches_reference(g, random_feeds(g, static_cast<uint64_t>(K) + c));
        }
    }
}

// An RMSNorm or LayerNorm whose input is a pointwise kernel's root (Whisper's positional add through the convolutions'
// permute, before its first LayerNorm) computes that root as it reads its rows and stores it for the later readers
// (FusionPlan::norm_prologue): one kernel fewer. Not where a reader comes before the norm (it would read it unstored;
// that reader's kernel stores it instead). Against the float64 reference.
TEST_F(FusionTest, ANormComputesAndStoresThePointwiseInputItReads) {
    for (const bool layer : {false, true}) {
        for (const bool reader_first : {false, true}) {
            Graph g;
            const Tensor x = g.input("x", {2, 40, 6});
            const Tensor h = g.permute(x, {0, 2, 1}) * 2.0 + g.input("pos", {6, 40});  // [2, 6, 40]
            if (reader_first) g.output("r", h * 3.0);
            const Tensor w = g.parameter("w", {40});
            g.output("y", layer ? g.layer_norm(h, w, g.parameter("b", {40}), 1e-5) : g.rms_norm(h, w, 1e-5));
            if (!reader_first) g.output("r", h * 3.0);
            const std::string norm = layer ? "layer_norm" : "rms_norm";
            // the norm computing h (its label the tree's ops after its own), and r; or r's kernel storing h first
            // (FusionPlan::stored_in), and the norm reading it
            const std::vector<std::string> want = reader_first ? std::vector<std::string>{"mul+add+mul", norm}
                                                               : std::vector<std::string>{norm + "+mul+add", "mul"};
            EXPECT_EQ(kernel_labels(g), want) << norm;
            expect_matches_reference(g, random_feeds(g, 36));
        }
    }
}

// A norm that a split product's sum stores goes through its epilogue there too (Whisper's final LayerNorm and its
// square for the loss): the sum stores the epilogue's root in the norm's place, and the norm's own value too where an
// output reads it; no kernel of the norm's. RMSNorm and LayerNorm, against the float64 reference.
TEST_F(FusionTest, TheSplitSumStoresANormThroughItsEpilogue) {
    const ScopedEnv splits("MEGANEURA_MATMUL_SPLITS", "3");
    const ScopedEnv sum("MEGANEURA_SPLIT_SUM", "dispatch");
    for (const bool layer : {false, true}) {
        for (const bool kept : {false, true}) {
            Graph g;
            const Tensor h = g.linear(g.input("x", {10, 96}), g.parameter("w", {40, 96})) + g.input("r", {10, 40});
            const Tensor nw = g.parameter("nw", {40});
            const Tensor normed = layer ? g.layer_norm(h, nw, g.parameter("nb", {40}), 1e-5) : g.rms_norm(h, nw, 1e-5);
            g.output("squared", normed * normed * 0.5 + g.input("s", {40}));
            if (kept) g.output("normed", normed);
            const std::string norm = layer ? "+layer_norm" : "+rms_norm";
            EXPECT_EQ(kernel_labels(g), (std::vector<std::string>{"matmul", "matmul_split_sum+add" + norm + "+mul+mul+add"}))
                << norm << (kept ? ", kept" : "");
            expect_matches_reference(g, random_feeds(g, 35));
        }
    }
}

// An RMSNorm or LayerNorm of the rows a product stores where its K is split (its own value, or its residual add's: a
// pre-norm block's) is stored by the split's sum kernel (FusionPlan::norm_in_sum): no norm dispatch. Rows of 40, 132
// and 2052 columns (one, one and three vec4s a thread), batched rows; in training too, where the backward reads the
// rows and products of the norm's gradient (with a residual's gradient); a row of 42 (no whole vec4s) keeps the
// norm's kernel. The norm's parameters declared after the product, as models do. Against the float64 reference,
// outputs NaN-poisoned first.
TEST_F(FusionTest, NormOfSplitProductRowsIsStoredByTheSum) {
    const ScopedEnv splits("MEGANEURA_MATMUL_SPLITS", "3");
    for (const bool layer : {false, true}) {
        for (const int64_t n : {40, 42, 132, 2052}) {
            for (const bool residual : {false, true}) {
                for (const bool training : {false, true}) {
                    Graph g;
                    const Tensor x = g.input("x", {2, 5, 96});
                    const Tensor w = g.parameter("w", {n, 96}), v = g.parameter("v", {7, n});
                    Tensor h = g.linear(x, w);
                    if (residual) h = h + g.input("r", h.shape());
                    const Tensor nw = g.parameter("nw", {n});
                    const Tensor normed = layer ? g.layer_norm(h, nw, g.parameter("nb", {n}), 1e-5) : g.rms_norm(h, nw, 1e-5);
                    const Tensor z = g.linear(normed, v);
                    g.output("z", z);
                    if (residual) g.output("h", h);
                    if (training) {
                        const std::vector<Tensor> grads = grad(g.sum(z * g.input("t", z.shape())), {w, v, nw});
                        g.output("dw", grads[0]);
                        g.output("dv", grads[1]);
                        g.output("dnw", grads[2]);
                    }
                    const std::string name = layer ? "layer_norm" : "rms_norm";
                    int norms = 0, sums_with_norm = 0;
                    for (const codegen::KernelSource& k : compiler::program_kernels(g, device().context()->caps(), {})) {
                        norms += k.label == name;
                        sums_with_norm += k.label.starts_with("matmul_split_sum") && k.label.ends_with("+" + name);
                    }
                    const std::string what = name + " " + std::to_string(n) + " " + std::to_string(residual) + " " + std::to_string(training);
                    EXPECT_EQ(norms, n % 4 ? 1 : 0) << what;
                    EXPECT_EQ(sums_with_norm, n % 4 ? 0 : 1) << what;
                    expect_matches_reference(g, random_feeds(g, static_cast<uint64_t>(n * 8 + layer * 4 + residual * 2 + training)),
                                             training ? 1e-4 : 1e-5);
                }
            }
        }
    }
}

// silu(x W_gate^T) * (x W_up^T) of several rows (a prefill's SwiGLU) where K is split: one product kernel over both
// weights whose last piece of a tile sums both products' pieces storing the tree (FusionPlan::epilogue_pair;
// MatmulSpec::b2), or with MEGANEURA_SPLIT_SUM=dispatch both products' pieces and one split sum of both: no sum of the
// gate's own. 40 and 37 outputs a row (vec4 and scalar sums); the gate also an output (as a training step's backward
// reads it) is stored by the pair too. Against the float64 reference, outputs NaN-poisoned first.
TEST_F(FusionTest, SwigluOfSeveralRowsIsOneSplitSumOfBothProducts) {
    const ScopedEnv splits("MEGANEURA_MATMUL_SPLITS", "3");
    for (const SplitK split_k : {kSplitKs[1], kSplitKs[2]}) {
        for (const int64_t n : {40, 37}) {
            for (const bool gate_is_output : {false, true}) {
                SCOPED_TRACE(testing::Message() << split_k << ", " << n << " outputs" << (gate_is_output ? ", the gate an output" : ""));
                const ScopedEnv where("MEGANEURA_SPLIT_SUM", split_k.sum);
                Graph g;
                const Tensor x = g.input("x", {2, 5, 96});
                const Tensor gate = g.linear(x, g.parameter("gate.weight", {n, 96}));
                const Tensor up = g.linear(x, g.parameter("up.weight", {n, 96}));
                g.output("y", g.linear(g.silu(gate) * up, g.parameter("down.weight", {7, n})));
                if (gate_is_output) g.output("gate", gate);
                const auto sums = [&](const CompileOptions& options) {  // the kernels that store the products
                    std::vector<std::string> labels;
                    for (const codegen::KernelSource& k : compiler::program_kernels(g, device().context()->caps(), options)) {
                        if (k.label.starts_with(split_k.summed_apart() ? "matmul_split_sum" : "matmul")) labels.push_back(k.label);
                    }
                    return labels;
                };
                const std::string sum = split_k.summed_apart() ? "matmul_split_sum" : "matmul";
                const std::vector<std::string> paired = {sum + "+silu+mul", sum};
                EXPECT_EQ(sums({}), paired);
                expect_matches_reference(g, random_feeds(g, static_cast<uint64_t>(n) + gate_is_output));
                // Both weights read as their f16 copies (Tuning::f16_weights, as on a cooperative device): W2's copy is
                // the second product's B (an exact test would need the reference's weights rounded: f16's rounding here).
                const ScopedEnv f16_weights("MEGANEURA_F16_WEIGHTS", "1");
                if (!coop_device()) EXPECT_EQ(sums({.precision = Precision::Fast}), paired);  // else cooperative products
                int casts = 0;
                for (const codegen::KernelSource& k : compiler::program_kernels(g, device().context()->caps(), {.precision = Precision::Fast})) {
                    casts += k.label == "cast";
                }
                EXPECT_EQ(casts, 3);  // the gate's, up's and down's weights
                expect_matches_reference(g, random_feeds(g, static_cast<uint64_t>(n) + 2), 2e-3, {.precision = Precision::Fast});
            }
        }
    }
}

// A training step's activations that the backward reads as well as the next product are stored by the product they
// are the epilogue of, with their inputs: a GELU MLP's pre-activation (its bias add) and GELU; a SwiGLU's gate, its
// SiLU and up, where K is split, by the one product kernel of the pair (FusionPlan::stored_in: a fused root is stored
// by its first reader's kernel when every other reader runs later; epilogue_keeps for both of a pair). No kernel of
// an activation's own, and none of the gate's. In the backward, the gate's and up's gradients are the down product's
// input gradient's one kernel (FusionPlan::co_roots). Loss gradients of every weight and of x against the float64
// reference, outputs NaN-poisoned first.
TEST_F(FusionTest, ActivationsTheBackwardReadsAreStoredByTheirProducts) {
    const ScopedEnv splits("MEGANEURA_MATMUL_SPLITS", "3");
    for (const SplitK split_k : {kSplitKs[1], kSplitKs[2]}) {
        for (const bool swiglu : {false, true}) {
            SCOPED_TRACE(testing::Message() << split_k << (swiglu ? ", SwiGLU" : ", GELU"));
            const ScopedEnv where("MEGANEURA_SPLIT_SUM", split_k.sum);
            Graph g;
            const Tensor x = g.input("x", {2, 5, 96});
            std::vector<Tensor> weights{g.parameter("in.weight", {40, 96}), g.parameter("out.weight", {7, 40})};
            Tensor h;
            if (swiglu) {
                weights.push_back(g.parameter("up.weight", {40, 96}));
                h = g.silu(g.linear(x, weights[0])) * g.linear(x, weights[2]);
            } else {
                weights.push_back(g.parameter("in.bias", {40}));
                h = g.gelu(g.linear(x, weights[0], weights[2]));
            }
            const Tensor y = g.linear(h, weights[1]);
            g.output("y", y);
            weights.push_back(x);
            const std::vector<Tensor> grads = grad(g.sum(y * g.input("t", y.shape())), weights);
            for (size_t i = 0; i < grads.size(); ++i) g.output("d" + std::to_string(i), grads[i]);
            std::vector<std::string> activations, derivatives;  // the kernels that compute the activation, its derivative
            for (const codegen::KernelSource& k : compiler::program_kernels(g, device().context()->caps(), {})) {
                if (k.label.find(swiglu ? "silu" : "gelu") != std::string::npos && k.label.find("deriv") == std::string::npos) {
                    activations.push_back(k.label);
                }
                if (k.label.find(swiglu ? "sigmoid" : "gelu_deriv") != std::string::npos) derivatives.push_back(k.label);
            }
            const std::string sum = split_k.summed_apart() ? "matmul_split_sum" : "matmul";
            EXPECT_EQ(activations, std::vector<std::string>{swiglu ? sum + "+silu+mul" : sum + "+add+gelu"});
            // The down product's input gradient dh stores the gate's and up's gradients (dG a co-root of dU = dh * silu),
            // or GELU's, through its epilogue: dh itself is not stored.
            EXPECT_EQ(derivatives, std::vector<std::string>{swiglu ? "matmul+mul+mul+sigmoid+mul+sub+mul+add+mul" : "matmul+gelu_deriv+mul"});
            expect_matches_reference(g, random_feeds(g, swiglu), 1e-4);
        }
    }
}

// A loss's seed, the gradient of mean(y * y), reads y alone (and constants: the mean's divisor, the seed's 1 expanded
// and read through strides): the kernel that stores y, the norm's with its square as epilogue, stores it too
// (FusionPlan::co_roots), no kernel of its own, and the norm's gradient follows it a level sooner. Against the float64
// reference.
TEST_F(FusionTest, ALossSeedIsStoredByTheKernelOfWhatItReads) {
    Graph g;
    const Tensor x = g.input("x", {6, 40});
    const Tensor w = g.parameter("w", {40}), b = g.parameter("b", {40});
    const Tensor y = g.layer_norm(x, w, b, 1e-5);
    const Tensor loss = g.mean(y * y);
    g.output("loss", loss);
    const std::vector<Tensor> grads = grad(loss, {x, w, b});
    for (size_t i = 0; i < grads.size(); ++i) g.output("d" + std::to_string(i), grads[i]);
    // the norm with y * y and the seed; the loss; the norm's gradient, which stores gy * xhat too (FusionPlan::
    // up_xhat_of); w's and b's sums
    EXPECT_EQ(kernel_labels(g), (std::vector<std::string>{"layer_norm+mul+div+mul+mul+add", "mean", "layer_norm_grad",
                                                           "sum", "sum"}));
    expect_matches_reference(g, random_feeds(g, 41), 1e-5);
}

// A program's levels (compiler::program_schedule, what `meganeura shaders` counts for a device profile) are the
// barriers its run records (compile's hazard tracker over the planned memory): one after the inputs' upload, one
// between each two levels, and in inference one more before z's copy back, which the last level writes (a training
// step's last level is the update). A transformer block's prefill (its q, k and v weights stacked in place:
// Lowering::stack_leaves), split or not, and its training step (nothing hoisted).
TEST_F(FusionTest, ProgramLevelsAreTheRunsBarriers) {
    for (const SplitK split_k : kSplitKs) {
        SCOPED_TRACE(testing::Message() << split_k);
        const ScopedEnv forced("MEGANEURA_MATMUL_SPLITS", split_k.pieces);
        const ScopedEnv where("MEGANEURA_SPLIT_SUM", split_k.sum);
        constexpr int64_t seq = 6, heads = 2, head_dim = 8, width = heads * head_dim;
        Graph g;
        const Tensor x = g.input("x", {1, seq, width});
        const Tensor h = g.rms_norm(x, g.parameter("norm", {width}), 1e-5);
        auto split_heads = [&](const char* name) {
            const Tensor p = g.linear(h, g.parameter(name, {width, width}));
            return g.permute(g.reshape(p, {1, seq, heads, head_dim}), {0, 2, 1, 3});
        };
        const Tensor a = g.attention(split_heads("wq"), split_heads("wk"), split_heads("wv"), {.causal = true});
        const Tensor y = x + g.linear(g.reshape(g.permute(a, {0, 2, 1, 3}), {1, seq, width}), g.parameter("wo", {width, width}));
        const Tensor gate = g.linear(y, g.parameter("gate", {40, width})), up = g.linear(y, g.parameter("up", {40, width}));
        const Tensor z = y + g.linear(g.silu(gate) * up, g.parameter("down", {width, 40}));
        g.output("z", z);
        for (const bool training : {false, true}) {
            CompileOptions options;
            if (training) options = {.loss = g.mean(z * z), .optimizer = AdamW{.lr = 1e-3}};
            const compiler::ProgramSchedule program = compiler::program_schedule(g, device().context()->caps(), options, true);
            const std::set<int32_t> levels(program.schedule.step_level.begin() + static_cast<std::ptrdiff_t>(program.hoisted),
                                           program.schedule.step_level.end());
            EXPECT_EQ(levels.size() + (training ? 0 : 1), compile(g, device(), options).stats().barriers)
                << (training ? "training" : "inference");
            if (training) EXPECT_EQ(program.hoisted, 0u);
        }
    }
}

// silu(x W_gate^T) * (x W_up^T) of one row (a decode step's SwiGLU, through the linear layers' reshapes) is one
// GEMV over both weights storing the pair's epilogue (FusionPlan::epilogue_pair), here with one more factor read
// element for element, and with the RMSNorm of x computed in it too; W not transposed pairs as well. K odd (scalar
// loads) and a multiple of 4 (vec4), 97 outputs (a partial thread group). The gate also an output: the
// GEMV stores it too. Against the float64 reference, outputs NaN-poisoned first.
TEST_F(FusionTest, SwigluOfOneRowIsOneGemvOverBothWeights) {
    enum Case { Linear, Normed, NotTransposed, GateIsOutput };
    for (const int64_t K : {67, 68}) {
        for (const Case c : {Linear, Normed, NotTransposed, GateIsOutput}) {
            Graph g;
            constexpr int64_t F = 97;
            Tensor x = g.input("x", {1, 1, K});
            if (c == Normed) x = g.rms_norm(x, g.parameter("norm.weight", {K}), 1e-5);
            Tensor gate, up;
            if (c == NotTransposed) {
                const Tensor row = g.reshape(x, {1, K});
                gate = g.matmul(row, g.parameter("gate", {K, F})), up = g.matmul(row, g.parameter("up", {K, F}));
            } else {
                gate = g.linear(x, g.parameter("gate.weight", {F, K})), up = g.linear(x, g.parameter("up.weight", {F, K}));
            }
            g.output("y", g.silu(gate) * up * g.input("scale", up.shape()));
            if (c == GateIsOutput) g.output("gate", gate);
            std::string labels;  // nothing but the products: no norm, no pointwise kernel
            for (const codegen::KernelSource& k : compiler::program_kernels(g, device().context()->caps(), {})) labels += k.label + " ";
            EXPECT_EQ(labels, "matmul_gemv+silu+mul+mul ") << K << " " << c;
            expect_matches_reference(g, random_feeds(g, static_cast<uint64_t>(K) + c));
        }
    }
}

// The training step of loss (compiler::append_training) as a plain graph; with named = false its
// assignments lose their names, so each update runs in its own pointwise kernel as before the batches.
Graph training_step(const Graph& g, Tensor loss, const CompileOptions& options, bool named) {
    Graph t = g;
    compiler::append_training(t, t.handle(loss.id), options);
    Graph out;
    for (Node n : t.nodes()) {
        if (!named && n.op == Op::Assign) n.name.clear();
        out.emit(std::move(n));
    }
    for (const auto& [name, id] : t.outputs()) out.output(name, out.handle(id));
    return out;
}

// Runs steps a (its updates batched) and b (each update a kernel of its own) three times from the same parameters,
// with compiler::step_scalars' schedule, and compares every parameter and optimizer state of `step` after each run.
// Within relative L2 1e-6 a tensor, not bit for bit: the kernels compute the same operations in the same order (and are
// bit for bit on lavapipe), but Vulkan lets a compiler contract a * b + c into an FMA, which NVIDIA's does as the code
// around it leads it (on the H100, parameters whose update read a gradient's pieces differed in their last bits
// while their moments, from the same gradient, did not). An f32 ulp is 6e-8 to 1.2e-7 of a value.
void expect_same_steps(const Graph& step, Session& a, Session& b, const CompileOptions& options, const std::string& what) {
    for (int64_t t = 1; t <= 3; ++t) {
        const compiler::StepScalars sc = compiler::step_scalars(options, t);
        for (Session* s : {&a, &b}) {
            s->set(compiler::kLearningRate, std::vector<float>{sc.lr});
            s->set(compiler::kBiasCorrection1, std::vector<float>{sc.bias_correction1});
            s->set(compiler::kBiasCorrection2, std::vector<float>{sc.bias_correction2});
            s->run();
        }
        for (const Node& n : step.nodes()) {
            if (n.op != Op::Parameter && n.op != Op::State) continue;
            const std::vector<float> va = a.get(n.name), vb = b.get(n.name);
            ASSERT_EQ(va.size(), vb.size());
            EXPECT_LE(relative_l2(va, std::vector<double>(vb.begin(), vb.end())), 1e-6) << what << " step " << t << ": " << n.name;
        }
    }
}

void expect_batched_updates_match_their_own_kernels(int64_t C) {
    Graph g;
    Tensor h = g.input("x", {4, 3, C}) * g.parameter("scale", {3, C}, Init::uniform(0.5, 1.5));
    for (int l = 0; l < 4; ++l) {
        const std::string layer = "layer" + std::to_string(l);
        h = g.tanh(h * g.parameter(layer + ".weight", {C}, Init::uniform(0.5, 1.5)) +
                   g.parameter(layer + ".bias", {C}, Init::uniform(-0.1, 0.1)));
    }
    const Tensor frozen = g.parameter("frozen", {C}, Init::uniform(-1, 1));
    g.set_requires_grad(frozen, false);
    h = (h + frozen) * g.parameter("gain", {}, Init::uniform(0.5, 1.5));
    const Tensor y = g.matmul(g.reshape(h, {12, C}), g.parameter("proj", {C, 37}, Init::uniform(-0.1, 0.1))) +
                     g.parameter("proj.bias", {37}, Init::uniform(-0.1, 0.1));
    const Tensor loss = g.mean(y * y);
    std::vector<float> x(4 * 3 * C);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>(i % 23) - 0.1f;

    // The dispatches on lavapipe's 32 bindings: the scalars every member reads (the step size, the bias and decay
    // factors, the constants) bound once, then per member its gradient and, read and written in place, its
    // parameter and moments: AdamW's 8 + 4 per member fit six; Adam's 8 + 5 (the decayed gradient) four; SGD's
    // with momentum 3 + 3 nine; plain SGD's 1 + 2 all eleven.
    struct Case {
        std::string name;
        Optimizer optimizer;
        size_t members, batches;
    };
    const std::vector<Case> cases{{"adamw", AdamW{.lr = 1e-2, .weight_decay = 0.1}, 11, 2},
                                  {"adam", Adam{.lr = 1e-2, .weight_decay = 0.05}, 12, 3},
                                  {"sgd", SGD{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01}, 11, 2},
                                  {"sgd", SGD{.lr = 0.1}, 11, 1}};
    for (const auto& [name, optimizer, want_members, want_batches] : cases) {
        const CompileOptions options{.loss = loss, .optimizer = optimizer};
        const Graph batched = training_step(g, loss, options, true), separate = training_step(g, loss, options, false);
        size_t batches = 0, members = 0;
        for (const auto& k : compiler::program_kernels(batched, device().context()->caps(), {})) {
            if (k.label.rfind(name + " x ", 0) != 0) continue;
            ++batches;
            members += std::stoul(k.label.substr(name.size() + 3));
            EXPECT_TRUE(k.label.ends_with(" tensors")) << k.label;
        }
        EXPECT_EQ(members, want_members) << name;
        // The counts above are lavapipe's; a device with more bindings (the H200's 1024 take every member) needs fewer.
        if (device().context()->caps().max_storage_buffers_per_stage == 32) EXPECT_EQ(batches, want_batches) << name;
        else EXPECT_TRUE(batches >= 1 && batches <= want_batches) << name << ": " << batches;
        Session a = compile(batched, device()), b = compile(separate, device());
        EXPECT_EQ(a.stats().dispatches + members - batches, b.stats().dispatches) << name;
        for (Session* s : {&a, &b}) s->set("x", x);
        const std::vector<float> frozen_before = a.get("frozen");
        expect_same_steps(batched, a, b, options, name);
        const std::vector<float> frozen_after = a.get("frozen");
        EXPECT_EQ(std::memcmp(frozen_before.data(), frozen_after.data(), frozen_before.size() * sizeof(float)), 0) << name;
    }
}

// The updates no gradient product stores (here a 3 x 129 scale, four 129-wide weights and biases, a
// scalar gain and the projection's bias: eleven tensors of odd sizes, each more than one workgroup but
// the scalar) run as few dispatches as the device's bindings allow, with the same values as each in its own kernel
// (the graph's assignments unnamed; expect_same_steps). The projection's update stays its gradient
// product's epilogue, but Adam's: its L2 decay, added to the gradient that both moments read, is a value
// the kernel stores too, and the product's kernel would bind 17 buffers, over the fused limit of 16. The
// frozen parameter is left as it was. (Updates are the epilogue of any product here, MEGANEURA_UPDATES=epilogue,
// as the unnamed ones are: by default only a split product's, UpdatesStayInSplitSumsOnly.)
TEST_F(FusionTest, BatchedUpdatesMatchTheirOwnKernels) {
    const ScopedEnv anywhere("MEGANEURA_UPDATES", "epilogue");
    // 129 wide, each member runs an element a thread; 128 wide, every member but the scalar gain's by quads.
    for (const int64_t C : {129, 128}) {
        SCOPED_TRACE(testing::Message() << C << " wide");
        expect_batched_updates_match_their_own_kernels(C);
    }
}

// The updates add the pieces of the gradients they alone read (FusionPlan::summed_as_read): a bias's, a sum over 128
// rows in two pieces, and a convolution's weight's, split in K (its pieces summed by a dispatch here), where a dispatch
// each added them. The values are those of every update a kernel of its own reading the summed gradient, the pieces
// added in the same order (expect_same_steps).
TEST_F(FusionTest, UpdatesAddThePiecesOfTheGradientsTheyAloneRead) {
    const ScopedEnv splits("MEGANEURA_MATMUL_SPLITS", "3");
    const ScopedEnv sum("MEGANEURA_SPLIT_SUM", "dispatch");
    Graph g;
    const Tensor x = g.input("x", {2, 4, 8, 8});
    const Tensor conv = g.conv2d(x, g.parameter("conv.weight", {8, 4, 3, 3}, Init::uniform(-0.3, 0.3)), std::nullopt,
                                 {.padding = 1});
    const Tensor rows = g.reshape(g.permute(conv, {0, 2, 3, 1}), {128, 8});
    const Tensor y = g.linear(rows, g.parameter("fc.weight", {40, 8}, Init::uniform(-0.3, 0.3)),
                              g.parameter("fc.bias", {40}, Init::uniform(-0.1, 0.1)));
    const Tensor loss = g.mean(y * y);
    const CompileOptions options{.loss = loss, .optimizer = AdamW{.lr = 1e-2, .weight_decay = 0.1}};
    const Graph batched = training_step(g, loss, options, true), separate = training_step(g, loss, options, false);
    const auto plain_sums = [&](const Graph& step) {
        const auto kernels = compiler::program_kernels(step, device().context()->caps(), {});
        return std::count_if(kernels.begin(), kernels.end(), [](const auto& k) { return k.label == "matmul_split_sum"; });
    };
    // Both sum the convolution's pieces and those of the product's input gradient; the batch alone reads the others.
    EXPECT_EQ(plain_sums(batched), 2);
    EXPECT_EQ(plain_sums(separate), 4);
    Session a = compile(batched, device()), b = compile(separate, device());
    std::vector<float> xs(2 * 4 * 8 * 8);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = 0.03f * static_cast<float>(i % 29) - 0.4f;
    for (Session* s : {&a, &b}) s->set("x", xs);
    expect_same_steps(batched, a, b, options, "adamw");
}

// The column sums only updates read, of one shape, run as one dispatch (Lowering::hold_column_sum): three layers'
// biases, each a sum over 128 rows in pieces, where a dispatch each ran; the same values as every update a kernel of
// its own reading its summed gradient.
TEST_F(FusionTest, ColumnSumsOnlyUpdatesReadRunAsOneDispatch) {
    Graph g;
    Tensor h = g.input("x", {128, 40});
    for (int l = 0; l < 3; ++l) {
        const std::string layer = "fc" + std::to_string(l);
        h = g.tanh(g.linear(h, g.parameter(layer + ".weight", {40, 40}, Init::uniform(-0.3, 0.3)),
                            g.parameter(layer + ".bias", {40}, Init::uniform(-0.1, 0.1))));
    }
    const Tensor loss = g.mean(h * h);
    const CompileOptions options{.loss = loss, .optimizer = AdamW{.lr = 1e-2, .weight_decay = 0.1}};
    const Graph batched = training_step(g, loss, options, true), separate = training_step(g, loss, options, false);
    const auto labels = [&](const Graph& step) {
        std::multiset<std::string> out;
        for (const auto& k : compiler::program_kernels(step, device().context()->caps(), {})) {
            if (k.label.starts_with("sum_columns")) out.insert(k.label);
        }
        return out;
    };
    EXPECT_EQ(labels(batched), std::multiset<std::string>{"sum_columns x 3"});
    EXPECT_EQ(labels(separate), (std::multiset<std::string>{"sum_columns", "sum_columns", "sum_columns"}));
    Session a = compile(batched, device()), b = compile(separate, device());
    std::vector<float> xs(128 * 40);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = 0.02f * static_cast<float>(i % 31) - 0.3f;
    for (Session* s : {&a, &b}) s->set("x", xs);
    expect_same_steps(batched, a, b, options, "adamw");
}

// By default (Tuning::UpdatesInProducts::SplitSums) an optimizer's update is batched rather than the epilogue of
// its gradient's product, unless the product's K is split: the sum of its pieces applies it (the last piece's of each
// tile, or a dispatch's). Here dW sums over 96 rows; SGD with momentum, whose update and gradient fit a product's
// bindings on lavapipe too (AdamW's do not here).
TEST_F(FusionTest, UpdatesStayInSplitSumsOnly) {
    Graph g;
    const Tensor x = g.input("x", {96, 24});
    const Tensor y = g.matmul(x, g.parameter("w", {24, 20}, Init::uniform(-0.5, 0.5)));
    const Tensor loss = g.mean(y * y);
    const CompileOptions options{.loss = loss, .optimizer = SGD{.lr = 0.1, .momentum = 0.9}};
    for (const SplitK split_k : kSplitKs) {
        SCOPED_TRACE(testing::Message() << split_k);
        const ScopedEnv forced("MEGANEURA_MATMUL_SPLITS", split_k.pieces);
        const ScopedEnv sum("MEGANEURA_SPLIT_SUM", split_k.sum);
        Graph step = g;
        compiler::append_training(step, step.handle(loss.id), options);
        std::vector<std::string> labels;
        for (const auto& k : compiler::program_kernels(step, device().context()->caps(), {})) labels.push_back(k.label);
        const bool split = std::string(split_k.pieces) != "1";
        const auto update_in_sum = std::find_if(labels.begin(), labels.end(), [&](const std::string& l) {
            return l.starts_with(split_k.summed_apart() ? "matmul_split_sum+" : "matmul+") && l.ends_with("+sub");
        });
        EXPECT_EQ(update_in_sum != labels.end(), split);
        EXPECT_EQ(std::count(labels.begin(), labels.end(), "sgd x 1 tensor"), split ? 0 : 1);
    }
}

// AdamW's moments and the parameter update are each one kernel written in place: no copies.
TEST_F(FusionTest, OptimizerUpdatesNeedNoCopies) {
    Graph g;
    Tensor x = g.input("x", {8, 16});
    Tensor w = g.parameter("w", {4, 16}, Init::uniform(-0.5, 0.5));
    Tensor y = g.linear(x, w);
    Tensor loss = g.mean(y * y);
    Session s = compile(g, device(), {.loss = loss, .optimizer = AdamW{.lr = 1e-2, .weight_decay = 0.1}, .profile = true});
    s.set("x", std::vector<float>(8 * 16, 0.5f));
    s.step();
    size_t kernels = 0;
    for (const auto& [label, ms] : s.profile()) {
        EXPECT_NE(label, "assign");
        ++kernels;
    }
    EXPECT_EQ(kernels, s.stats().dispatches);
}

}  // namespace
}  // namespace mn::test
