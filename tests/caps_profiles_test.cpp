// No vendor constants (issue 19): the tile and workgroup choices come from DeviceCaps, so every kernel
// of every model, specialized for each device profile (common/caps_profiles.hpp: NVIDIA H200, AMD
// wave64 and wave32, Intel Arc, Apple through MoltenVK, lavapipe), fits that device: workgroup size and
// grid, storage buffers, shared memory as its SPIR-V declares it, the capabilities it uses, and its
// subgroup assumptions (codegen/device_fit.hpp, the check compile runs on the device in hand). Nothing
// runs here; the kernels are generated and compiled to SPIR-V.
#include <glslang/SPIRV/spirv.hpp>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "codegen/device_fit.hpp"
#include "codegen/spirv_khr.hpp"
#include "common/caps_profiles.hpp"
#include "error_of.hpp"
#include "every_kernel.hpp"
#include "temp_dir.hpp"

namespace mn::test {
namespace {

using rt::DeviceCaps;

const DeviceCaps& profile(const std::string& name) {
    const rt::CapsProfile* p = rt::find_caps_profile(name);
    if (!p) throw Error("no profile " + name);
    return p->caps;
}

// The matmul kernels of y = x @ w^T at [rows, 256] x [256, 256], as `caps` would get them (not the cast of w
// to f16 that precision fast reads on a cooperative device).
std::vector<codegen::KernelSource> linear_kernels(const DeviceCaps& caps, int64_t rows, Precision precision) {
    Graph g;
    const Tensor x = g.input("x", {rows, 256});
    g.output("y", g.matmul(x, g.parameter("w", {256, 256}), false, true));
    std::vector<codegen::KernelSource> kernels = compiler::program_kernels(g, caps, {.precision = precision});
    std::erase_if(kernels, [](const codegen::KernelSource& k) { return k.label.rfind("matmul", 0) != 0; });
    return kernels;
}

TEST(CapsProfiles, EveryKernelOfEveryModelFitsEveryProfile) {
    const ScopedEnv coop("MEGANEURA_COOP", "");  // each device's own choice
    for (const rt::CapsProfile& p : rt::caps_profiles()) {
        SCOPED_TRACE(p.name);
        const std::vector<ProgramKernels> programs = every_program(p.caps);
        const std::map<std::string, codegen::Spirv> spirv = compile_every_kernel(programs, p.caps);
        std::set<uint32_t> required_sizes;
        for (const ProgramKernels& program : programs) {
            for (const codegen::KernelSource& k : program.kernels) {
                const codegen::SpirvNeeds needs = codegen::spirv_needs(*spirv.at(k.glsl), k.spec_values);
                for (const std::string& misfit : codegen::device_misfits(k, needs, p.caps))
                    ADD_FAILURE() << program.name << ", kernel " << k.label << " (" << k.choice << "): " << misfit;
                if (k.required_subgroup_size) required_sizes.insert(k.required_subgroup_size);
            }
        }
        // The H200 (NV) and RDNA 3 (KHR) have the f16 16x16x16 cooperative matrices the fast kernels
        // need, and those kernels run at one subgroup size: the H200's one, RDNA 3's default wave64. The
        // blocked attention forward's row reductions (subgroup shuffles) require the smallest size that holds a
        // group of its threads (16 of them, 4 on lavapipe) on every device that can require one, which MoltenVK cannot;
        // a decode step's key lanes (codegen::decode_lanes) the smallest that holds a key's head-dim quads, or the
        // largest there is (Intel's 8 for the tiny SmolLM2's 4 quads, a head dim of 16); a GEMV's sums the largest up to 32
        // (MatmulTuning::sum_subgroup: Intel's 32).
        const std::map<std::string, std::set<uint32_t>> sizes = {
            {"nvidia-h200", {32}}, {"amd-wave64", {32, 64}}, {"amd-wave32", {32}}, {"intel-arc", {8, 16, 32}}, {"lavapipe", {8}}};
        EXPECT_EQ(required_sizes, sizes.count(p.name) ? sizes.at(p.name) : std::set<uint32_t>{});
    }
}

// SmolLM2-135M's decode step (3 kv heads of 3 query heads each) is 3 workgroups per layer unsplit;
// the H200's 132 compute units get its keys in 64-key chunks, twice as many at 8K as at 4K.
TEST(CapsProfiles, TheDecodeSplitFollowsTheComputeUnits) {
    for (const auto& [cache, chunks] : {std::pair{4096, 64}, std::pair{8192, 128}}) {
        const models::BuiltModel decode = models::build_llama_cached(models::LlamaConfig::smollm2_135m(), 1, 1, cache);
        int found = 0;
        for (const codegen::KernelSource& k : compiler::program_kernels(*decode.graph, profile("nvidia-h200"), {})) {
            if (k.label != "attention_chunks") continue;
            ++found;
            EXPECT_EQ(k.choice, "key lanes, 3 rows per kv head, 16 lanes a key, keys in " + std::to_string(chunks) +
                                    " chunks of 64 (flash-decoding): 3 workgroups would underfill 132 compute units");
        }
        EXPECT_EQ(found, 30);
    }
}

// Issue 14: in fast precision the H200 runs the attention forwards of Whisper-tiny's encoder (1500
// positions) and SmolLM2-135M's prefill (128 tokens, GQA) on cooperative matrices, in inference and in
// training (whose f32 backward reads their logsumexp); strict keeps the f32 kernels.
TEST(CapsProfiles, FastAttentionForwardsAreCooperativeOnTheH200) {
    for (const auto& [name, layers] : {std::pair{"whisper", 4}, std::pair{"smollm2", 30}}) {
        SCOPED_TRACE(name);
        const models::BuiltModel m = models::find_model(name).build({.size = "full"});
        for (const bool training : {false, true}) {
            for (const Precision p : {Precision::Strict, Precision::Fast}) {
                CompileOptions options{.precision = p};
                if (training) options.loss = m.loss;
                int coop = 0;
                for (const codegen::KernelSource& k : compiler::program_kernels(*m.graph, profile("nvidia-h200"), options)) {
                    if (k.label.rfind("attention_coop", 0) != 0 || k.label.find("grad") != std::string::npos) continue;
                    ++coop;
                    EXPECT_EQ(k.choice.rfind("cooperative: ", 0), 0u) << k.choice;
                    // Whisper's 6 heads of 1500 rows are 144 workgroups for 132 compute units: the keys are
                    // split so that about four run on each. SmolLM2's 72 workgroups, fewer than the compute
                    // units, split their 128 keys into chunks of one tile.
                    EXPECT_EQ(k.label, "attention_coop_chunks");
                    EXPECT_EQ(k.choice, std::string(name) == "whisper"
                                            ? "cooperative: 1500 rows per kv head, 64 per workgroup, 64-key tiles, keys in 4 "
                                              "chunks of 384: 144 workgroups would underfill 132 compute units"
                                            : "cooperative: 384 rows per kv head, 16 per workgroup, 64-key tiles, keys in 2 "
                                              "chunks of 64: 72 workgroups would underfill 132 compute units");
                }
                EXPECT_EQ(coop, p == Precision::Fast ? layers : 0) << (training ? "training" : "inference");
            }
        }
    }
}

// Issue 14's backward half: their training programs take the cooperative dQ and dK/dV too, one each per
// layer, in fast precision on the H200; strict keeps the f32 kernels.
TEST(CapsProfiles, FastAttentionBackwardsAreCooperativeOnTheH200) {
    for (const auto& [name, layers] : {std::pair{"whisper", 4}, std::pair{"smollm2", 30}}) {
        SCOPED_TRACE(name);
        const models::BuiltModel m = models::find_model(name).build({.size = "full"});
        for (const Precision p : {Precision::Strict, Precision::Fast}) {
            std::map<std::string, int> count;
            for (const codegen::KernelSource& k :
                 compiler::program_kernels(*m.graph, profile("nvidia-h200"), {.loss = m.loss, .precision = p})) {
                if (k.label.rfind("attention_grad", 0) != 0) continue;
                ++count[k.label];
                if (k.label.find("_coop") != std::string::npos) EXPECT_EQ(k.choice.rfind("cooperative: ", 0), 0u) << k.choice;
            }
            const int coop = p == Precision::Fast ? layers : 0;
            EXPECT_EQ(count["attention_grad_q_coop"], coop);
            EXPECT_EQ(count["attention_grad_kv_coop"], coop);
            EXPECT_EQ(count["attention_grad_kv"], layers - coop);
            // Whisper's encoder masks nothing: its f32 dQ is a matmul of the dS the dK/dV kernel stores.
            EXPECT_EQ(count["attention_grad_q"], std::string(name) == "whisper" ? 0 : layers - coop);
        }
    }
}

// wave64: a workgroup of 64-wide subgroups has half the threads per tile row of 32-wide ones, so the
// smallest cooperative tile no longer splits evenly. It used to be chosen anyway, and generating it
// threw "cooperative matmul tiles must divide evenly"; now it is declined with that reason.
TEST(CapsProfiles, CooperativeTilesDivideAmongWave64Subgroups) {
    DeviceCaps caps = profile("amd-wave64");
    caps.coop_nv = profile("nvidia-h200").coop_nv;  // as if the NV path ran there
    for (const int64_t rows : {16, 64, 4096}) {  // small grids prefer the small tiles
        SCOPED_TRACE(rows);
        for (const codegen::KernelSource& k : linear_kernels(caps, rows, Precision::Fast)) {
            if (k.required_subgroup_size == 0) continue;
            EXPECT_EQ(k.required_subgroup_size, 64u);
            EXPECT_EQ(k.iface.local_size % 64, 0u);
            if (rows == 16) EXPECT_NE(k.choice.find("32x32x32/2: does not divide among subgroups"), std::string::npos) << k.choice;
        }
    }
}

// The same product is a different kernel on each device, and each choice says why.
TEST(CapsProfiles, TheMatmulTileFollowsTheCaps) {
    const auto product = [](const DeviceCaps& caps, Precision precision) {
        return linear_kernels(caps, 4096, precision).front();
    };
    EXPECT_EQ(product(profile("nvidia-h200"), Precision::Fast).choice.rfind("cooperative", 0), 0u);
    const codegen::KernelSource apple = product(profile("apple-m2"), Precision::Fast);
    EXPECT_NE(apple.choice.find("tiled f32 (cooperative declined"), std::string::npos) << apple.choice;
    EXPECT_EQ(apple.required_subgroup_size, 0u);
    // A CPU driver gets one thread's worth of register tile per workgroup instead of 256 threads.
    EXPECT_LT(product(profile("lavapipe"), Precision::Strict).iface.local_size,
              product(profile("intel-arc"), Precision::Strict).iface.local_size);
}

// A batched update by quads weighs 4 of a batch's 64 members (codegen::batch_member_weight): 43 in one shader took
// Whisper-tiny's step 2.2 s to compile on the H100, where 16 a shader compile in parallel in 0.6 s. On the H200's
// 1024 bindings, 40 AdamW updates of 128 elements (by quads) go 16, 16 and 8 to a dispatch; of 129 (an element a
// thread), all 40 in one.
TEST(CapsProfiles, UpdatesByQuadsWeighFourInABatch) {
    for (const int64_t C : {128, 129}) {
        Graph g;
        Tensor h = g.input("x", {8, C});
        for (int l = 0; l < 40; ++l) h = g.tanh(h * g.parameter("w" + std::to_string(l), {C}, Init::uniform(0.5, 1.5)));
        const Tensor loss = g.mean(h * h);
        std::multiset<std::string> batches;
        for (const codegen::KernelSource& k :
             compiler::program_kernels(g, profile("nvidia-h200"), {.loss = loss, .optimizer = AdamW{.lr = 1e-3}})) {
            if (k.label.starts_with("adamw")) batches.insert(k.label);
        }
        using Labels = std::multiset<std::string>;
        const Labels want = C % 4 == 0 ? Labels{"adamw x 16 tensors", "adamw x 16 tensors", "adamw x 8 tensors"}
                                       : Labels{"adamw x 40 tensors"};
        EXPECT_EQ(batches, want) << C << " wide";
    }
}

// The check finds what does not fit: the H200's fast kernels ask an Apple GPU for KHR cooperative
// matrices (the H200's default path), a fixed subgroup size it cannot require and more shared memory
// than it has (a product of 2^31 multiply-adds: the 128x128 tile, 64 deep).
TEST(CapsProfiles, AKernelForAnotherDeviceIsReportedWithEachLimit) {
    const ScopedEnv coop("MEGANEURA_COOP", "");
    const DeviceCaps& nv = profile("nvidia-h200");
    const codegen::KernelSource k = linear_kernels(nv, 32768, Precision::Fast).front();
    const codegen::Spirv spirv = codegen::compile_glsl(k.glsl, compiler::shader_options(nv));
    const codegen::SpirvNeeds needs = codegen::spirv_needs(*spirv, k.spec_values);
    EXPECT_TRUE(codegen::device_misfits(k, needs, nv).empty());
    EXPECT_GT(needs.shared_bytes, 32u * 1024);
    std::string misfits;
    for (const std::string& m : codegen::device_misfits(k, needs, profile("apple-m2"))) misfits += m + "\n";
    EXPECT_NE(misfits.find("needs KHR cooperative matrices"), std::string::npos) << misfits;
    EXPECT_NE(misfits.find("no subgroup size control"), std::string::npos) << misfits;
    EXPECT_NE(misfits.find("shared memory bytes: " + std::to_string(needs.shared_bytes) + ", the device's limit 32768"),
              std::string::npos) << misfits;
}

// Issue 19: precision fast's cooperative kernels run on NV matrices where the device has them, else on
// KHR ones (their SPIR-V rewritten, codegen/spirv_khr.hpp), unless MEGANEURA_COOP says otherwise; each
// needs f16 x f16 + f32 at 16x16x16 on a subgroup in that extension's shapes.
TEST(CapsProfiles, TheCooperativePathFollowsTheCapsAndMeganeuraCoop) {
    using sched::CoopPath;
    DeviceCaps khr_only = profile("nvidia-h200");
    khr_only.coop_nv.clear();
    DeviceCaps nv_only = profile("nvidia-h200");
    nv_only.coop_khr.clear();
    DeviceCaps no_size_control = profile("amd-wave64");
    no_size_control.subgroup_size_control = false;
    const char* const lacks = "the device lacks f16 cooperative matrices at 16x16x16 with f32 accumulation (NV or KHR)";
    const char* const khr_not_nv = "the device has VK_KHR_cooperative_matrix at f16 16x16x16, not the NV extension";
    struct Case {
        const char* env;
        const DeviceCaps& caps;
        CoopPath path;
        const char* why;
    };
    const Case cases[] = {
        {"", profile("nvidia-h200"), CoopPath::Khr,
         "the device has VK_KHR_cooperative_matrix at f16 16x16x16 (and the NV extension: MEGANEURA_COOP=nv for it)"},
        {"", nv_only, CoopPath::Nv, "the device has VK_NV_cooperative_matrix at f16 16x16x16, not the KHR extension"},
        {"", profile("amd-wave64"), CoopPath::Khr, khr_not_nv},
        {"", khr_only, CoopPath::Khr, khr_not_nv},
        {"", profile("intel-arc"), CoopPath::None, lacks},  // 8x8x16 only
        {"", profile("lavapipe"), CoopPath::None, lacks},
        {"", no_size_control, CoopPath::None, "the device lacks f16 arithmetic, the Vulkan memory model or subgroup size control"},
        {"nv", profile("nvidia-h200"), CoopPath::Nv, "MEGANEURA_COOP=nv"},
        {"nv", profile("amd-wave64"), CoopPath::None,
         "MEGANEURA_COOP=nv, and the device lacks NV f16 cooperative matrices at 16x16x16 with f32 accumulation"},
        {"khr", profile("nvidia-h200"), CoopPath::Khr, "MEGANEURA_COOP=khr"},
        {"khr", profile("apple-m2"), CoopPath::None,
         "MEGANEURA_COOP=khr, and the device lacks KHR f16 cooperative matrices at 16x16x16 with f32 accumulation"},
        {"off", profile("nvidia-h200"), CoopPath::None, "MEGANEURA_COOP=off"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.caps.name + ", MEGANEURA_COOP=" + c.env);
        const ScopedEnv env("MEGANEURA_COOP", c.env);
        const sched::CoopChoice choice = sched::choose_coop(c.caps);
        EXPECT_EQ(choice.path, c.path);
        EXPECT_STREQ(choice.why, c.why);
        // The kernels follow it: a subgroup size to require where there is a path, KHR's SPIR-V on KHR's.
        const sched::Tuning fast = sched::tune_for(c.caps, Precision::Fast);
        EXPECT_EQ(fast.coop.path, c.path);
        EXPECT_EQ(fast.matmul.coop_subgroup, c.path == CoopPath::None ? 0u : c.caps.subgroup_size);
        if (c.path == CoopPath::None) EXPECT_STREQ(fast.matmul.coop_declined, c.why);
        EXPECT_EQ(sched::tune_for(c.caps, Precision::Strict).matmul.coop_subgroup, 0u);
        EXPECT_EQ(compiler::shader_options(c.caps).coop_khr, c.path == CoopPath::Khr);
    }
    const ScopedEnv bad("MEGANEURA_COOP", "KHR");
    EXPECT_EQ(error_of([] { sched::choose_coop(profile("nvidia-h200")); }), "MEGANEURA_COOP must be nv, khr or off, got 'KHR'");
}

// The tuning variables (schedule/env.hpp): a value outside a word list or a count's range is an error naming the
// variable and what it takes; the values it takes are read.
TEST(CapsProfiles, TuningVariablesOutsideTheirValuesAreNamed) {
    const DeviceCaps& h200 = profile("nvidia-h200");
    const auto tuned = [&] { return sched::tune_for(h200, Precision::Fast); };
    for (const auto& [name, value, message] : std::vector<std::tuple<const char*, const char*, std::string>>{
             {"MEGANEURA_ATTENTION_GRAD_Q", "yes", "must be matmul or kernel, got 'yes'"},
             {"MEGANEURA_UPDATES", "fused", "must be auto, batched or epilogue, got 'fused'"},
             {"MEGANEURA_FAST_GRADIENTS", "bf16", "must be f32, f16 or auto, got 'bf16'"},
             {"MEGANEURA_ATTENTION_SPLITS", "0", "must be a count from 1 to 65535, got '0'"},
             {"MEGANEURA_ATTENTION_SPLITS", "70000", "must be a count from 1 to 65535, got '70000'"},
             {"MEGANEURA_MATMUL_SPLITS", "-2", "must be a positive count, got '-2'"},
             {"MEGANEURA_MATMUL_SPLITS", "3x", "must be a positive count, got '3x'"},
             {"MEGANEURA_SPLIT_SUM", "kernel", "must be product, dispatch, matmul, attention or reduction, got 'kernel'"}}) {
        const ScopedEnv bad(name, value);
        EXPECT_EQ(error_of(tuned), name + (" " + message));
    }
    const ScopedEnv splits("MEGANEURA_MATMUL_SPLITS", "3"), grad_q("MEGANEURA_ATTENTION_GRAD_Q", "kernel"),
        updates("MEGANEURA_UPDATES", "batched");
    const sched::Tuning t = tuned();
    EXPECT_EQ(t.matmul.forced_splits, 3u);
    EXPECT_FALSE(t.attention.grad_q_from_scores);
    EXPECT_EQ(t.updates_in_products, sched::Tuning::UpdatesInProducts::None);
    const ScopedEnv unset("MEGANEURA_MATMUL_SPLITS", "");
    EXPECT_EQ(tuned().matmul.forced_splits, 0u);
    // Where split work is summed: by dispatches of their own, in every family's kernels, or in one family's.
    for (const auto& [where, products, attention, reductions] : std::vector<std::tuple<const char*, bool, bool, bool>>{
             {"", false, false, false}, {"dispatch", false, false, false}, {"product", true, true, true},
             {"matmul", true, false, false}, {"attention", false, true, false}, {"reduction", false, false, true}}) {
        const ScopedEnv sums("MEGANEURA_SPLIT_SUM", where);
        const sched::Tuning s = tuned();
        EXPECT_EQ(s.matmul.pieces_summed_in_product, products) << where;
        EXPECT_EQ(s.attention.last_chunk_merges, attention) << where;
        EXPECT_EQ(s.reduction_last_piece_sums, reductions) << where;
    }
}

// A device with KHR cooperative matrices only (RDNA 3) gets the cooperative product as KHR SPIR-V, which
// fits it; the H200's kernel on its NV path (MEGANEURA_COOP=nv) does not.
TEST(CapsProfiles, AKhrOnlyDeviceGetsKhrKernels) {
    const ScopedEnv coop("MEGANEURA_COOP", "");
    const DeviceCaps& amd = profile("amd-wave64");
    const codegen::KernelSource k = linear_kernels(amd, 4096, Precision::Fast).front();
    ASSERT_EQ(k.required_subgroup_size, 64u) << k.choice;
    const codegen::SpirvNeeds needs =
        codegen::spirv_needs(*codegen::compile_glsl(k.glsl, compiler::shader_options(amd)), k.spec_values);
    const std::set<uint32_t> capabilities(needs.capabilities.begin(), needs.capabilities.end());
    EXPECT_TRUE(capabilities.count(codegen::khr::CapabilityCooperativeMatrix));
    EXPECT_FALSE(capabilities.count(spv::CapabilityCooperativeMatrixNV));
    for (const std::string& misfit : codegen::device_misfits(k, needs, amd)) ADD_FAILURE() << misfit;
    const ScopedEnv nv_path("MEGANEURA_COOP", "nv");
    const DeviceCaps& nv = profile("nvidia-h200");
    const codegen::KernelSource nv_kernel = linear_kernels(nv, 4096, Precision::Fast).front();
    const codegen::SpirvNeeds nv_needs =
        codegen::spirv_needs(*codegen::compile_glsl(nv_kernel.glsl, compiler::shader_options(nv)), nv_kernel.spec_values);
    std::string misfits;
    for (const std::string& m : codegen::device_misfits(nv_kernel, nv_needs, amd)) misfits += m + "\n";
    EXPECT_NE(misfits.find("needs NV cooperative matrices"), std::string::npos) << misfits;
}

}  // namespace
}  // namespace mn::test
