// The convolution family's forward ops on the GPU against the float64 reference (their backward
// graphs and finite-difference checks are in autodiff_test.cpp), batch norm's running-stat update,
// and the builders' shape errors; the derivatives on every kernel path (1x1 as matmuls, split-K,
// each tile) against the reference too.
#include <cmath>
#include <cstdlib>
#include <tuple>

#include "gpu_check.hpp"
#include "error_of.hpp"
#include "temp_dir.hpp"
#include "codegen/families.hpp"
#include "meganeura/autodiff.hpp"
#include "codegen/shader_compiler.hpp"
#include "schedule/schedule.hpp"

namespace mn::test {
namespace {

using ConvOpsTest = GpuTest;

struct ConvCase {
    Shape x, w;
    ConvOptions o;
    bool bias;
};

// Odd sizes, channel counts past one 64-wide tile, every option on and off.
TEST_F(ConvOpsTest, Conv2dMatchesReference) {
    const std::vector<ConvCase> cases = {
        {{2, 3, 9, 11}, {5, 3, 3, 3}, {}, true},
        {{1, 5, 13, 7}, {70, 5, 3, 3}, {.stride = 2, .padding = 1}, false},
        {{2, 4, 11, 11}, {6, 4, 3, 3}, {.padding = 2, .dilation = 2}, true},
        {{2, 6, 9, 9}, {9, 2, 3, 3}, {.stride = 2, .padding = 1, .groups = 3}, false},
        {{1, 8, 7, 7}, {8, 1, 5, 5}, {.padding = 2, .groups = 8}, true},
        {{3, 67, 5, 5}, {3, 67, 1, 1}, {.stride = 2}, false},
        {{1, 3, 17, 15}, {4, 3, 7, 7}, {.stride = 2, .padding = 3}, false},
    };
    uint64_t seed = 500;
    for (const ConvCase& c : cases) {
        SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w) + " stride " + std::to_string(c.o.stride) + " pad " +
                     std::to_string(c.o.padding) + " dil " + std::to_string(c.o.dilation) + " groups " +
                     std::to_string(c.o.groups));
        Graph g;
        auto bias = c.bias ? std::optional<Tensor>(g.input("b", {c.w[0]})) : std::nullopt;
        g.output("y", g.conv2d(g.input("x", c.x), g.input("w", c.w), bias, c.o));
        expect_matches_reference(g, random_feeds(g, seed++));
    }
}


// The forward and both derivatives of one convolution, as outputs "y", "gx", "gw".
void add_conv_and_derivatives(Graph& g, const ConvCase& c) {
    Tensor x = g.input("x", c.x), w = g.input("w", c.w);
    Tensor y = g.conv2d(x, w, std::nullopt, c.o);
    const std::vector<int64_t> attrs = g.node(y.id).ints;
    const Shape ys = y.shape();
    Tensor gy = g.input("gy", ys);
    g.output("y", y);
    g.output("gx", g.conv2d_grad_input(gy, w, c.x, attrs));
    g.output("gw", g.conv2d_grad_weight(x, gy, c.w, attrs));
}

// 1x1 stride-1 convolutions (lowered to matmuls: batched, transposed, the weight gradient summed
// over images) next to implicit GEMMs, with K split into 3 pieces (the last one short) and every
// tile; odd channel counts and images, batch 1 and more.
TEST_F(ConvOpsTest, DerivativesOnEveryPathMatchReference) {
    const std::vector<ConvCase> cases = {
        {{3, 67, 5, 7}, {37, 67, 1, 1}, {}, false},
        {{1, 9, 6, 5}, {70, 9, 1, 1}, {}, false},
        {{2, 5, 4, 3}, {1, 5, 1, 1}, {}, false},
        {{2, 6, 9, 7}, {9, 2, 3, 3}, {.stride = 2, .padding = 1, .groups = 3}, false},
        {{3, 35, 5, 5}, {33, 35, 3, 3}, {.padding = 1}, false},
        {{2, 3, 5, 5}, {7, 3, 1, 1}, {.stride = 2}, false},
    };
    const std::vector<std::pair<const char*, const char*>> settings = {{"", ""},         {"32", "3"},  {"128", "3"},
                                                                             {"64", "1"},       {"128x64", "1"}, {"64:2", "3"},
                                                                             {"128@16x8", "3"}};
    uint64_t seed = 600;
    for (const auto& [tile, splits] : settings) {
        ScopedEnv forced_tile("MEGANEURA_MATMUL_TILE", tile), forced_splits("MEGANEURA_MATMUL_SPLITS", splits);
        for (const ConvCase& c : cases) {
            SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w) + " stride " + std::to_string(c.o.stride) + " groups " +
                         std::to_string(c.o.groups) + " tile '" + tile + "' splits '" + splits + "'");
            Graph g;
            add_conv_and_derivatives(g, c);
            expect_matches_reference(g, random_feeds(g, seed++));
        }
    }
}

// Precision Fast: where the device has NV f16 cooperative matrices, the implicit GEMMs run on them
// (f16 operands, f32 accumulation: relative L2 ~7e-4 for random operands, as the matmul's fast
// test explains), at every cooperative tile and with K split; elsewhere they match like Strict.
TEST_F(ConvOpsTest, DerivativesInFastPrecisionMatchReference) {
    const bool coop = sched::tune_for(device().context()->caps(), Precision::Fast).matmul.coop_subgroup != 0;
    const std::vector<ConvCase> cases = {
        {{2, 6, 9, 7}, {9, 2, 3, 3}, {.stride = 2, .padding = 1, .groups = 3}, false},
        {{3, 35, 5, 5}, {33, 35, 3, 3}, {.padding = 1}, false},
        {{1, 3, 17, 15}, {4, 3, 7, 7}, {.stride = 2, .padding = 3}, false},
        {{2, 20, 9, 9}, {70, 20, 3, 3}, {.stride = 2, .padding = 1}, false},
        // Channels in whole groups of 8, summed over in octets (codegen::conv_k_octets), also per group and 1x1.
        {{2, 16, 9, 9}, {24, 16, 3, 3}, {.stride = 2, .padding = 1}, false},
        {{2, 16, 7, 7}, {16, 8, 3, 3}, {.padding = 1, .groups = 2}, false},
        {{2, 16, 7, 7}, {8, 16, 1, 1}, {.stride = 2}, false},
    };
    CompileOptions fast;
    fast.precision = Precision::Fast;
    const std::vector<std::pair<const char*, const char*>> settings = {
        {"", ""}, {"", "3"}, {"128,128,64,32,32,2", ""}, {"64,64,32,32,32,2", "2"}, {"128,128,64,32,64,1", ""},
        {"32,32,16,16,32,2", ""}};
    uint64_t seed = 700;
    for (const auto& [tile, splits] : settings) {
        ScopedEnv forced_tile("MEGANEURA_COOP_TILE", tile), forced_splits("MEGANEURA_MATMUL_SPLITS", splits);
        for (const ConvCase& c : cases) {
            SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w) + " tile '" + tile + "' splits '" + splits + "'");
            Graph g;
            add_conv_and_derivatives(g, c);
            expect_matches_reference(g, random_feeds(g, seed++), coop ? 2e-3 : 1e-5, fast);
        }
    }
}

// A strided input gradient is one GEMM per stride phase over the taps that land there (codegen's
// kGradInputByPhase): strides apart per dimension (a 1-D convolution's, Whisper's conv2), a stride of 3, kernels
// smaller than the stride (phases no tap reaches), padding past the stride and odd images (phases of unequal
// size), per group and in octets of output channels, with K split and its pieces summed either way; a dilated
// strided one keeps the one GEMM. Strict, and fast where the device has cooperative matrices.
TEST_F(ConvOpsTest, StridedInputGradientsByPhaseMatchReference) {
    struct Case {
        Shape x, w;
        std::vector<int64_t> attrs;  // stride, padding and dilation (height, width), groups
        bool phased;
    };
    const std::vector<Case> cases = {
        {{2, 5, 1, 23}, {4, 5, 1, 3}, {1, 2, 0, 1, 1, 1, 1}, true},
        {{1, 6, 11, 4}, {8, 6, 3, 1}, {2, 1, 1, 0, 1, 1, 1}, true},
        {{2, 5, 10, 11}, {6, 5, 5, 5}, {3, 3, 2, 2, 1, 1, 1}, true},
        {{1, 4, 8, 7}, {3, 4, 2, 2}, {3, 3, 0, 0, 1, 1, 1}, true},
        {{2, 6, 9, 9}, {4, 6, 3, 3}, {2, 2, 2, 2, 1, 1, 1}, true},
        {{2, 16, 9, 7}, {32, 8, 3, 3}, {2, 2, 1, 1, 1, 1, 2}, true},
        {{2, 4, 11, 9}, {5, 4, 3, 3}, {2, 2, 2, 2, 2, 2, 1}, false},
    };
    const bool coop = sched::tune_for(device().context()->caps(), Precision::Fast).matmul.coop_subgroup != 0;
    CompileOptions fast;
    fast.precision = Precision::Fast;
    uint64_t seed = 900;
    for (const char* splits : {"", "3"}) {
        ScopedEnv forced_splits("MEGANEURA_MATMUL_SPLITS", splits);
        for (const char* sums : {"dispatch", "product"}) {
            ScopedEnv summed("MEGANEURA_SPLIT_SUM", sums);
            for (const Case& c : cases) {
                SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w) + " splits '" + splits + "' summed by " + sums);
                const std::vector<int64_t>& a = c.attrs;
                auto out_extent = [&](int i) { return (c.x[2 + i] + 2 * a[2 + i] - a[4 + i] * (c.w[2 + i] - 1) - 1) / a[i] + 1; };
                Graph g;
                g.output("gx", g.conv2d_grad_input(g.input("gy", {c.x[0], c.w[0], out_extent(0), out_extent(1)}),
                                                   g.input("w", c.w), c.x, a));
                const sched::Schedule s = sched::lower(g, {g.outputs().front().second}, sched::tune_for(device().context()->caps()));
                EXPECT_EQ(s.steps.front().kernel.choice.find("stride phases") != std::string::npos, c.phased)
                    << s.steps.front().kernel.choice;
                expect_matches_reference(g, random_feeds(g, seed++));
                expect_matches_reference(g, random_feeds(g, seed++), coop ? 2e-3 : 1e-5, fast);
            }
        }
    }
}

// An inference's forward convolutions read their weights as f16 copies (Tuning::f16_weights), stored in
// octets where the cooperative kernel sums in octets (ConvSpec::weight_octets): against the
// float64 reference at the fast tolerance, per group and with a bias epilogue.
TEST_F(ConvOpsTest, FastForwardOfF16WeightsMatchesReference) {
    const bool coop = sched::tune_for(device().context()->caps(), Precision::Fast).matmul.coop_subgroup != 0;
    CompileOptions fast;
    fast.precision = Precision::Fast;
    for (const auto& [x_shape, w_shape, options] : std::vector<std::tuple<Shape, Shape, ConvOptions>>{
             {{2, 16, 9, 9}, {24, 16, 3, 3}, {.stride = 2, .padding = 1}},
             {{1, 32, 8, 8}, {40, 16, 3, 3}, {.padding = 1, .groups = 2}},
             {{2, 3, 17, 15}, {8, 3, 7, 7}, {.stride = 2, .padding = 3}}}) {
        SCOPED_TRACE(shape_str(w_shape));
        Graph g;
        g.output("y", g.conv2d(g.input("x", x_shape), g.parameter("w", w_shape), g.parameter("b", {w_shape[0]}), options));
        expect_matches_reference(g, random_feeds(g, 790), coop ? 2e-3 : 1e-5, fast);
    }
}

// Gradients of 1e-10 through both derivatives' scaled cooperative kernels (see the matmul's
// FastGradientProductsKeepTinyGradients).
TEST_F(ConvOpsTest, FastGradientsKeepTinyValues) {
    const bool coop = sched::tune_for(device().context()->caps(), Precision::Fast).matmul.coop_subgroup != 0;
    ScopedEnv scaled("MEGANEURA_FAST_GRADIENTS", "f16");  // the scaled cooperative gradient products
    CompileOptions fast;
    fast.precision = Precision::Fast;
    Graph g;
    Tensor x = g.parameter("x", {2, 20, 9, 9});
    Tensor w = g.parameter("w", {70, 20, 3, 3});
    Tensor y = g.conv2d(x, w, std::nullopt, {.stride = 2, .padding = 1});
    Tensor loss = g.sum(g.mul(y, g.input("tiny", y.shape())));
    const auto grads = grad(loss, {x, w});
    g.output("grad.x", grads[0]);
    g.output("grad.w", grads[1]);
    ref::Feeds feeds = random_feeds(g, 800);
    for (double& v : feeds.at("tiny").data) v = static_cast<float>(v * 1e-10);
    expect_matches_reference(g, feeds, coop ? 2e-3 : 1e-5, fast);
}

// The scaled cooperative kernels rescale their accumulators as K goes where a slice's magnitudes pass the scales
// the slices before it took: the upstream gradient 4096 times larger in the second image than in the first (the
// weight gradient's K runs over images and pixels) and in the second half of the output channels than in the first
// (the input gradient's K runs over output channels and taps). Unsplit, so one workgroup sees every slice.
TEST_F(ConvOpsTest, FastGradientsRescaleAlongK) {
    const bool coop = sched::tune_for(device().context()->caps(), Precision::Fast).matmul.coop_subgroup != 0;
    ScopedEnv scaled("MEGANEURA_FAST_GRADIENTS", "f16"), unsplit("MEGANEURA_MATMUL_SPLITS", "1");
    CompileOptions fast;
    fast.precision = Precision::Fast;
    Graph g;
    Tensor x = g.parameter("x", {2, 20, 9, 9});
    Tensor w = g.parameter("w", {70, 20, 3, 3});
    Tensor y = g.conv2d(x, w, std::nullopt, {.padding = 1});
    Tensor loss = g.sum(g.mul(y, g.input("dy", y.shape())));
    const auto grads = grad(loss, {x, w});
    g.output("grad.x", grads[0]);
    g.output("grad.w", grads[1]);
    ref::Feeds feeds = random_feeds(g, 820);
    auto& dy = feeds.at("dy").data;
    for (size_t i = 0; i < dy.size(); ++i) {
        const size_t image = i / (70 * 81), channel = i / 81 % 70;
        dy[i] = static_cast<float>(dy[i] * std::ldexp(1.0, (image == 0 ? -6 : 6) + (channel < 35 ? -6 : 6)));
    }
    expect_matches_reference(g, feeds, coop ? 2e-3 : 1e-5, fast);
}

// A split forward convolution (Tuning::split_forward: before a ReLU, in a graph with gradients) within 1e-5 of float64, as
// strict, on the cooperative kernels too, where f16 operands are ~7e-4 off (see the matmul's
// SplitForwardProductsKeepF32Precision). 7x7 stride 2 and 3x3, the stem's and a bottleneck's shapes.
TEST_F(ConvOpsTest, SplitForwardKeepsF32Precision) {
    CompileOptions fast;
    fast.precision = Precision::Fast;
    for (const auto& [w_shape, options] : std::vector<std::pair<Shape, ConvOptions>>{
             {{64, 3, 7, 7}, {.stride = 2, .padding = 3}}, {{48, 40, 3, 3}, {.padding = 1}}}) {
        SCOPED_TRACE(shape_str(w_shape));
        const Graph g = split_forward_graph([&](Graph& h) {
            return h.conv2d(h.parameter("x", {2, w_shape[1], 30, 30}), h.parameter("w", w_shape), std::nullopt, options);
        });
        expect_matches_reference(g, random_feeds(g, 810), 1e-5, fast);
    }
}

// The cooperative implicit GEMMs' GLSL compiles for each derivative and tile, also where no device
// can run it (CI).
TEST(ConvCoopSource, CompilesWithGlslang) {
    for (const auto& [tile, suffix] : std::vector<std::pair<const char*, std::string>>{
             {"128,128,64,32,32,2", "_coop"}, {"64,64,32,32,32,2", "_coop_scaled"}, {"128,128,64,32,64,1", "_coop"},
             {"128,128,64,32,64,1", "_coop_scaled"}, {"64,64,32,32,32,2", "_coop_split"}, {"128,64,32,32,32,1", "_coop_split"}}) {
        ScopedEnv forced("MEGANEURA_COOP_TILE", tile);
        codegen::MatmulTuning tuning = sched::tune_for(device().context()->caps(), Precision::Fast).matmul;
        tuning.max_shared_memory = 48 * 1024;
        tuning.coop_subgroup = 32;
        tuning.coop_scaled = suffix == "_coop_scaled";
        tuning.coop_split = suffix == "_coop_split";
        for (codegen::ConvMode mode : {codegen::ConvMode::Forward, codegen::ConvMode::GradInput, codegen::ConvMode::GradWeight}) {
            SCOPED_TRACE(std::string(tile) + suffix + " mode " + std::to_string(static_cast<int>(mode)));
            // Odd channels (K channel-major), then whole groups of 8 (in octets; the forward's f16 weight stored so).
            const codegen::ConvSpec odd{.mode = mode, .dtype = DType::F32, .x = {2, 6, 9, 7}, .weight = {9, 2, 3, 3},
                                        .y = {2, 9, 5, 4}, .attrs = {2, 2, 1, 1, 1, 1, 3}};
            codegen::ConvSpec eights{.mode = mode, .dtype = DType::F32, .x = {2, 16, 9, 7}, .weight = {32, 8, 3, 3},
                                     .y = {2, 32, 5, 4}, .attrs = {2, 2, 1, 1, 1, 1, 2}};
            EXPECT_EQ(codegen::conv_k_octets(eights, tuning), mode != codegen::ConvMode::GradWeight);
            if (mode == codegen::ConvMode::Forward && suffix == "_coop") eights.weight_f16 = eights.weight_octets = true;
            for (const codegen::ConvSpec& spec : {odd, eights}) {
                const auto k = codegen::conv2d_kernels(spec, tuning).kernels.product;
                EXPECT_TRUE(k.label.ends_with(suffix)) << k.label;
                EXPECT_NO_THROW(codegen::compile_glsl(k.glsl, {.vulkan_minor = 3}));
            }
        }
    }
}

// A convolution's implicit GEMM between 2^26 and 2^27 multiply-adds keeps the 32x32 tile, where a matmul
// takes 64x64 (MatmulChoice.SaysWhyEachVariantDeclines): the U-Net's gradients were slower with it.
TEST(ConvCoopChoice, AnImplicitGemmBelow2To27KeepsTheSmallTile) {
    codegen::MatmulTuning t;
    t.compute_units = 132;
    t.max_shared_memory = 48 * 1024;
    t.coop_subgroup = 32;
    // 64 output channels x 2048 pixels x 576 taps: 2^26.2 multiply-adds.
    const codegen::ConvSpec spec{.mode = codegen::ConvMode::Forward, .dtype = DType::F32, .x = {2, 64, 32, 32},
                                 .weight = {64, 64, 3, 3}, .y = {2, 64, 32, 32}, .attrs = {1, 1, 1, 1, 1, 1, 1}};
    const std::string choice = codegen::conv2d_kernels(spec, t).kernels.product.choice;
    EXPECT_EQ(choice.rfind("cooperative implicit GEMM 32x32x32/2 (by size;", 0), 0u) << choice;
}

// The kernels each derivative lowers to: matmuls for 1x1 stride 1 (the weight gradient's images
// summed by the split-sum pass), the implicit GEMM otherwise, split where K is forced to split: its pieces
// summed by its last piece of each tile, or with MEGANEURA_SPLIT_SUM=dispatch by the split-sum pass.
TEST_F(ConvOpsTest, LowersPointwiseToMatmulAndSplitsK) {
    auto labels = [](const ConvCase& c) {
        Graph g;
        add_conv_and_derivatives(g, c);
        std::vector<int32_t> roots;
        for (const auto& [name, id] : g.outputs()) roots.push_back(id);
        const sched::Schedule s = sched::lower(g, roots, sched::tune_for(device().context()->caps()));
        std::vector<std::string> out;
        for (const sched::Step& step : s.steps) out.push_back(step.kernel.label);
        return out;
    };
    using L = std::vector<std::string>;
    EXPECT_EQ(labels({{2, 8, 5, 5}, {4, 8, 1, 1}, {}, false}), (L{"matmul", "matmul", "matmul", "matmul_split_sum"}));
    EXPECT_EQ(labels({{2, 8, 5, 5}, {4, 8, 1, 1}, {.stride = 2}, false}),
              (L{"conv2d", "conv2d_grad_input", "conv2d_grad_weight"}));
    ScopedEnv forced("MEGANEURA_MATMUL_SPLITS", "2");
    {
        ScopedEnv in_kernels("MEGANEURA_SPLIT_SUM", "product");
        EXPECT_EQ(labels({{2, 8, 5, 5}, {4, 8, 3, 3}, {.padding = 1}, false}), (L{"conv2d", "conv2d_grad_input", "conv2d_grad_weight"}));
    }
    ScopedEnv dispatch("MEGANEURA_SPLIT_SUM", "dispatch");  // the default: a dispatch sums the pieces
    EXPECT_EQ(labels({{2, 8, 5, 5}, {4, 8, 3, 3}, {.padding = 1}, false}),
              (L{"conv2d", "matmul_split_sum", "conv2d_grad_input", "matmul_split_sum", "conv2d_grad_weight",
                 "matmul_split_sum"}));
}

TEST_F(ConvOpsTest, Conv1dMatchesReference) {
    Graph g;
    Tensor x = g.input("x", {2, 6, 23});
    g.output("y", g.conv1d(x, g.input("w", {4, 3, 5}), g.input("b", {4}), {.stride = 2, .padding = 2, .groups = 2}));
    g.output("dilated", g.conv1d(x, g.input("w2", {3, 6, 3}), std::nullopt, {.padding = 1, .dilation = 3}));
    expect_matches_reference(g, random_feeds(g, 7));
}

TEST_F(ConvOpsTest, PoolingAndUpsamplingMatchReference) {
    Graph g;
    Tensor x = g.input("x", {2, 3, 11, 9});
    g.output("max3", g.max_pool2d(x, 3, 2, 1));
    g.output("max2", g.max_pool2d(x, 2));
    g.output("avg", g.avg_pool2d(x, 3, 2, 1));
    g.output("global", g.global_avg_pool2d(x));
    g.output("up", g.upsample_nearest2x(x));
    expect_matches_reference(g, random_feeds(g, 8));
}

// Equal maxima: the gradient goes to the window's first one only (PyTorch's choice), once.
TEST_F(ConvOpsTest, MaxPoolBackwardFollowsTheFirstArgmax) {
    Graph g;
    Tensor x = g.input("x", {1, 1, 4, 4});
    g.output("gx", g.max_pool2d_grad(x, g.input("gy", {1, 1, 2, 2}), 2, 2, 0));
    ref::Feeds feeds{{"x", {{1, 1, 4, 4}, std::vector<double>(16, 1.0)}}, {"gy", {{1, 1, 2, 2}, {1, 2, 3, 4}}}};
    const auto want = ref::evaluate(g, feeds)[static_cast<size_t>(g.outputs()[0].second)].data;
    EXPECT_EQ(want, (std::vector<double>{1, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4, 0, 0, 0, 0, 0}));
    expect_matches_reference(g, feeds);
}

// Training-mode batch norm assigns momentum-updated running stats (unbiased variance).
TEST_F(ConvOpsTest, BatchNormUpdatesRunningStats) {
    Graph g;
    const Shape xs{3, 4, 5, 3};
    Tensor mean = g.state("bn.running_mean", {4});
    Tensor var = g.state("bn.running_var", {4});
    g.output("y", g.batch_norm(g.input("x", xs), g.input("w", {4}), g.input("b", {4}), mean, var, true, 0.1));
    ref::Feeds feeds = random_feeds(g, 9);
    feeds["bn.running_mean"] = {{4}, {0.5, -1, 0, 2}};
    feeds["bn.running_var"] = {{4}, {1, 2, 0.5, 3}};
    const auto want = ref::evaluate(g, feeds);
    // the reference of the update, written out: 0.9 * old + 0.1 * batch statistic
    const auto& x = feeds["x"].data;
    for (int64_t c = 0; c < 4; ++c) {
        double sum = 0, sq = 0;
        const int64_t count = 3 * 5 * 3;
        for (int64_t n = 0; n < 3; ++n)
            for (int64_t i = 0; i < 15; ++i) sum += x[static_cast<size_t>((n * 4 + c) * 15 + i)];
        const double m = sum / count;
        for (int64_t n = 0; n < 3; ++n)
            for (int64_t i = 0; i < 15; ++i) sq += std::pow(x[static_cast<size_t>((n * 4 + c) * 15 + i)] - m, 2);
        for (const Node& node : g.nodes()) {
            if (node.op != Op::Assign) continue;
            const auto& got = want[static_cast<size_t>(&node - g.nodes().data())].data;
            const bool is_mean = g.node(node.inputs[0]).name == "bn.running_mean";
            const double old = feeds[g.node(node.inputs[0]).name].data[static_cast<size_t>(c)];
            EXPECT_NEAR(got[static_cast<size_t>(c)], 0.9 * old + 0.1 * (is_mean ? m : sq / (count - 1)), 1e-12);
        }
    }
    CompileOptions options;
    options.poison_outputs = true;
    Session s = compile(g, device(), options);
    set_feeds(s, g, feeds);
    s.run();
    for (const Node& node : g.nodes()) {
        if (node.op != Op::Assign) continue;
        const std::string& name = g.node(node.inputs[0]).name;
        EXPECT_LE(relative_l2(s.get(name), want[static_cast<size_t>(&node - g.nodes().data())].data), 1e-6) << name;
    }
    EXPECT_LE(relative_l2(s.get("y"), want[static_cast<size_t>(g.outputs()[0].second)].data), 1e-5);
}

// GroupNorm and its d / d x against float64: odd sizes, groups dividing the channels, batch > 1, rows longer
// than any workgroup, groups of one element, no pixels at all, and rows offset from 0 (the two-pass mean).
TEST_F(ConvOpsTest, GroupNormAndItsInputGradientMatchReference) {
    const std::vector<std::tuple<Shape, int64_t, double>> cases = {
        {{2, 6, 5, 7}, 3, 0.0}, {{3, 10, 9}, 5, 0.0}, {{2, 35, 3, 11}, 7, 0.0}, {{2, 8, 33, 17}, 2, 3.0},
        {{1, 4, 1, 1}, 4, 0.0}, {{3, 12}, 4, 0.0}, {{2, 6, 5, 7}, 1, 100.0}};
    uint64_t seed = 700;
    for (const auto& [xs, groups, offset] : cases) {
        SCOPED_TRACE(shape_str(xs) + " groups " + std::to_string(groups) + " offset " + std::to_string(offset));
        Graph g;
        Tensor x = g.input("x", xs) + offset;
        Tensor w = g.input("w", {xs[1]}), b = g.input("b", {xs[1]});
        g.output("y", g.group_norm(x, groups, w, b, 1e-5));
        g.output("dx", g.group_norm_grad(x, groups, w, g.input("up", xs), 1e-5));
        expect_matches_reference(g, random_feeds(g, seed++), 2e-5);
    }
}

// The GroupNorm node against its definition in primitives (the composition it was before it had a node), both
// in float64: the reference's channel map, and the node's VJP rule against the primitives' own rules.
TEST(GroupNormReference, NodeMatchesItsCompositionOfPrimitives) {
    const Shape xs{2, 6, 5, 3};
    Graph g;
    Tensor x = g.parameter("x", xs), w = g.parameter("w", {6}), b = g.parameter("b", {6});
    Tensor up = g.input("up", xs);
    Tensor grouped = g.reshape(x, {2, 3, -1});
    Tensor centered = grouped - g.mean(grouped, {2}, true);
    Tensor normalized = g.reshape(centered * g.rsqrt(g.mean(centered * centered, {2}, true) + 1e-5), xs);
    Tensor composed = normalized * g.reshape(w, {1, 6, 1, 1}) + g.reshape(b, {1, 6, 1, 1});
    Tensor node = g.group_norm(x, 3, w, b, 1e-5);
    const std::vector<Tensor> want = grad(g.sum(composed * up), {x, w, b});
    const std::vector<Tensor> got = grad(g.sum(node * up), {x, w, b});
    const ref::Feeds feeds = random_feeds(g, 800);
    const auto values = ref::evaluate(g, feeds);
    auto at = [&](Tensor t) { return values[static_cast<size_t>(t.id)].data; };
    auto expect_near = [](const std::vector<double>& a, const std::vector<double>& b, const char* what) {
        ASSERT_EQ(a.size(), b.size()) << what;
        for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12) << what << "[" << i << "]";
    };
    expect_near(at(node), at(composed), "y");
    expect_near(at(got[0]), at(want[0]), "dx");
    expect_near(at(got[1]), at(want[1]), "dw");
    expect_near(at(got[2]), at(want[2]), "db");
    // grad's d / d x is the GroupNormGrad node
    EXPECT_EQ(g.node(got[0]).op, Op::GroupNormGrad);
}

TEST(ConvErrors, ShapesAreCheckedAtBuildTime) {
    Graph g;
    Tensor x = g.input("x", {2, 4, 8, 8});
    EXPECT_NE(error_of([&] { g.conv2d(x, g.input("w1", {6, 3, 3, 3})); }).find("[conv2d]"), std::string::npos);
    EXPECT_NE(error_of([&] { g.conv2d(x, g.input("w2", {6, 2, 3, 3}), std::nullopt, {.groups = 3}); }).find("groups"),
              std::string::npos);
    EXPECT_NE(error_of([&] { g.conv2d(x, g.input("w3", {6, 4, 9, 9})); }).find("does not fit"), std::string::npos);
    EXPECT_NE(error_of([&] { g.conv2d(x, g.input("w4", {6, 4, 3, 3}), g.input("b4", {5})); }).find("bias"), std::string::npos);
    EXPECT_NE(error_of([&] { g.conv1d(x, g.input("w5", {6, 4, 3})); }).find("[conv1d]"), std::string::npos);
    EXPECT_NE(error_of([&] { g.conv2d(x, g.input("w6", {6, 4, 3, 3}), std::nullopt, {.stride = 0}); }).find("stride"),
              std::string::npos);
    EXPECT_NE(error_of([&] { g.max_pool2d(x, 3, 1, 2); }).find("[max_pool2d]"), std::string::npos);
    EXPECT_NE(error_of([&] { g.group_norm(x, 3, g.input("gw", {4}), g.input("gb", {4})); }).find("groups"), std::string::npos);
    EXPECT_EQ(error_of([&] { g.group_norm(x, 2, g.input("gw2", {3}), g.input("gb2", {4})); }),
              "[group_norm] x is (2,4,8,8), a per-channel tensor is (3)");
    EXPECT_EQ(error_of([&] { g.group_norm_grad(x, 2, g.input("gw3", {4}), g.input("up3", {2, 4, 8}), 1e-5); }),
              "[group_norm_grad] x is (2,4,8,8), upstream is (2,4,8): expected x's shape");
    EXPECT_NE(error_of([&] { g.batch_norm(x, g.input("bw", {3}), g.input("bb", {3}), std::nullopt, std::nullopt, true); })
                  .find("[batch_norm]"),
              std::string::npos);
}

}  // namespace
}  // namespace mn::test
