// The matmul kernels (tiled f32 at every tile geometry, GEMV, cooperative matrix) against the
// float64 reference at odd shapes (1, 7, 33, 50, 129: multiples of no tile), both transposes,
// broadcast batch dims, and shapes whose rows allow 16-byte access; outputs NaN-poisoned.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "codegen/families.hpp"
#include "codegen/shader_compiler.hpp"
#include "common/caps_profiles.hpp"
#include "compiler/coop_self_test.hpp"
#include "compiler/program_kernels.hpp"
#include "error_of.hpp"
#include "gpu_check.hpp"
#include "temp_dir.hpp"
#include "meganeura/autodiff.hpp"
#include "schedule/schedule.hpp"

namespace mn::test {
namespace {

using MatmulTest = GpuTest;

struct Case {
    Shape a, b;
    bool ta = false, tb = false;
};

// Shapes the tiled and cooperative kernels see (M, N > 1).
const std::vector<Case> kTiled = {
    {{129, 33}, {33, 50}},
    {{33, 129}, {33, 50}, true, false},
    {{129, 50}, {7, 50}, false, true},
    {{50, 129}, {33, 50}, true, true},
    {{2, 3, 33, 50}, {3, 50, 7}},              // broadcast batch dims
    {{3, 50, 33}, {3, 129, 50}, true, true},   // batched, both transposed
    {{64, 128}, {128, 132}},                   // 16-byte rows everywhere
    {{128, 68}, {128, 36}, true, false},       // 16-byte rows of A^T
    {{2, 36, 96}, {2, 100, 96}, false, true},  // 16-byte rows of B^T, batched
};

// M == 1 or N == 1: the GEMV kernel, in both of its layouts.
const std::vector<Case> kGemv = {
    {{1, 1}, {1, 1}},
    {{1, 129}, {129, 50}},
    {{1, 128}, {33, 128}, false, true},  // 16-byte rows of B^T (a linear layer's decode)
    {{1, 129}, {50, 129}, false, true},
    {{129, 1}, {129, 7}, true, false},
    {{129, 33}, {33, 1}},
    {{33, 129}, {33, 1}, true, false},
    {{3, 1, 64}, {3, 64, 7}},
    {{2, 7, 50}, {2, 1, 50}, false, true},
    // K long enough for several unrolled iterations per thread and 64-256 threads per output
    {{1, 2100}, {2100, 37}},
    {{1, 2052}, {70, 2052}, false, true},
    {{1, 9000}, {3, 9000}, false, true},
    {{2051, 1}, {2051, 5}, true, false},
};

// Every cooperative tile the tests force (MEGANEURA_COOP_TILE: bm,bn,wm,wn,bk,stages): one and two
// stages, 16- to 64-wide subgroup pieces, 32- and 64-deep slices.
const std::vector<const char*> kCoopTiles = {"128,128,64,32,32,2", "128,128,64,64,32,2", "128,256,64,64,32,1",
                                             "64,64,32,32,32,2",   "128,128,64,32,64,1", "32,32,16,16,32,2",
                                             "128,64,32,32,32,1", "64,128,32,32,32,1"};

// Long K with few output tiles: where the device is large, the heuristic splits K.
const std::vector<Case> kLongK = {
    {{7, 1000}, {1000, 9}},
    {{1000, 33}, {1000, 50}, true, false},
    {{50, 2048}, {36, 2048}, false, true},
};


void check_cases(const std::vector<Case>& cases, uint64_t seed, double tol, CompileOptions options = {},
                 DType dtype = DType::F32) {
    for (const auto& c : cases) {
        SCOPED_TRACE(shape_str(c.a) + (c.ta ? "^T" : "") + " @ " + shape_str(c.b) + (c.tb ? "^T" : ""));
        Graph g;
        g.output("c", g.matmul(g.input("a", c.a, dtype), g.input("b", c.b, dtype), c.ta, c.tb));
        expect_matches_reference(g, random_feeds(g, seed++), tol, options);
    }
}

// Every tile the device may choose and the stages, K-slices and thread tiles that can be forced (lavapipe's 32 KiB
// take the 128-high tiles in one stage; 64 and 32 in two stages show the staging there), each with A and B^T staged
// in rows (their columns' slots turned within 2, 4 and 8 vec4s a row: 8-, 16- and 32-deep slices).
TEST_F(MatmulTest, TiledEveryGeometry) {
    for (const char* bm : {"", "128", "128x64", "128x64/32", "128/8:2", "64", "64:2", "32", "32/32:2", "128@16x8", "128@8x16",
                           "64@4x8"}) {
        SCOPED_TRACE(std::string("tile ") + (*bm ? bm : "chosen"));
        ScopedEnv forced("MEGANEURA_MATMUL_TILE", bm);
        check_cases(kTiled, 4000, 1e-5);
    }
}

// Both ways of adding an output's k-slices: in subgroups where the device has subgroup arithmetic at a required size
// (MatmulTuning::sum_subgroup; lavapipe's 8), and the shared-memory tree.
TEST_F(MatmulTest, Gemv) {
    for (const char* sum : {"subgroup", "tree"}) {
        SCOPED_TRACE(std::string("MEGANEURA_GEMV_SUM=") + sum);
        ScopedEnv forced("MEGANEURA_GEMV_SUM", sum);
        check_cases(kGemv, 4100, 1e-5);
    }
}


// Split-K: forced into 3 pieces (the last one short, K not a multiple of the piece), also with
// the largest tile, and as the heuristic chooses (no split on a CPU driver). An f16 product's pieces
// are summed in f32 and rounded to f16 once (the reference multiplies the same f16 values: the error
// is that rounding, 2^-11 relative at most).
TEST_F(MatmulTest, SplitK) {
    for (const char* splits : {"3", ""}) {
        SCOPED_TRACE(std::string("splits ") + (*splits ? splits : "chosen"));
        ScopedEnv forced("MEGANEURA_MATMUL_SPLITS", splits);
        check_cases(kTiled, 4500, 1e-5);
        check_cases(kLongK, 4600, 1e-5);
        check_cases(kLongK, 4650, 2e-3, {}, DType::F16);
    }
    ScopedEnv splits("MEGANEURA_MATMUL_SPLITS", "3"), tile("MEGANEURA_MATMUL_TILE", "128");
    check_cases(kLongK, 4700, 1e-5);
}

// Split-K's pieces summed by the product's last piece of each tile (MatmulKernels::tile_counters) against their sum's
// own dispatch (MEGANEURA_SPLIT_SUM=dispatch): the same additions in the same order, so the same bits, and again on
// the second and third runs (each tile's counter is zero again after a dispatch). A batched product with B transposed
// and rows of 41 (scalar sums, tiles past the edges), a linear layer's epilogue (vec4 sums), a SwiGLU's pair (one
// product kernel over both weights), a sum of two products of different operands (one kernel over both A's and B's:
// MatmulSpec::a2, as a SwiGLU's backward's dU Wu + dG Wg), an f16 product and a strided convolution's implicit GEMM
// with its ReLU.
TEST_F(MatmulTest, PiecesSummedInTheProductMatchTheirSumsBitForBit) {
    const ScopedEnv splits("MEGANEURA_MATMUL_SPLITS", "3");
    Graph g;
    g.output("batched", g.matmul(g.input("a", {3, 37, 70}), g.input("b", {3, 41, 70}), false, true));
    const Tensor x = g.input("x", {2, 9, 96});
    g.output("linear", g.gelu(g.linear(x, g.parameter("w", {40, 96}), g.parameter("bias", {40}))));
    const Tensor gate = g.linear(x, g.parameter("gate.weight", {36, 96})), up = g.linear(x, g.parameter("up.weight", {36, 96}));
    g.output("swiglu", g.silu(gate) * up);
    g.output("sum", g.matmul(g.input("d1", {9, 44}), g.input("w1", {44, 30})) + g.matmul(g.input("d2", {9, 44}), g.input("w2", {44, 30})));
    g.output("f16", g.matmul(g.input("h", {33, 80}, DType::F16), g.input("k", {80, 20}, DType::F16)));
    g.output("conv", g.relu(g.conv2d(g.input("image", {2, 8, 9, 9}), g.input("filter", {5, 8, 3, 3}), std::nullopt,
                                     {.stride = 2, .padding = 1})));
    const ref::Feeds feeds = random_feeds(g, 4900);
    constexpr const char* kOutputs[] = {"batched", "linear", "swiglu", "sum", "f16", "conv"};
    constexpr size_t kCount = std::size(kOutputs);
    std::map<std::string, std::vector<std::vector<float>>> runs;  // by where the sum is: each output, three runs
    std::map<std::string, size_t> dispatches;
    for (const char* where : {"product", "dispatch"}) {
        const ScopedEnv sum("MEGANEURA_SPLIT_SUM", where);
        Session s = compile(g, device());
        dispatches[where] = s.stats().dispatches;
        set_feeds(s, g, feeds);
        for (int run = 0; run < 3; ++run) {
            s.run();
            for (const char* out : kOutputs) runs[where].push_back(s.get(out));
        }
    }
    EXPECT_EQ(dispatches["product"], 6u);    // a product each
    EXPECT_EQ(dispatches["dispatch"], 14u);  // and a sum each, each pair's two products one sum
    ASSERT_EQ(runs["product"].size(), runs["dispatch"].size());
    for (size_t i = 0; i < runs["product"].size(); ++i) {
        const std::vector<float>& a = runs["product"][i];
        const std::vector<float>& b = runs["dispatch"][i];
        ASSERT_EQ(a.size(), b.size());
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << kOutputs[i % kCount] << ", run " << i / kCount;
    }
    expect_matches_reference(g, feeds, 2e-3);  // f16's rounding
}

// K long enough (1.2M slices of 16 would be 75,000 iterations of the tiled kernel's main loop) that
// one invocation would pass llvmpipe's 65,535-iteration limit, which ends it silently (see
// DeviceCaps::max_loop_iterations; unsplit, 30-40% of the result went missing). Summing 1.2M f32
// terms in sequence carries about 2^-24 * sqrt(K) = 6.5e-5 relative error, so the bound is 1e-4.
TEST_F(MatmulTest, VeryLongK) {
    check_cases({{{4, 1200000}, {1200000, 3}}, {{1200000, 5}, {1200000, 2}, true, false}, {{1, 1200000}, {2, 1200000}, false, true}},
                4800, 1e-4);
}

// Precision Fast: where the device has NV f16 cooperative matrices, matmuls run on them with f16
// operands and f32 accumulation. Rounding an operand to f16 has relative error <= 2^-11 (4.9e-4),
// so each product a*b carries about sqrt(2) * 4.9e-4 = 7e-4 relative error, uncorrelated across
// the terms of the sum; the relative L2 of the result is then about 7e-4 for random inputs, and
// f32 accumulation adds ~1e-7 * sqrt(K). 2e-3 leaves a factor ~3. Elsewhere Fast must fall back to
// the f32 kernels and match like Strict.
TEST_F(MatmulTest, FastPrecision) {
    const bool coop = coop_device();
    const double tol = coop ? 2e-3 : 1e-5;
    CompileOptions fast;
    fast.precision = Precision::Fast;
    for (const char* bm : {"", "128", "64", "32"}) {
        SCOPED_TRACE(std::string("tile ") + (*bm ? bm : "chosen"));
        ScopedEnv forced("MEGANEURA_MATMUL_TILE", bm);
        check_cases(kTiled, 4200, tol, fast);
    }
    for (const char* tile : kCoopTiles) {
        SCOPED_TRACE(std::string("cooperative tile ") + tile);
        ScopedEnv forced("MEGANEURA_COOP_TILE", tile);
        check_cases(kTiled, 4250, tol, fast);
        // f16 operands and output (on cooperative matrices, rows of whole 16 bytes are staged as they
        // are): the reference multiplies the same f16 values, so the error is the output's rounding to
        // f16, relative 2^-11 per element at most, on either kernel.
        check_cases(kTiled, 4270, 2e-3, fast, DType::F16);
    }
    check_cases(kGemv, 4300, 1e-5, fast);  // M or N == 1 stays on the f32 GEMV
    check_cases(kLongK, 4310, tol, fast);
    ScopedEnv forced("MEGANEURA_MATMUL_SPLITS", "3");
    check_cases(kTiled, 4320, tol, fast);
    check_cases(kTiled, 4330, 2e-3, fast, DType::F16);
}

// The cooperative kernel really runs where the device has it, and never where it does not.
TEST_F(MatmulTest, FastSelectsCooperativeKernelOnlyWhereAvailable) {
    Graph g;
    g.output("c", g.matmul(g.input("a", {33, 50}), g.input("b", {50, 7})));
    CompileOptions fast;
    fast.precision = Precision::Fast;
    fast.profile = true;
    if (!device().context()->caps().timestamps) GTEST_SKIP() << "no timestamps to read kernel labels from";
    Session s = compile(g, device(), fast);
    set_feeds(s, g, random_feeds(g, 4400));
    s.run();
    const auto times = s.profile();
    ASSERT_EQ(times.size(), 1u);
    EXPECT_EQ(times[0].first, coop_device() ? "matmul_coop" : "matmul");
}

// The start-up check passes on this device (where it has no cooperative matrices, precision fast
// is f32 and the check trivially so); its verdict is kept for the next process, which takes it as the
// device's (a failure written there too) and checks again where the file is no verdict; a device
// whose check failed compiles fast programs on the f32 kernels.
TEST_F(MatmulTest, CooperativeSelfTest) {
    rt::Context& ctx = *device().context();
    const sched::CoopPath path = sched::tune_for(ctx.caps(), Precision::Fast).coop.path;
    const std::string name = sched::coop_path_name(path);
    const std::map<std::string, bool> before = ctx.cooperative_matrices_work;
    const TempDir cache("coop_check");
    const ScopedEnv cache_env("MEGANEURA_CACHE_DIR", cache.dir().string());
    ctx.cooperative_matrices_work.clear();
    EXPECT_TRUE(compiler::cooperative_matrices_work(device(), path));
    EXPECT_EQ(ctx.cooperative_matrices_work, (std::map<std::string, bool>{{name, true}}));
    const std::vector<std::filesystem::path> files(std::filesystem::directory_iterator(cache.dir() / "coop-check"), {});
    ASSERT_EQ(files.size(), 1u);
    EXPECT_EQ(compiler::read_check_verdict(files[0].string()), "");

    compiler::write_check_verdict(files[0].string(), "computed a test product 1 off (limit 1e-02)");
    ctx.cooperative_matrices_work.clear();
    testing::internal::CaptureStderr();
    EXPECT_FALSE(compiler::cooperative_matrices_work(device(), path));
    const std::string warning = testing::internal::GetCapturedStderr();
    EXPECT_NE(warning.find("computed a test product 1 off (limit 1e-02); precision fast uses the f32 kernels (with "),
              std::string::npos);
    EXPECT_NE(warning.find("MEGANEURA_CACHE_DIR=" + cache.dir().string()), std::string::npos);  // the settings it ran with
    std::ofstream(files[0]) << "ok, or so\n";
    EXPECT_EQ(compiler::read_check_verdict(files[0].string()), std::nullopt);
    ctx.cooperative_matrices_work.clear();
    EXPECT_TRUE(compiler::cooperative_matrices_work(device(), path));
    EXPECT_EQ(compiler::read_check_verdict(files[0].string()), "");
    if (!device().context()->caps().timestamps) GTEST_SKIP() << "no timestamps to read kernel labels from";
    ctx.cooperative_matrices_work[name] = false;
    Graph g;
    g.output("c", g.matmul(g.input("a", {33, 50}), g.input("b", {50, 7})));
    CompileOptions fast;
    fast.precision = Precision::Fast;
    fast.profile = true;
    Session s = compile(g, device(), fast);
    ctx.cooperative_matrices_work = before;
    set_feeds(s, g, random_feeds(g, 4410));
    s.run();
    EXPECT_EQ(s.profile().at(0).first, "matmul");
}

// A device's first fast compile runs the start-up check beside itself (its "check" pass is the wait for it),
// on the cooperative kernels, and takes the verdict the check leaves: here a pass, written to the cache folder.
TEST_F(MatmulTest, CooperativeCheckRunsBesideTheFirstFastCompile) {
    if (!coop_device()) GTEST_SKIP() << "no cooperative matrices: precision fast never checks them";
    rt::Context& ctx = *device().context();
    const std::string name = sched::coop_path_name(sched::tune_for(ctx.caps(), Precision::Fast).coop.path);
    const std::map<std::string, bool> before = ctx.cooperative_matrices_work;
    const TempDir cache("coop_check_beside");
    const ScopedEnv cache_env("MEGANEURA_CACHE_DIR", cache.dir().string());
    ctx.cooperative_matrices_work.clear();
    Graph g;
    g.output("c", g.matmul(g.input("a", {70, 200}), g.input("b", {200, 72})));
    CompileOptions fast;
    fast.precision = Precision::Fast;
    fast.profile = ctx.caps().timestamps;
    Session s = compile(g, device(), fast);
    const std::map<std::string, bool> verdicts = ctx.cooperative_matrices_work;
    ctx.cooperative_matrices_work = before;
    EXPECT_EQ(verdicts, (std::map<std::string, bool>{{name, true}}));
    const std::vector<std::filesystem::path> files(std::filesystem::directory_iterator(cache.dir() / "coop-check"), {});
    ASSERT_EQ(files.size(), 1u);
    EXPECT_EQ(compiler::read_check_verdict(files[0].string()), "");
    const auto& passes = s.stats().pass_ms;
    EXPECT_TRUE(std::any_of(passes.begin(), passes.end(), [](const auto& p) { return p.first == "check"; }));
    const ref::Feeds feeds = random_feeds(g, 4420);
    set_feeds(s, g, feeds);
    s.run();
    EXPECT_LE(relative_l2(s.get("c"), ref::evaluate(g, feeds)[static_cast<size_t>(g.outputs()[0].second)].data), 2e-3);
    if (fast.profile) EXPECT_EQ(s.profile().at(0).first, "matmul_coop");
}

// The tuning the choice tests give the kernel families: the H200's compute units, `shared_memory` bytes of
// shared memory, cooperative matrices on subgroups of `coop_subgroup` (0: none).
codegen::MatmulTuning choice_tuning(uint32_t shared_memory, uint32_t coop_subgroup = 0) {
    codegen::MatmulTuning t;
    t.compute_units = 132;
    t.max_shared_memory = shared_memory;
    t.coop_subgroup = coop_subgroup;
    return t;
}

// Every matmul kernel says which variant it is and why the others declined (MEGANEURA_DEBUG=1).
TEST(MatmulChoice, SaysWhyEachVariantDeclines) {
    const codegen::MatmulSpec spec{.dtype = DType::F32, .m = 512, .n = 512, .k = 512};
    codegen::MatmulTuning t = choice_tuning(16 * 1024);
    std::string choice = codegen::matmul_kernels(spec, t).product.choice;
    EXPECT_NE(choice.find("tiled f32 (cooperative declined: precision strict)"), std::string::npos) << choice;
    EXPECT_NE(choice.find("128x128: exceeds the device's shared memory"), std::string::npos) << choice;
    t.coop_subgroup = 32;
    t.max_shared_memory = 40000;
    choice = codegen::matmul_kernels(spec, t).product.choice;
    EXPECT_EQ(choice.rfind("cooperative ", 0), 0u) << choice;
    EXPECT_NE(choice.find("128x128x64/1: exceeds the device's shared memory"), std::string::npos) << choice;
    EXPECT_EQ(choice.rfind("cooperative 128x64x32/1 (by size;", 0), 0u) << choice;  // 2^27 multiply-adds
    const codegen::MatmulSpec small{.dtype = DType::F32, .m = 64, .n = 64, .k = 64};
    choice = codegen::matmul_kernels(small, t).product.choice;
    EXPECT_NE(choice.find("128x64x32/1: for products of 2^27 multiply-adds or more"), std::string::npos) << choice;
    EXPECT_EQ(choice.rfind("cooperative 32x32x32/2", 0), 0u) << choice;
    const codegen::MatmulSpec mid{.dtype = DType::F32, .m = 256, .n = 512, .k = 512};  // 2^26 multiply-adds
    choice = codegen::matmul_kernels(mid, t).product.choice;
    EXPECT_EQ(choice.rfind("cooperative 64x64x32/2 (by size;", 0), 0u) << choice;
    // An f16 product whose few tiles leave the device empty splits K too: f32 pieces (binding c), summed into f16 by a
    // dispatch of their own, even where the tuning asks the last piece of each tile to (pieces_summed_in_product):
    // the cooperative kernels' f16 sums in the product have not run on a device.
    const codegen::MatmulSpec f16_long{.dtype = DType::F16, .m = 128, .n = 576, .k = 49152};
    t.pieces_summed_in_product = true;
    const auto split = codegen::matmul_kernels(f16_long, t);
    EXPECT_NE(split.product.choice.find("K split in pieces of"), std::string::npos) << split.product.choice;
    EXPECT_NE(split.product.choice.find("summed by a dispatch: an f16 cooperative product's own sum has not run on a device"),
              std::string::npos) << split.product.choice;
    ASSERT_TRUE(split.sum.has_value());
    EXPECT_EQ(split.tile_counters, 0);
    EXPECT_EQ(split.product.iface.bindings.back().dtype, DType::F32);
    EXPECT_EQ(split.sum->iface.bindings.back().dtype, DType::F16);
    const codegen::MatmulSpec gemv{.dtype = DType::F32, .m = 1, .n = 512, .k = 512};
    EXPECT_EQ(codegen::matmul_kernels(gemv, t).product.choice.rfind("gemv: M or N is 1", 0), 0u);
}

// The GEMV adds in subgroups only where an output's k-slices are neighbours (W contiguous along k, at least 32 of them)
// and the tuning has a subgroup size; it requires that size of the pipeline.
TEST(MatmulChoice, TheGemvSumsInSubgroupsWhereItsSlicesAreNeighbours) {
    codegen::MatmulTuning t = choice_tuning(48 * 1024);
    const codegen::MatmulSpec linear{.dtype = DType::F32, .m = 1, .n = 576, .k = 576, .trans_b = true};
    const codegen::MatmulSpec columns{.dtype = DType::F32, .m = 1, .n = 576, .k = 576};  // W contiguous along j
    for (uint32_t subgroup : {0u, 32u}) {
        t.sum_subgroup = subgroup;
        const codegen::KernelSource k = codegen::matmul_kernels(linear, t).product;
        EXPECT_EQ(k.required_subgroup_size, subgroup);
        EXPECT_NE(k.choice.find(subgroup ? "summed in subgroups of 32" : "summed in a shared-memory tree"), std::string::npos) << k.choice;
        const codegen::KernelSource c = codegen::matmul_kernels(columns, t).product;
        EXPECT_EQ(c.required_subgroup_size, 0u);
        EXPECT_NE(c.choice.find("summed in a shared-memory tree"), std::string::npos) << c.choice;
    }
    // 256 threads in subgroups of 8 are 32 subgroups: a device that allows 16 a workgroup gets the tree.
    t.sum_subgroup = 8;
    t.max_subgroups = 16;
    EXPECT_EQ(codegen::matmul_kernels(linear, t).product.required_subgroup_size, 0u);
    t.max_subgroups = 32;
    EXPECT_EQ(codegen::matmul_kernels(linear, t).product.required_subgroup_size, 8u);
}

// The f32 128x64 tile runs only where MEGANEURA_MATMUL_TILE forces it: its kernels are faster on 128-row
// products, the programs slower (SmolLM2's strict training on the H200).
TEST(MatmulChoice, TheTiled128x64IsTakenOnlyWhereForced) {
    const codegen::MatmulSpec mlp{.dtype = DType::F32, .m = 128, .n = 1536, .k = 576};
    codegen::MatmulTuning t = choice_tuning(48 * 1024);
    std::string choice = codegen::matmul_kernels(mlp, t).product.choice;
    EXPECT_NE(choice.find("128x64: only where forced"), std::string::npos) << choice;
    EXPECT_EQ(choice.find(") 128x64 ("), std::string::npos) << choice;
    t.forced_bm = 128;
    t.forced_bn = 64;
    choice = codegen::matmul_kernels(mlp, t).product.choice;
    EXPECT_NE(choice.find(") 128x64 (128x128: not the forced height; 128x64: forced"), std::string::npos) << choice;
}

// Split-K fills the device in whole rounds of the workgroups its units hold: ResNet-50's 3x3 convolutions at batch 4
// (26 tiles of 128 x 64, two a unit on the H200) take 9 pieces (234 workgroups, one round of 264), not the 11 that
// two workgroups a unit asks for (286: a second round nearly empty). A tile that units hold more of keeps the most
// pieces (SmolVLA's 32 x 32 tiles: 276 workgroups run in one round).
TEST(MatmulChoice, SplitKFillsWholeRoundsOfResidentWorkgroups) {
    const codegen::MatmulTuning t = choice_tuning(48 * 1024, 32);
    const auto grid_of = [](const codegen::KernelSource& k) { return k.groups[0] * k.groups[1] * k.groups[2]; };
    const codegen::MatmulSpec conv3x3{.dtype = DType::F32, .m = 256, .n = 13 * 64, .k = 2304};
    const codegen::MatmulKernels wide = codegen::matmul_kernels(conv3x3, t);
    EXPECT_EQ(wide.product.choice.rfind("cooperative 128x64x32/1", 0), 0u) << wide.product.choice;
    EXPECT_NE(wide.product.choice.find("K split in pieces of 256;"), std::string::npos) << wide.product.choice;
    EXPECT_EQ(grid_of(wide.product), 26u * 9u);
    const codegen::MatmulSpec small{.dtype = DType::F32, .m = 50, .n = 720, .k = 960};
    const codegen::MatmulKernels narrow = codegen::matmul_kernels(small, t);
    EXPECT_EQ(narrow.product.choice.rfind("cooperative 32x32x32/2", 0), 0u) << narrow.product.choice;
    EXPECT_NE(narrow.product.choice.find("K split in pieces of 160;"), std::string::npos) << narrow.product.choice;
    EXPECT_EQ(grid_of(narrow.product), 2u * 23u * 6u);
}

// A tile taken by size is transposed where that pads C less: ResNet-50's first convolutions have 64
// output rows, which a 128-row tile would pad to 128.
TEST(MatmulChoice, TransposesATileThatPadsLess) {
    const codegen::MatmulTuning t = choice_tuning(48 * 1024, 32);
    const codegen::MatmulSpec narrow{.dtype = DType::F32, .m = 64, .n = 12544, .k = 576};
    std::string choice = codegen::matmul_kernels(narrow, t).product.choice;
    EXPECT_EQ(choice.rfind("cooperative 64x128x32/1 (by size;", 0), 0u) << choice;
    EXPECT_NE(choice.find("taken, transposed: it pads C less"), std::string::npos) << choice;
    const codegen::MatmulSpec tall{.dtype = DType::F32, .m = 12544, .n = 64, .k = 576};
    EXPECT_EQ(codegen::matmul_kernels(tall, t).product.choice.rfind("cooperative 128x64x32/1 (by size;", 0), 0u);
    // Padded alike both ways (1500 rows: 12 tiles of 128 or 24 of 64): the tile as listed.
    const codegen::MatmulSpec even{.dtype = DType::F32, .m = 1500, .n = 384, .k = 1536};
    EXPECT_EQ(codegen::matmul_kernels(even, t).product.choice.rfind("cooperative 128x64x32/1 (by size;", 0), 0u);
}

// Every case of kTiled, unbatched, as a product of `dtype` at this tuning: its kernel is `label`,
// requires subgroups of 32, and compiles with glslang.
void expect_coop_sources_compile(const codegen::MatmulTuning& tuning, DType dtype, const std::string& label) {
    for (const auto& c : kTiled) {
        const codegen::MatmulSpec spec{.dtype = dtype, .m = c.ta ? c.a.back() : c.a[c.a.size() - 2],
                                       .n = c.tb ? c.b[c.b.size() - 2] : c.b.back(),
                                       .k = c.ta ? c.a[c.a.size() - 2] : c.a.back(), .trans_a = c.ta,
                                       .trans_b = c.tb, .a_batch_strides = {}, .b_batch_strides = {}};
        const auto k = codegen::matmul_kernels(spec, tuning).product;
        EXPECT_EQ(k.label, label);
        EXPECT_EQ(k.required_subgroup_size, 32u);
        EXPECT_NO_THROW(codegen::compile_glsl(k.glsl, {.vulkan_minor = 3}));
    }
}

// The cooperative kernel's GLSL compiles for every transpose and alignment variant and every tile,
// f32 and f16 operands (f16 rows of whole 16 bytes are fetched as they are), scaled and split, also
// where no device can run it (CI), so a broken shader is caught before it reaches a GPU.
TEST(MatmulCoopSource, CompilesWithGlslang) {
    auto h200_like = [] {
        codegen::MatmulTuning tuning = sched::tune_for(device().context()->caps(), Precision::Fast).matmul;
        tuning.max_shared_memory = 48 * 1024;
        tuning.coop_subgroup = 32;
        return tuning;
    };
    for (const char* tile : kCoopTiles) {
        for (auto [scaled, dtype] : {std::pair{false, DType::F32}, {true, DType::F32}, {false, DType::F16}}) {
            SCOPED_TRACE(std::string(tile) + (scaled ? " scaled" : "") + " " + dtype_name(dtype));
            ScopedEnv forced("MEGANEURA_COOP_TILE", tile);
            codegen::MatmulTuning tuning = h200_like();
            tuning.coop_scaled = scaled;
            expect_coop_sources_compile(tuning, dtype, scaled ? "matmul_coop_scaled" : "matmul_coop");
        }
    }
    // A pair's one product kernel where K is split and its last piece sums (a second B; and a second A too, a sum of
    // two products: MatmulSpec::a2), f32 and f16 operands (f16 rows of whole 16 bytes: the 8-element loads).
    codegen::PointwiseSpec both{.program = {{Op::Input, 0, -1, DType::F32}, {Op::Input, 1, -1, DType::F32}, {Op::Add, 0, 1, DType::F32}},
                                .in_dtypes = {DType::F32, DType::F32}, .out_dtype = DType::F32, .out_shape = {128, 64},
                                .in_strides = {{}, {}}};
    const codegen::Epilogue sum_of_both{.tree = both, .product = 0, .product2 = 1};
    for (const bool second_a : {false, true}) {
        for (const DType dtype : {DType::F32, DType::F16}) {
            SCOPED_TRACE(std::string(second_a ? "a sum of two products " : "a pair ") + dtype_name(dtype));
            codegen::MatmulSpec spec{.dtype = dtype, .m = 128, .n = 64, .k = 4096, .trans_b = true};
            spec.epilogue = &sum_of_both, spec.b2 = true, spec.a2 = second_a;
            codegen::MatmulTuning tuning = h200_like();
            tuning.forced_splits = 4;
            const auto k = codegen::matmul_kernels(spec, tuning).product;
            EXPECT_NE(k.glsl.find(second_a ? "a28" : "b28"), std::string::npos);
            EXPECT_NO_THROW(codegen::compile_glsl(k.glsl, {.vulkan_minor = 3}));
        }
    }
    // Split products (f32 operands): the tiles chosen by size, and forced ones within 48 KiB with two parts.
    for (const char* tile : {"", "128,64,32,32,32,1", "64,64,32,32,32,2", "32,32,16,16,32,2"}) {
        SCOPED_TRACE(std::string(tile) + " split");
        ScopedEnv forced("MEGANEURA_COOP_TILE", tile);
        codegen::MatmulTuning tuning = h200_like();
        tuning.coop_split = true;
        expect_coop_sources_compile(tuning, DType::F32, "matmul_coop_split");
    }
    // The tiles MEGANEURA_MATMUL_TILE's heights force.
    codegen::MatmulTuning tuning;
    tuning.max_shared_memory = 48 * 1024;
    tuning.coop_subgroup = 32;
    for (uint32_t bm : {128u, 64u, 32u}) {
        SCOPED_TRACE("height " + std::to_string(bm));
        tuning.forced_bm = bm;
        expect_coop_sources_compile(tuning, DType::F32, "matmul_coop");
    }
}

// The labels of g's product kernels (matmuls and convolutions, not split-K sums) as `tuning` lowers
// everything its outputs need.
std::multiset<std::string> product_labels(const Graph& g, const sched::Tuning& tuning) {
    std::vector<int32_t> roots;
    for (const auto& [name, id] : g.outputs()) roots.push_back(id);
    std::multiset<std::string> labels;
    for (const auto& step : sched::lower(g, roots, tuning).steps) {
        const std::string& l = step.kernel.label;
        if ((l.starts_with("matmul") && !l.starts_with("matmul_split_sum")) || l.starts_with("conv2d")) labels.insert(l);
    }
    return labels;
}

// The fast precision's policy (Tuning::fast_gradients, MEGANEURA_FAST_GRADIENTS): forward products
// take f16 cooperative matrices; of the gradient products mn::grad appends, by default (auto) those of
// convolutions and of matmuls of 2^24 multiply-adds or more do, their operands scaled into f16's range
// (gradients underflow f16); f16 puts all of them there, f32 none.
TEST(MatmulPrecisionPolicy, GradientProductsFollowTheFastGradientsPolicy) {
    Graph g;
    Tensor x = g.parameter("x", {2, 8, 10, 10});
    Tensor w3 = g.parameter("w3", {8, 8, 3, 3});
    Tensor w1 = g.parameter("w1", {8, 8, 1, 1});
    Tensor w = g.parameter("w", {16, 800});
    ConvOptions pad;
    pad.padding = 1;
    Tensor h = g.conv2d(g.relu(g.conv2d(x, w3, std::nullopt, pad)), w1);
    Tensor loss = g.mean(g.linear(g.reshape(h, {2, 800}), w));
    for (const Tensor& t : grad(loss, {x, w3, w1, w})) g.output("grad" + std::to_string(t.id), t);
    sched::Tuning tuning;
    tuning.matmul.max_shared_memory = 48 * 1024;
    tuning.matmul.coop_subgroup = 32;  // as on a device with NV cooperative matrices, precision fast
    using FG = sched::Tuning::FastGradients;
    // Forward: the 3x3 convolution, storing its ReLU (whose gradient reads the ReLU's output), and the 1x1
    // one (a matmul); the linear layer's output is read by nothing the outputs need (the mean's gradient
    // does not depend on it).
    const std::multiset<std::string> forward = {"conv2d_coop+relu", "matmul_coop"};
    auto with = [&](std::multiset<std::string> backward) {
        backward.insert(forward.begin(), forward.end());
        return backward;
    };
    // Backward: the linear layer's dx and dW (matmuls under 2^24 multiply-adds: f32 by default), the 1x1's
    // input and weight gradients (matmuls, but a convolution's; the input gradient stores the ReLU's gradient
    // through its mask), the 3x3's.
    EXPECT_EQ(product_labels(g, tuning), with({"matmul", "matmul", "matmul_coop_scaled+greater+mul", "matmul_coop_scaled",
                                            "conv2d_grad_input_coop_scaled", "conv2d_grad_weight_coop_scaled"}));
    tuning.fast_gradients = FG::F16;
    EXPECT_EQ(product_labels(g, tuning),
              with({"matmul_coop_scaled", "matmul_coop_scaled", "matmul_coop_scaled+greater+mul", "matmul_coop_scaled",
                    "conv2d_grad_input_coop_scaled", "conv2d_grad_weight_coop_scaled"}));
    tuning.fast_gradients = FG::F32;
    EXPECT_EQ(product_labels(g, tuning), with({"matmul", "matmul", "matmul+greater+mul", "matmul", "conv2d_grad_input",
                                            "conv2d_grad_weight"}));
    // Tuning::split_forward: of the forward products of a graph with gradients, the 3x3 convolution
    // before the ReLU is split, the 1x1 after it not; the gradient products as before (f32 here).
    tuning.split_forward = true;
    EXPECT_EQ(product_labels(g, tuning), (std::multiset<std::string>{"conv2d_coop_split+relu", "matmul_coop", "matmul",
                                                                   "matmul", "matmul+greater+mul", "matmul", "conv2d_grad_input",
                                                                   "conv2d_grad_weight"}));
    // A matmul's gradient products from 2^24 multiply-adds on (product_precision.cpp's kScaledGradientWork): the
    // linear layer above (2 rows) kept them f32; one of 2^14 rows and a 32 x 32 weight puts them scaled.
    tuning.split_forward = false;
    tuning.fast_gradients = FG::Auto;
    Graph big;
    Tensor rows = big.parameter("x", {int64_t(1) << 14, 32});
    Tensor wide = big.parameter("w", {32, 32});
    Tensor l = big.mean(big.linear(rows, wide));  // dx and dW: 2^14 x 32 x 32 = 2^24 multiply-adds each
    for (const Tensor& t : grad(l, {rows, wide})) big.output("grad" + std::to_string(t.id), t);
    EXPECT_EQ(product_labels(big, tuning), (std::multiset<std::string>{"matmul_coop_scaled", "matmul_coop_scaled"}));
}

// Node::gradient marks what mn::grad appended, not what comes after it: a product built after the
// backward is a forward one (split before a ReLU), a gradient product stays one.
TEST(MatmulPrecisionPolicy, ProductsBuiltAfterTheBackwardAreForward) {
    Graph g;
    Tensor x = g.parameter("x", {64, 96});
    Tensor w = g.parameter("w", {80, 96});
    g.output("dx", grad(g.sum(g.linear(x, w)), {x})[0]);
    g.output("y", g.relu(g.linear(x, w)));
    EXPECT_TRUE(g.has_gradients());
    sched::Tuning tuning;
    tuning.matmul.max_shared_memory = 48 * 1024;
    tuning.matmul.coop_subgroup = 32;
    tuning.split_forward = true;
    tuning.fast_gradients = sched::Tuning::FastGradients::F32;
    EXPECT_EQ(product_labels(g, tuning), (std::multiset<std::string>{"matmul", "matmul_coop_split+relu"}));
}

// The graph the split precision tests run (split_forward_graph) is split as compile lowers it, after the
// optimizer, for the H200: here, where the product runs f32 either way, nothing else would notice that
// it went f16 (a ReLU only its loss read was dead code, and the product was not split).
TEST(MatmulPrecisionPolicy, TheSplitTestGraphIsSplitAsCompiled) {
    const Graph g = split_forward_graph([](Graph& h) {
        return h.linear(h.parameter("x", {200, 160}), h.parameter("w", {130, 160}));
    });
    const rt::CapsProfile* h200 = rt::find_caps_profile("nvidia-h200");
    ASSERT_NE(h200, nullptr);
    std::vector<std::string> products;
    for (const auto& k : compiler::program_kernels(g, h200->caps, {.precision = Precision::Fast})) {
        if (k.label.starts_with("matmul") && !k.label.starts_with("matmul_split_sum")) products.push_back(k.label);
    }
    EXPECT_EQ(products, (std::vector<std::string>{"matmul_coop_split+relu"}));
}

// The start-up check's one program has every kind of cooperative kernel a fast training step has, as
// compile lowers it for the H200.
TEST(MatmulPrecisionPolicy, TheCooperativeCheckCoversEveryKind) {
    const rt::CapsProfile* h200 = rt::find_caps_profile("nvidia-h200");
    ASSERT_NE(h200, nullptr);
    std::set<std::string> kinds;
    for (const auto& k : compiler::program_kernels(compiler::cooperative_check_graph(), h200->caps, {.precision = Precision::Fast})) {
        kinds.insert(k.label.substr(0, k.label.find('+')));
    }
    for (const char* kind : {"matmul_coop_split", "matmul_coop", "conv2d_coop", "conv2d_grad_input_coop_scaled",
                             "conv2d_grad_weight_coop_scaled", "attention_coop", "attention_grad_q_coop", "attention_grad_kv_coop"}) {
        EXPECT_TRUE(kinds.count(kind)) << kind;
    }
}

// MEGANEURA_FAST_FORWARD: split (the default where the cooperative kernels run) or f16; anything else is
// an error that names the variable.
TEST(MatmulPrecisionPolicy, FastForwardFollowsItsVariable) {
    const rt::CapsProfile* h200 = rt::find_caps_profile("nvidia-h200");
    ASSERT_NE(h200, nullptr);
    EXPECT_TRUE(sched::tune_for(h200->caps, Precision::Fast, true).split_forward);
    EXPECT_FALSE(sched::tune_for(h200->caps, Precision::Strict, true).split_forward);
    {
        ScopedEnv f16("MEGANEURA_FAST_FORWARD", "f16");
        EXPECT_FALSE(sched::tune_for(h200->caps, Precision::Fast, true).split_forward);
    }
    ScopedEnv bad("MEGANEURA_FAST_FORWARD", "fp16");
    EXPECT_EQ(error_of([&] { sched::tune_for(h200->caps, Precision::Fast, true); }),
              "MEGANEURA_FAST_FORWARD must be split or f16, got 'fp16'");
}

// A graph without gradients is not split (its forward products stay f16, and read f16 weights).
TEST(MatmulPrecisionPolicy, OnlyGraphsWithGradientsSplitTheirForward) {
    Graph g;
    g.output("y", g.linear(g.input("x", {64, 96}), g.parameter("w", {80, 96})));
    sched::Tuning tuning;
    tuning.matmul.max_shared_memory = 48 * 1024;
    tuning.matmul.coop_subgroup = 32;
    tuning.split_forward = true;
    tuning.f16_weights = true;
    EXPECT_EQ(product_labels(g, tuning), (std::multiset<std::string>{"matmul_coop"}));
}

// A linear layer's two gradient products, dx = dy @ W and dW = dy^T @ x, for loss = sum(linear(x, w) * dy)
// with dy the input `dy_name` [rows, out]: outputs grad.x and grad.w.
Graph linear_gradients(int64_t rows, int64_t in, int64_t out, const char* dy_name) {
    Graph g;
    Tensor x = g.parameter("x", {rows, in});
    Tensor w = g.parameter("w", {out, in});
    Tensor loss = g.sum(g.mul(g.linear(x, w), g.input(dy_name, {rows, out})));
    const auto grads = grad(loss, {x, w});
    g.output("grad.x", grads[0]);
    g.output("grad.w", grads[1]);
    return g;
}

// Split forward products (Tuning::split_forward) keep about f32's precision on the cooperative kernels:
// y = x W^T before a ReLU in a graph with gradients within 1e-5 of float64, as strict, where f16 operands (MEGANEURA_FAST_FORWARD=f16) are ~7e-4 off (see
// FastPrecision). Rows of x and W from 2^-4 to 2^4 and, in a second case, around 1e-10, where the
// scales keep the lo parts out of f16's subnormals.
TEST_F(MatmulTest, SplitForwardProductsKeepF32Precision) {
    const bool coop = coop_device();
    CompileOptions fast;
    fast.precision = Precision::Fast;
    const double magnitude[] = {1.0 / 16, 1.0 / 4, 1, 16};
    for (const char* tile : {"", "64,64,32,32,32,2", "128,64,32,32,32,1"}) {
        for (double base : {1.0, 1e-10}) {
            SCOPED_TRACE(std::string(tile) + " base " + std::to_string(base));
            ScopedEnv forced("MEGANEURA_COOP_TILE", tile);
            const Graph g = split_forward_graph([](Graph& h) {
                return h.linear(h.parameter("x", {200, 160}), h.parameter("w", {130, 160}));
            });
            const Tensor y = *g.find("y");
            ref::Feeds feeds = random_feeds(g, 4402);
            auto& xs = feeds.at("x").data;
            auto& ws = feeds.at("w").data;
            for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(xs[i] * base * magnitude[(i / 160) % 4]);
            for (size_t i = 0; i < ws.size(); ++i) ws[i] = static_cast<float>(ws[i] * magnitude[(i / 160 / 3) % 4]);
            expect_matches_reference(g, feeds, 1e-5, fast);
            if (!coop) continue;
            ScopedEnv f16_forward("MEGANEURA_FAST_FORWARD", "f16");
            Session s = compile(g, device(), fast);
            set_feeds(s, g, feeds);
            s.run();
            const auto want = ref::evaluate(g, feeds);
            EXPECT_GT(relative_l2(s.get("y"), want[static_cast<size_t>(y.id)].data), 1e-4);
        }
    }
}

// Gradients of 1e-10, where f16 has nothing (its smallest subnormal is 6e-8): the scaled products
// keep them, at f16's relative precision (see FastPrecision). Both operand orders of a linear layer's
// backward (dx = dy @ W, dW = dy^T @ x).
TEST_F(MatmulTest, FastGradientProductsKeepTinyGradients) {
    const double tol = coop_device() ? 2e-3 : 1e-5;
    ScopedEnv scaled("MEGANEURA_FAST_GRADIENTS", "f16");  // the scaled cooperative gradient products
    CompileOptions fast;
    fast.precision = Precision::Fast;
    for (const char* tile : {"", "64,64,32,32,32,2"}) {
        ScopedEnv forced("MEGANEURA_COOP_TILE", tile);
        const Graph g = linear_gradients(70, 96, 50, "tiny");
        ref::Feeds feeds = random_feeds(g, 4400);
        for (double& v : feeds.at("tiny").data) v = static_cast<float>(v * 1e-10);
        expect_matches_reference(g, feeds, tol, fast);
    }
}

// The scaled products choose their scales slice by slice and rescale the accumulators as K goes:
// operand magnitudes that change along K (by 64-deep blocks, 2^-4 to 2^4 around 1e-10 and up to
// 1e3), in an order that shrinks the scale several times, on both operands (dx's K is dy's
// columns, dW's is the rows of dy and x). Unsplit, so one workgroup sees every slice.
TEST_F(MatmulTest, FastGradientProductsRescaleAlongK) {
    const double tol = coop_device() ? 2e-3 : 1e-5;
    ScopedEnv scaled("MEGANEURA_FAST_GRADIENTS", "f16");
    ScopedEnv unsplit("MEGANEURA_MATMUL_SPLITS", "1");
    CompileOptions fast;
    fast.precision = Precision::Fast;
    const double magnitude[] = {1.0 / 16, 1.0 / 4, 1, 16};  // per 64-deep block of K
    for (const char* tile : {"", "64,64,32,32,32,2"}) {
        for (double base : {1e-10, 1.0, 1e3}) {
            SCOPED_TRACE(std::string(tile) + " base " + std::to_string(base));
            ScopedEnv forced("MEGANEURA_COOP_TILE", tile);
            const Graph g = linear_gradients(256, 96, 256, "dy");
            ref::Feeds feeds = random_feeds(g, 4401);
            auto& dy = feeds.at("dy").data;
            auto& xs = feeds.at("x").data;
            for (size_t i = 0; i < dy.size(); ++i) dy[i] = static_cast<float>(dy[i] * base * magnitude[(i % 256) / 64]);
            for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(xs[i] * magnitude[i / 96 / 64]);
            expect_matches_reference(g, feeds, tol, fast);
        }
    }
}

}  // namespace
}  // namespace mn::test
