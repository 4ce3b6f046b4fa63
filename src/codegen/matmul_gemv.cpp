// M == 1 or N == 1: y[j] = sum_k x[k] * W(j, k), a matrix-vector product. For M == 1, x is A's
// row and W is B (j = n); for N == 1, x is B's column and W is A (j = m). Reading W once is the
// whole cost, so the layout follows W: when W is contiguous along k (B^T, the weight of a linear
// layer, or A), KS = 32 neighbouring threads split one output's k range with 16-byte loads; when W
// is contiguous along j, CW = 32 neighbouring threads take neighbouring outputs and 8 groups of
// them split k. Each thread group takes R outputs, CW apart, so that R independent loads are in
// flight per thread and x is read once for R of them. The partial sums meet in shared memory.
// f32 arithmetic throughout.
#include "codegen/matmul_common.hpp"

namespace mn::codegen::matmul_detail {

namespace {

constexpr uint32_t kRows = 4;  // outputs per thread group

const char* const kBody = R"(
shared float partial[R * WG];

void main() {
    uint lid = gl_LocalInvocationID.x;
#if W_KC
    uint s = lid % KS, jl = lid / KS;
#else
    uint jl = lid % CW, s = lid / CW;
#endif
    uint j0 = gl_WorkGroupID.x * (R * CW) + jl;  // this thread's outputs: j0 + r * CW
    uint a_off, b_off;
    batch_offsets(gl_WorkGroupID.z, a_off, b_off);
    uint x_off = X_OFF, w_off = W_OFF;
    float acc[R];
    [[unroll]] for (uint r = 0u; r < R; ++r) acc[r] = 0.0;
    // The R outputs' loads are independent, so R of them are in flight per thread.
#if VEC_K
    for (uint k4 = s; k4 < K / 4u; k4 += KS) {
        vec4 xv = vec4(X4.d[(x_off >> 2) + k4]);
        [[unroll]] for (uint r = 0u; r < R; ++r) {
            uint j = j0 + r * CW;
            if (j < J) acc[r] += dot(xv, vec4(W4.d[((w_off + j * K) >> 2) + k4]));
        }
    }
#else
    for (uint k = s; k < K; k += KS) {
        float xv = float(X.d[x_off + k]);
        [[unroll]] for (uint r = 0u; r < R; ++r) {
            uint j = j0 + r * CW;
#if W_KC
            if (j < J) acc[r] += xv * float(W.d[w_off + j * K + k]);
#else
            if (j < J) acc[r] += xv * float(W.d[w_off + k * J + j]);
#endif
        }
    }
#endif
    [[unroll]] for (uint r = 0u; r < R; ++r) partial[r * WG + lid] = acc[r];
    barrier();
    if (s != 0u) return;
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        uint j = j0 + r * CW;
        if (j >= J) break;
        float sum = 0.0;
        for (uint q = 0u; q < KS; ++q) {
#if W_KC
            sum += partial[r * WG + jl * KS + q];
#else
            sum += partial[r * WG + q * CW + jl];
#endif
        }
        c.d[gl_WorkGroupID.z * J + j] = STORE(EPI(gl_WorkGroupID.z * J + j, sum));
    }
}
)";

}  // namespace

KernelSource gemv_kernel(const MatmulSpec& spec, uint32_t max_groups) {
    const bool row = spec.m == 1;  // x is A's single row; else x is B's single column
    // W contiguous along k: B^T (M == 1) or A (N == 1).
    const bool w_kc = row ? spec.trans_b : !spec.trans_a;
    const uint32_t ks = w_kc ? 32 : 8, cw = 256 / ks;
    KernelSource k = base_kernel(spec, ks * cw, "matmul_gemv", checked_u32(spec.k, "matmul K"));
    const std::string epilogue = epilogue_glsl(spec.epilogue, k);
    std::string defs = define("KS", ks) + define("CW", cw) + define("R", kRows) + "#define W_KC " + (w_kc ? "1" : "0") +
                       "\n#define VEC_K " + (w_kc && spec.k % 4 == 0 ? "1" : "0") + "\n";
    defs += row ? "#define J N\n#define X a\n#define X4 a4\n#define W b\n#define W4 b4\n#define X_OFF a_off\n#define W_OFF b_off\n"
                : "#define J M\n#define X b\n#define X4 b4\n#define W a\n#define W4 a4\n#define X_OFF b_off\n#define W_OFF a_off\n";
    k.glsl = preamble(k.iface, "") + defs + common_glsl(spec) + epilogue + kBody;
    const int64_t outputs = row ? spec.n : spec.m;
    const int64_t groups = (outputs + kRows * cw - 1) / (kRows * cw), batch = std::max<int64_t>(numel(spec.batch), 1);
    if (groups > max_groups || batch > max_groups) {
        throw Error("matmul grid " + std::to_string(groups) + "x1x" + std::to_string(batch) +
                    " exceeds the device's workgroup limit");
    }
    k.groups = {static_cast<uint32_t>(groups), 1, static_cast<uint32_t>(batch)};
    return k;
}

}  // namespace mn::codegen::matmul_detail
