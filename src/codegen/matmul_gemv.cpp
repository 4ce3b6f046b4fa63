// M == 1 or N == 1: y[j] = sum_k x[k] * W(j, k), a matrix-vector product. For M == 1, x is A's
// row and W is B (j = n); for N == 1, x is B's column and W is A (j = m). Reading W once is the
// whole cost, and at the sizes of a decode step (576 x 576 f32 is 1.3 MB: 0.3 us at 4 TB/s) that
// cost is latency, not bandwidth. So:
//   - the grid is wide: each thread group takes R outputs, with R as small as keeps the device
//     full (2 workgroups per compute unit), so a 576-output product is 144 workgroups, not 18;
//   - KS threads split one output's k range, KS chosen so that each thread has at most kUnroll
//     loads of W to make: 4 each, where 8 made half as many workgroups of a decode step's products
//     wait on their loads (on an H100, SmolLM2-135M's decode at 4K positions 1.146 -> 1.092 ms a
//     token, its GEMVs' GPU time 840 -> 756 us; 2 and 1 were slower again:
//     bench/results/2026-12-06-session38-h100.md);
//   - the k loop is unrolled kUnroll deep with clamped indices (a term past K is multiplied by
//     zero, never branched around), so all of a thread's loads are in flight at once instead of
//     one memory round trip per iteration;
//   - the KS partial sums of an output meet in subgroups (subgroupAdd, where the device has subgroup arithmetic at a
//     required size: MatmulTuning::sum_subgroup), then the KS / SG subgroups' sums in shared memory after one
//     barrier; SmolLM2-135M's decode at 4K positions 1.101 -> 1.055 ms a token on an H100 against a shared-memory
//     tree of log2(KS) barriers (bench/results/2026-12-06-session39-h100.md). Elsewhere, and where the KS
//     threads of an output are not neighbours (W contiguous along j), that tree.
// When W is contiguous along k (B^T, the weight of a linear layer, or A), the KS threads of an
// output are neighbours and read 16 bytes each; when W is contiguous along j, CW = 32 neighbouring
// threads take neighbouring outputs (coalesced rows) and KS = 256 / CW groups of them split k.
// f32 arithmetic throughout.
//
// With MatmulSpec::a_rms_eps (a decode step's RMSNorm before its products) x is the norm's input row: each
// workgroup sums x[k] * w[k] * W(j, k), and x's squares from the same loads (the k-slices of an output cover K),
// both in one tree, and stores rstd * sum: the norm costs no dispatch, no level, and no pass over x before the
// products (which cost ~3.5 us of a 9 us GEMV of q, k and v on the H200 when the sum of squares came first).
//
// With MatmulSpec::b2 each thread group computes its outputs over both Ws (x read once) and stores the
// epilogue of the pair, EPI2 (a SwiGLU's silu(gate) * up).
//
// With column parts that rotate or go into a cache (ColumnPart::rope, cache_rows: a decode step's q, k and v), each
// thread group computes the pairs of columns (j, j + HALF) of a head that RoPE rotates together, R = 2, and stores
// both, rotated where its part is and at the cache's row where its part is a cache's: the RoPE and cache-write
// kernels, and their level, go (schedule/fusion.hpp).
#include <algorithm>

#include "codegen/matmul_common.hpp"

namespace mn::codegen::matmul_detail {

namespace {

constexpr uint32_t kThreads = 256;
constexpr uint32_t kUnroll = 4;  // loads of W per thread and loop iteration

const char* const kBody = R"(
#if PAIRED
#define PRODUCTS 2u
#else
#define PRODUCTS 1u
#endif
#define SLOTS (PRODUCTS * R + NORM)  // the sums a thread's k-slice adds to its outputs' (NORM: x's squares last)
#if SUBGROUP_SUM
const uint SUBGROUPS = WG / SG_SUM;  // SG_SUM divides KS: a subgroup's k-slices are one output's
shared float partial[SLOTS * SUBGROUPS];
#else
shared float partial[SLOTS * WG];
#endif

void main() {
    uint lid = gl_LocalInvocationID.x;
#if W_KC
    uint s = lid % KS, jl = lid / KS;
    const uint PEER = 1u;  // the distance in lid between two k-slices of one output
#else
    uint jl = lid % CW, s = lid / CW;
    const uint PEER = CW;
#endif
#if COLUMN_PAIRS
    // this thread's outputs: the pair j0, j0 + HALF of pair slot `slot`
    uint slot = gl_WorkGroupID.x * CW + jl, j0 = (slot / HALF) * (2u * HALF) + slot % HALF;
#define OUTPUT(r) (j0 + (r) * HALF)
#else
    uint j0 = gl_WorkGroupID.x * (R * CW) + jl;  // this thread's outputs: j0 + r * CW
#define OUTPUT(r) (j0 + (r) * CW)
#endif
    uint a_off, b_off;
    batch_offsets(gl_WorkGroupID.z, a_off, b_off);
    uint x_off = X_OFF, w_off = W_OFF;
    // NORM: the row's sum of squares comes from the same loads of x, each k-slice's added in the outputs' tree
    // (the k-slices of one output cover K), and rstd scales the sums at the end: no dependent pass over x first.
    float ss = 0.0;
#if NORM
#define X_SCALE(k) float(nw.d[k])
#define X_SCALE4(k) vec4(nw.d[4u * (k)], nw.d[4u * (k) + 1u], nw.d[4u * (k) + 2u], nw.d[4u * (k) + 3u])
#else
#define X_SCALE(k) 1.0
#define X_SCALE4(k) 1.0
#endif
    float acc[PRODUCTS * R];  // PAIRED: the second W's products from R on
    uint row[R];  // each output's W row (past J: the last row, multiplied by zero below)
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        acc[r] = 0.0;
        acc[PRODUCTS * R - R + r] = 0.0;
        row[r] = min(OUTPUT(r), J - 1u);
    }
#if VEC_K
#define TERM(WB, WB4, r) dot(xv, vec4(WB4.d[((w_off + row[r] * K) >> 2) + kc]))
#elif W_KC
#define TERM(WB, WB4, r) (xv * float(WB.d[w_off + row[r] * K + kc]))
#else
#define TERM(WB, WB4, r) (xv * float(WB.d[w_off + kc * J + row[r]]))
#endif
    for (uint k0 = s; k0 < KL; k0 += KS * UNROLL) {
        [[unroll]] for (uint u = 0u; u < UNROLL; ++u) {
            uint k = k0 + u * KS;
            uint kc = min(k, KL - 1u);
            float live = k < KL ? 1.0 : 0.0;
#if VEC_K
            vec4 xr = vec4(X4.d[(x_off >> 2) + kc]) * live, xv = xr * X_SCALE4(kc);
            ss += dot(xr, xr);
#else
            float xr = float(X.d[x_off + kc]) * live, xv = xr * X_SCALE(kc);
            ss += xr * xr;
#endif
            [[unroll]] for (uint r = 0u; r < R; ++r) {
                acc[r] += TERM(W, W4, r);
#if PAIRED
                acc[R + r] += TERM(b2, b24, r);
#endif
            }
        }
    }
    float total[SLOTS];  // the thread's sums; where s == 0 below, its outputs' (and x's squares)
    [[unroll]] for (uint q = 0u; q < PRODUCTS * R; ++q) total[q] = acc[q];
#if NORM
    total[SLOTS - 1u] = ss;
#endif
#if SUBGROUP_SUM
    // The subgroup's sums, then (KS > SG_SUM) the output's subgroups' in their order.
    [[unroll]] for (uint q = 0u; q < SLOTS; ++q) total[q] = subgroupAdd(total[q]);
    if (KS > SG_SUM) {
        if (lid % SG_SUM == 0u) [[unroll]] for (uint q = 0u; q < SLOTS; ++q) partial[q * SUBGROUPS + lid / SG_SUM] = total[q];
        barrier();
        [[unroll]] for (uint q = 0u; q < SLOTS; ++q) {
            total[q] = 0.0;
            for (uint i = 0u; i < KS / SG_SUM; ++i) total[q] += partial[q * SUBGROUPS + lid / SG_SUM + i];
        }
    }
    if (s != 0u) return;
#else
    [[unroll]] for (uint q = 0u; q < SLOTS; ++q) partial[q * WG + lid] = total[q];
    for (uint h = KS / 2u; h > 0u; h /= 2u) {
        barrier();
        if (s < h) [[unroll]] for (uint q = 0u; q < SLOTS; ++q) partial[q * WG + lid] += partial[q * WG + lid + h * PEER];
    }
    barrier();
    if (s != 0u) return;
    [[unroll]] for (uint q = 0u; q < SLOTS; ++q) total[q] = partial[q * WG + lid];
#endif
#if NORM
    float rstd = inversesqrt(total[SLOTS - 1u] / float(K) + uintBitsToFloat(NORM_EPS_BITS));
#define SUM(q) (total[q] * rstd)
#else
#define SUM(q) total[q]
#endif
#if COLUMN_PAIRS
    if (j0 < J) store_pair(0u, j0, SUM(0u), SUM(1u));
#else
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        uint j = OUTPUT(r), i = gl_WorkGroupID.z * J + j;
#if PAIRED
        if (j < J) store_c(i, EPI2(i, SUM(r), SUM(R + r)));
#else
        if (j < J) store_c(i, EPI(i, SUM(r)));
#endif
    }
#endif
}
)";

}  // namespace

KernelSource gemv_kernel(const MatmulSpec& spec, const MatmulTuning& t) {
    const bool row = spec.m == 1;  // x is A's single row; else x is B's single column
    // W contiguous along k: B^T (M == 1) or A (N == 1).
    const bool w_kc = row ? spec.trans_b : !spec.trans_a;
    const bool vec_k = w_kc && spec.k % 4 == 0;
    const int64_t k_loads = vec_k ? spec.k / 4 : spec.k;  // per output
    uint32_t ks = 8;
    if (w_kc) {  // the fewest threads per output (a power of two, 32 to 256) with at most kUnroll loads each
        ks = 32;
        while (ks < kThreads && k_loads > int64_t(ks) * kUnroll) ks *= 2;
    }
    const uint32_t cw = kThreads / ks;
    const int64_t outputs = row ? spec.n : spec.m, batch = std::max<int64_t>(numel(spec.batch), 1);
    // Outputs per thread group: 4 (x read once for 4 rows) while that still gives 2 workgroups per
    // compute unit, else fewer.
    const int64_t target = 2 * int64_t(t.compute_units ? t.compute_units : 32);
    const int64_t half = pair_half(spec);
    uint32_t rows = 4;
    while (rows > 1 && (outputs + rows * cw - 1) / (rows * cw) * batch < target) rows /= 2;
    if (half) rows = 2;  // a pair of columns
    KernelSource k = base_kernel(spec, kThreads, "matmul_gemv", checked_u32(spec.k, "matmul K"));
    const std::string store = half ? store_pair_glsl(k, spec.dtype, spec.column_parts)
                                   : store_glsl(k, spec.dtype, spec.column_parts, "c", merged_heads(spec));
    const std::string epilogue = epilogue_glsl(spec.epilogue, k);
    std::string defs = std::string("#define NORM ") + (spec.a_rms_eps > 0 ? "1" : "0") + "\n";
    if (spec.a_rms_eps > 0) {
        k.iface.bindings.push_back({"nw", spec.dtype});
        defs += define("NORM_EPS_BITS", float_bits(spec.a_rms_eps));
    }
    defs += std::string("#define PAIRED ") + (spec.b2 ? "1" : "0") + "\n#define COLUMN_PAIRS " + (half ? "1" : "0") + "\n";
    if (half) defs += define("HALF", checked_u32(half, "half head dim"));
    std::string b2_view;  // the second W, 4 elements wide too (as common_glsl's views of a and b)
    if (spec.b2) {
        const DType w = operand_dtype(spec, 'b');  // an f16 weight's second W is f16 too (schedule/lower_products.cpp)
        b2_view = "layout(std430, set = 0, binding = " + std::to_string(k.iface.bindings.size()) + ") readonly buffer B_b24 { " +
                  (w == DType::F16 ? "f16vec4" : "vec4") + " d[]; } b24;\n";
        k.iface.bindings.push_back({"b2", w});
    }
    defs += define("KS", ks) + define("CW", cw) + define("R", rows) + define("UNROLL", kUnroll) +
                       "#define W_KC " + (w_kc ? "1" : "0") + "\n#define VEC_K " + (vec_k ? "1" : "0") + "\n" +
                       "#define KL " + (vec_k ? "(K / 4u)" : "K") + "\n";
    defs += row ? "#define J N\n#define X a\n#define X4 a4\n#define W b\n#define W4 b4\n#define X_OFF a_off\n#define W_OFF b_off\n"
                : "#define J M\n#define X b\n#define X4 b4\n#define W a\n#define W4 a4\n#define X_OFF b_off\n#define W_OFF a_off\n";
    // Subgroups of the KS neighbouring k-slices of an output (W contiguous along k: KS is 32 or more), as many in the
    // workgroup as the device allows.
    const bool subgroups_fit = t.sum_subgroup && (!t.max_subgroups || kThreads / t.sum_subgroup <= t.max_subgroups);
    const uint32_t sum_subgroup = w_kc && subgroups_fit && ks % t.sum_subgroup == 0 ? t.sum_subgroup : 0;
    k.required_subgroup_size = sum_subgroup;
    defs += define("SG_SUM", sum_subgroup) + "#define SUBGROUP_SUM " + (sum_subgroup ? "1" : "0") + "\n";
    k.glsl = preamble(k.iface, sum_subgroup ? "#extension GL_KHR_shader_subgroup_arithmetic : require\n" : "") + defs + common_glsl(spec) + b2_view + store + epilogue + kBody;
    const int64_t groups = (outputs + rows * cw - 1) / (rows * cw);
    if (groups > t.max_groups || batch > t.max_groups) {
        throw Error("matmul grid " + std::to_string(groups) + "x1x" + std::to_string(batch) +
                    " exceeds the device's workgroup limit");
    }
    k.groups = {static_cast<uint32_t>(groups), 1, static_cast<uint32_t>(batch)};
    k.choice = "gemv: M or N is 1; " + std::to_string(ks) + " threads per output, " + std::to_string(rows) +
               " outputs per thread group" + (half ? " (pairs of columns a head dim / 2 apart)" : "") +
               (sum_subgroup ? ", summed in subgroups of " + std::to_string(sum_subgroup) : ", summed in a shared-memory tree");
    return k;
}

}  // namespace mn::codegen::matmul_detail
