// Device tuning: what the kernel families are told about the device (workgroup sizes, shared memory,
// compute units, cooperative matrices) for a precision, and the MEGANEURA_* overrides of their choices.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "schedule/env.hpp"
#include "schedule/schedule.hpp"

namespace mn::sched {

namespace {

// The shape the cooperative kernels are written for: f16 x f16 + f32 -> f32, 16x16x16 (caps.cpp keeps
// the subgroup-scope shapes only).
bool has_f16_16x16x16(const std::vector<rt::CoopMatrixShape>& shapes) {
    return std::any_of(shapes.begin(), shapes.end(), [](const rt::CoopMatrixShape& s) {
        return s.m == 16 && s.n == 16 && s.k == 16 && s.a_type == "f16" && s.b_type == "f16" && s.c_type == "f32" &&
               s.result_type == "f32";
    });
}

}  // namespace

CoopChoice choose_coop(const rt::DeviceCaps& caps) {
    const std::string wanted = env_choice("MEGANEURA_COOP", {"nv", "khr", "off"}).value_or("");
    const bool nv = has_f16_16x16x16(caps.coop_nv), khr = has_f16_16x16x16(caps.coop_khr);
    CoopChoice c;
    if (wanted == "off") {
        c = {CoopPath::None, "MEGANEURA_COOP=off"};
    } else if (wanted == "nv") {
        c = nv ? CoopChoice{CoopPath::Nv, "MEGANEURA_COOP=nv"}
               : CoopChoice{CoopPath::None, "MEGANEURA_COOP=nv, and the device lacks NV f16 cooperative matrices at "
                                            "16x16x16 with f32 accumulation"};
    } else if (wanted == "khr") {
        c = khr ? CoopChoice{CoopPath::Khr, "MEGANEURA_COOP=khr"}
                : CoopChoice{CoopPath::None, "MEGANEURA_COOP=khr, and the device lacks KHR f16 cooperative matrices "
                                             "at 16x16x16 with f32 accumulation"};
    } else if (khr) {
        // KHR where the device has both: the same arithmetic (bit for bit on the H200), and NVIDIA's driver
        // compiles it to faster code, the two paths taking turns (2026-12-03, session 17: 4096^3 f16 207 ->
        // 251 TFLOP/s; ResNet-50's fast training 5.51 -> 5.32 ms, Whisper's 4.10 -> 3.77).
        c = {CoopPath::Khr, nv ? "the device has VK_KHR_cooperative_matrix at f16 16x16x16 (and the NV extension: "
                                 "MEGANEURA_COOP=nv for it)"
                               : "the device has VK_KHR_cooperative_matrix at f16 16x16x16, not the NV extension"};
    } else if (nv) {
        c = {CoopPath::Nv, "the device has VK_NV_cooperative_matrix at f16 16x16x16, not the KHR extension"};
    } else {
        c = {CoopPath::None, "the device lacks f16 cooperative matrices at 16x16x16 with f32 accumulation (NV or KHR)"};
    }
    // The kernels split their tiles by subgroup, so they need a subgroup size they can require.
    if (c.path != CoopPath::None && !(caps.shader_float16 && caps.vulkan_memory_model && caps.subgroup_size_control))
        c = {CoopPath::None, "the device lacks f16 arithmetic, the Vulkan memory model or subgroup size control"};
    return c;
}

const char* coop_path_name(CoopPath path) {
    switch (path) {
        case CoopPath::None: return "none";
        case CoopPath::Nv: return "NV";
        case CoopPath::Khr: return "KHR";
    }
    return "?";
}

Tuning tune_for(const rt::DeviceCaps& caps, Precision precision, bool training) {
    Tuning t;
    const uint32_t max_groups = std::min({caps.max_workgroup_count[0], caps.max_workgroup_count[1],
                                          caps.max_workgroup_count[2]});
    // CPU drivers run a workgroup as one thread's loop: small groups keep barriers cheap.
    const bool cpu = caps.type == "cpu";
    const uint32_t wg = std::min<uint32_t>(cpu ? 64 : 256, caps.max_workgroup_invocations);
    t.pointwise = {.local_size = wg, .max_groups = max_groups};
    t.max_fused_inputs = std::min<uint32_t>(16, caps.max_storage_buffers_per_stage - 1);
    t.max_batch_bindings = std::min<uint32_t>(1024, caps.max_storage_buffers_per_stage);
    t.binding_alignment = std::max<uint64_t>(t.binding_alignment, caps.min_storage_buffer_offset_alignment);
    t.reduction = {.local_size = wg, .max_groups = max_groups};
    // Attention: a CPU driver runs a workgroup as one loop, so small groups. A GPU's blocked kernels
    // get 64 rows with 16 threads per group of 4 (256 threads; 4 head-dim columns each at D = 64) and
    // 64-key tiles, shrunk to fit shared memory: on the H200 (Whisper, 1500 keys) wider groups won
    // over fewer threads with more columns each (bench/results/2026-11-29-attention-h200.md). The
    // row-wise kernels of few-row problems (decode) widen their rows to up to 32 threads anyway.
    t.attention = {.rows = cpu ? 16u : 64u, .threads_per_row = cpu ? 4u : 16u, .tile = cpu ? 32u : 64u,
                   .shared_bytes = caps.max_shared_memory, .max_invocations = caps.max_workgroup_invocations,
                   .max_loop_iterations = caps.max_loop_iterations, .compute_units = caps.compute_units};
    while (t.attention.rows > 4 && t.attention.rows / 4 * t.attention.threads_per_row > caps.max_workgroup_invocations) {
        t.attention.rows /= 2;
    }
    if (caps.subgroup_shuffle && caps.subgroup_size_control) {
        t.attention.shuffle_min_subgroup = caps.min_subgroup_size;
        t.attention.shuffle_max_subgroup = caps.max_subgroup_size;
    }
    // MEGANEURA_ATTENTION_TILES=rows,threads_per_row,tile[,rowwise] forces the attention tiles (tests,
    // tuning on a new device); they still shrink to fit shared memory. ",rowwise" keeps every problem
    // on the row-wise kernels.
    if (const char* e = std::getenv("MEGANEURA_ATTENTION_TILES"); e && *e) {
        codegen::AttentionTiles a = t.attention;
        char kernel[16] = "";
        const int n = std::sscanf(e, "%u,%u,%u,%15s", &a.rows, &a.threads_per_row, &a.tile, kernel);
        a.blocked = n == 3;
        const uint32_t threads = a.blocked ? a.rows / 4 * a.threads_per_row : a.rows * a.threads_per_row;
        if ((n != 3 && !(n == 4 && std::string(kernel) == "rowwise")) || !a.rows || !a.threads_per_row || !a.tile ||
            (a.blocked && a.rows % 4) || threads > caps.max_workgroup_invocations) {
            throw Error(std::string("MEGANEURA_ATTENTION_TILES must be rows,threads_per_row,tile[,rowwise] within the "
                                    "device's workgroup size (blocked: rows a multiple of 4, rows / 4 * threads), got '") +
                        e + "'");
        }
        t.attention = a;
    }
    // MEGANEURA_ATTENTION_SPLITS=<n> splits a forward's keys into n chunks (1: never), as
    // MEGANEURA_MATMUL_SPLITS does K (tests, tuning on a new device).
    t.attention.forced_splits = env_count("MEGANEURA_ATTENTION_SPLITS", 65535, "a count from 1 to 65535");
    // MEGANEURA_ATTENTION_GRAD_Q=kernel keeps dQ on its own kernel where it would be a matmul of the stored dS
    // (codegen::grad_q_from_scores; matmul, the default).
    if (const auto v = env_choice("MEGANEURA_ATTENTION_GRAD_Q", {"matmul", "kernel"})) t.attention.grad_q_from_scores = *v == "matmul";
    t.matmul = {.max_groups = max_groups, .max_invocations = caps.max_workgroup_invocations,
                .max_shared_memory = caps.max_shared_memory, .compute_units = caps.compute_units, .cpu = cpu,
                .max_subgroups = caps.max_workgroup_subgroups, .max_loop_iterations = caps.max_loop_iterations};
    // The GEMV's k-slices, 32 or more an output, add up in subgroups of at most 32 (a subgroup must not span outputs).
    if (caps.subgroup_arithmetic && caps.subgroup_size_control && caps.min_subgroup_size <= 32) {
        t.matmul.sum_subgroup = std::min<uint32_t>(32, caps.max_subgroup_size);
    }
    if (const auto v = env_choice("MEGANEURA_GEMV_SUM", {"subgroup", "tree"}); v && *v == "tree") t.matmul.sum_subgroup = 0;
    if (precision == Precision::Fast) {
        t.coop = choose_coop(caps);
        if (t.coop.path == CoopPath::None) t.matmul.coop_declined = t.coop.why;
        else t.matmul.coop_subgroup = caps.subgroup_size;
    }
    t.f16_weights = t.matmul.coop_subgroup != 0;
    if (const auto v = env_choice("MEGANEURA_F16_WEIGHTS", {"0", "1"})) t.f16_weights = *v == "1" && precision == Precision::Fast;
    if (training) t.f16_weights = false;  // the weights change every step
    t.split_forward = t.matmul.coop_subgroup != 0;
    if (const auto v = env_choice("MEGANEURA_FAST_FORWARD", {"split", "f16"})) t.split_forward = t.split_forward && *v == "split";
    // MEGANEURA_MATMUL_TILE=<height>[x<width>][/<K-slice>][:<stages>][@<rows>x<columns>] forces one tile geometry
    // of the tiled kernel (tests, tuning on a new device): 128, 128x64, 64/32, 128/16:2, and 128@16x8 (each thread
    // 16 rows x 8 columns of the tile, 128 threads: more multiply-adds per shared load than the rule's 8 x 8).
    if (const char* env = std::getenv("MEGANEURA_MATMUL_TILE"); env && *env) {
        const char* p = env;
        const auto number = [&p](uint32_t& v) {  // a positive count at p, p after it
            char* end = nullptr;
            v = static_cast<uint32_t>(std::strtoul(p, &end, 10));
            const bool read = end != p && v > 0;
            p = end;
            return read;
        };
        uint32_t bm = 0, bn = 0, bk = 0, stages = 0, tm = 0, tn = 0;
        bool ok = number(bm);
        if (ok && *p == 'x') ++p, ok = number(bn);
        if (ok && *p == '/') ++p, ok = number(bk);
        if (ok && *p == ':') ++p, ok = number(stages) && stages <= 2;
        if (ok && *p == '@') ++p, ok = number(tm) && *p++ == 'x' && number(tn) && tm % 4 == 0 && tn % 4 == 0;
        if (!ok || *p) {
            throw Error(std::string("MEGANEURA_MATMUL_TILE must be height[xwidth][/K-slice][:stages of 1 or 2]"
                                    "[@rowsxcolumns, multiples of 4] such as 64, 128x64, 128/16:2 or 128@16x8, got '") + env + "'");
        }
        t.matmul.forced_bm = bm;
        t.matmul.forced_bn = bn;
        t.matmul.forced_bk = bk;
        t.matmul.forced_stages = stages;
        t.matmul.forced_tm = tm;
        t.matmul.forced_tn = tn;
    }
    // MEGANEURA_MATMUL_SPLITS=<n> forces split-K into n pieces (1: never split).
    t.matmul.forced_splits = env_count("MEGANEURA_MATMUL_SPLITS", UINT32_MAX, "a positive count");
    // MEGANEURA_SPLIT_SUM=product sums a product's split-K pieces, a reduction's pieces, and merges a prefill
    // attention's key chunks in the kernel that splits them (its last piece of each tile, of each output, its last chunk
    // of each block of rows; not the cooperative attention kernels, right that way and slower: session 41), where by
    // default (dispatch) a dispatch of their own does. Fewer dispatches and barriers, but slower on the H200 in 13 of 16
    // workloads measured (session 29: SmolLM2's fast step 9.27 against 8.29 ms, its fast inference 2.62 against 1.98;
    // bench/results/2026-12-05-h200-session29.md), the cooperative products too (H100, session 41: ResNet-50's fast
    // inference 0.98 -> 1.49 ms). matmul (the convolutions too), attention or reduction sums in the kernels of that
    // family alone, to measure which of them pays. The reductions alone (a bias gradient's column pieces added by the
    // last piece of each 32 columns: 39 dispatches fewer a Whisper-tiny step) were slower in 8 of 12 training cells on
    // the H100, within 2.6% (Whisper's fast step 3.263 -> 3.309 ms; bench/results/2026-12-07-session45-h100.md): the
    // last piece's adds lengthen the level the column sums share with the products, where the dispatch ran later,
    // beside other work.
    const auto v = env_choice("MEGANEURA_SPLIT_SUM", {"product", "dispatch", "matmul", "attention", "reduction"});
    const auto in_kernels = [&](const char* family) { return v && (*v == "product" || *v == family); };
    t.matmul.pieces_summed_in_product = in_kernels("matmul");
    t.attention.last_chunk_merges = in_kernels("attention");
    t.reduction_last_piece_sums = in_kernels("reduction");
    if (const auto v = env_choice("MEGANEURA_UPDATES", {"auto", "batched", "epilogue"})) {
        using U = Tuning::UpdatesInProducts;
        t.updates_in_products = *v == "auto" ? U::SplitSums : *v == "batched" ? U::None : U::All;
    }
    if (const auto v = env_choice("MEGANEURA_FAST_GRADIENTS", {"f32", "f16", "auto"})) {
        using FG = Tuning::FastGradients;
        t.fast_gradients = *v == "f16" ? FG::F16 : *v == "f32" ? FG::F32 : FG::Auto;
    }
    // MEGANEURA_COOP_TILE=bm,bn,wm,wn,bk,stages forces the cooperative kernels' tile (tuning on a new
    // device); the kernel generator checks that it divides evenly.
    if (const char* e = std::getenv("MEGANEURA_COOP_TILE"); e && *e) {
        auto& f = t.matmul.forced_coop;
        char extra = 0;
        if (std::sscanf(e, "%u,%u,%u,%u,%u,%u%c", &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &extra) != 6 || !f[0] ||
            !f[1] || !f[2] || !f[3] || !f[4] || !f[5]) {
            throw Error(std::string("MEGANEURA_COOP_TILE must be bm,bn,wm,wn,bk,stages such as 128,128,64,32,32,2, got '") +
                        e + "'");
        }
    }
    return t;
}

}  // namespace mn::sched
