// M == 1 or N == 1: y[j] = sum_k x[k] * W(j, k), a matrix-vector product. For M == 1, x is A's
// row and W is B (j = n); for N == 1, x is B's column and W is A (j = m). Reading W once is the
// whole cost, and at the sizes of a decode step (576 x 576 f32 is 1.3 MB: 0.3 us at 4 TB/s) that
// cost is latency, not bandwidth. So:
//   - the grid is wide: each thread group takes R outputs, with R as small as keeps the device
//     full (2 workgroups per compute unit), so a 576-output product is 72 workgroups, not 18;
//   - KS threads split one output's k range, KS chosen so that each thread has at most kUnroll
//     loads of W to make;
//   - the k loop is unrolled kUnroll deep with clamped indices (a term past K is multiplied by
//     zero, never branched around), so all of a thread's loads are in flight at once instead of
//     one memory round trip per iteration;
//   - the KS partial sums of an output meet in a shared-memory tree, log2(KS) steps.
// When W is contiguous along k (B^T, the weight of a linear layer, or A), the KS threads of an
// output are neighbours and read 16 bytes each; when W is contiguous along j, CW = 32 neighbouring
// threads take neighbouring outputs (coalesced rows) and KS = 256 / CW groups of them split k.
// f32 arithmetic throughout.
//
// With MatmulSpec::a_rms_eps (a decode step's RMSNorm before its products) x is the norm's input row: each
// workgroup first sums its squares (K is a few hundred: a few loads a thread and one tree) and reads
// x[k] * rstd * w[k], the value the norm's kernel would have stored, so the norm costs no dispatch and no level.
//
// With MatmulSpec::b2 each thread group computes its outputs over both Ws (x read once) and stores the
// epilogue of the pair, EPI2 (a SwiGLU's silu(gate) * up).
#include <algorithm>

#include "codegen/matmul_common.hpp"

namespace mn::codegen::matmul_detail {

namespace {

constexpr uint32_t kThreads = 256;
constexpr uint32_t kUnroll = 8;  // loads of W per thread and loop iteration

const char* const kBody = R"(
#if PAIRED
#define PRODUCTS 2u
#else
#define PRODUCTS 1u
#endif
shared float partial[PRODUCTS * R * WG];

void main() {
    uint lid = gl_LocalInvocationID.x;
#if W_KC
    uint s = lid % KS, jl = lid / KS;
    const uint PEER = 1u;  // the distance in lid between two k-slices of one output
#else
    uint jl = lid % CW, s = lid / CW;
    const uint PEER = CW;
#endif
    uint j0 = gl_WorkGroupID.x * (R * CW) + jl;  // this thread's outputs: j0 + r * CW
    uint a_off, b_off;
    batch_offsets(gl_WorkGroupID.z, a_off, b_off);
    uint x_off = X_OFF, w_off = W_OFF;
#if NORM
    float ss = 0.0;
    for (uint k = lid; k < K; k += WG) { float v = float(X.d[x_off + k]); ss += v * v; }
    partial[lid] = ss;
    for (uint h = WG / 2u; h > 0u; h /= 2u) {
        barrier();
        if (lid < h) partial[lid] += partial[lid + h];
    }
    barrier();
    float rstd = inversesqrt(partial[0] / float(K) + uintBitsToFloat(NORM_EPS_BITS));
    barrier();  // partial is the k-slices' below
#define X_SCALE(k) (rstd * float(nw.d[k]))
#define X_SCALE4(k) (rstd * vec4(nw.d[4u * (k)], nw.d[4u * (k) + 1u], nw.d[4u * (k) + 2u], nw.d[4u * (k) + 3u]))
#else
#define X_SCALE(k) 1.0
#define X_SCALE4(k) 1.0
#endif
    float acc[PRODUCTS * R];  // PAIRED: the second W's products from R on
    uint row[R];  // each output's W row (past J: the last row, multiplied by zero below)
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        acc[r] = 0.0;
        acc[PRODUCTS * R - R + r] = 0.0;
        row[r] = min(j0 + r * CW, J - 1u);
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
            vec4 xv = vec4(X4.d[(x_off >> 2) + kc]) * X_SCALE4(kc) * live;
#else
            float xv = float(X.d[x_off + kc]) * X_SCALE(kc) * live;
#endif
            [[unroll]] for (uint r = 0u; r < R; ++r) {
                acc[r] += TERM(W, W4, r);
#if PAIRED
                acc[R + r] += TERM(b2, b24, r);
#endif
            }
        }
    }
    [[unroll]] for (uint q = 0u; q < PRODUCTS * R; ++q) partial[q * WG + lid] = acc[q];
    for (uint h = KS / 2u; h > 0u; h /= 2u) {
        barrier();
        if (s < h) [[unroll]] for (uint q = 0u; q < PRODUCTS * R; ++q) partial[q * WG + lid] += partial[q * WG + lid + h * PEER];
    }
    barrier();
    if (s != 0u) return;
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        uint j = j0 + r * CW, i = gl_WorkGroupID.z * J + j;
#if PAIRED
        if (j < J) store_c(i, EPI2(i, partial[r * WG + lid], partial[(R + r) * WG + lid]));
#else
        if (j < J) store_c(i, EPI(i, partial[r * WG + lid]));
#endif
    }
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
    uint32_t rows = 4;
    while (rows > 1 && (outputs + rows * cw - 1) / (rows * cw) * batch < target) rows /= 2;
    KernelSource k = base_kernel(spec, kThreads, "matmul_gemv", checked_u32(spec.k, "matmul K"));
    const std::string store = store_glsl(k, spec.dtype, spec.column_parts);
    const std::string epilogue = epilogue_glsl(spec.epilogue, k);
    std::string defs = std::string("#define NORM ") + (spec.a_rms_eps > 0 ? "1" : "0") + "\n";
    if (spec.a_rms_eps > 0) {
        k.iface.bindings.push_back({"nw", spec.dtype});
        defs += define("NORM_EPS_BITS", float_bits(spec.a_rms_eps));
    }
    defs += std::string("#define PAIRED ") + (spec.b2 ? "1" : "0") + "\n";
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
    k.glsl = preamble(k.iface, "") + defs + common_glsl(spec) + b2_view + store + epilogue + kBody;
    const int64_t groups = (outputs + rows * cw - 1) / (rows * cw);
    if (groups > t.max_groups || batch > t.max_groups) {
        throw Error("matmul grid " + std::to_string(groups) + "x1x" + std::to_string(batch) +
                    " exceeds the device's workgroup limit");
    }
    k.groups = {static_cast<uint32_t>(groups), 1, static_cast<uint32_t>(batch)};
    k.choice = "gemv: M or N is 1; " + std::to_string(ks) + " threads per output, " + std::to_string(rows) +
               " outputs per thread group";
    return k;
}

}  // namespace mn::codegen::matmul_detail
