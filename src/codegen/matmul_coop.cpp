// The cooperative-matrix matmul (precision Fast): f16 operands, f32 accumulation, through
// GL_NV_cooperative_matrix at 16x16x16. A workgroup computes a BM x BN tile of C; each subgroup a
// WM x WN piece of it as (WM/16) x (WN/16) accumulators. K is staged 32 deep: the f32 operands are
// read 4 contiguous elements at a time (16-byte loads where the row length allows; zero outside
// the matrix, so edge tiles multiply zeros), converted to f16 and stored in shared memory in their
// memory order, rows padded by 8 halves (16 bytes); the cooperative loads read that order
// directly (column-major for A^T and B^T). As in the tiled kernel, the next slice's loads are in
// flight while the current one is multiplied.
// Edge tiles never store past the matrix: a tile that is not wholly inside goes through a
// per-subgroup 16x16 staging area in shared memory, and threads store only in-bounds elements.
#include "codegen/matmul_common.hpp"

namespace mn::codegen::matmul_detail {

namespace {

constexpr uint32_t kBK = 32;

const char* const kExtensions =
    "#extension GL_NV_cooperative_matrix : require\n"
    "#extension GL_KHR_memory_scope_semantics : require\n"
    "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n";

const char* const kHead = R"(
#define F16MAT fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define F32MAT fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
const uint WARPS_N = BN / WN;
const uint FM = WM / 16u, FN = WN / 16u;
// Each operand's slice in memory order is OUTER x INNER, each line padded to a 16-byte multiple.
#if TRANS_A
const uint A_TO = BK, A_TI = BM;
#else
const uint A_TO = BM, A_TI = BK;
#endif
#if TRANS_B
const uint B_TO = BN, B_TI = BK;
#else
const uint B_TO = BK, B_TI = BN;
#endif
const uint A_S = A_TI + 8u, B_S = B_TI + 8u;
shared float16_t As[A_TO * A_S];
shared float16_t Bs[B_TO * B_S];
shared float Cs[WG / SG * 256u];
)";

// After the shared register fetch (matmul_common.hpp): writing the fetched groups to shared memory
// and the main loop.
const char* const kTail = R"(
void stash() {
    [[unroll]] for (uint p = 0u; p < GA; ++p) {
        uint g = lid + p * WG, o = g / (A_TI / 4u), i = (g % (A_TI / 4u)) * 4u;
        f16vec4 h = f16vec4(ra[p]);
        [[unroll]] for (uint q = 0u; q < 4u; ++q) As[o * A_S + i + q] = h[q];
    }
    [[unroll]] for (uint p = 0u; p < GB; ++p) {
        uint g = lid + p * WG, o = g / (B_TI / 4u), i = (g % (B_TI / 4u)) * 4u;
        f16vec4 h = f16vec4(rb[p]);
        [[unroll]] for (uint q = 0u; q < 4u; ++q) Bs[o * B_S + i + q] = h[q];
    }
}

void main() {
    lid = gl_LocalInvocationID.x;
    uint warp = lid / SG, lane = lid % SG;
    uint wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
    m0 = gl_WorkGroupID.y * BM;
    n0 = gl_WorkGroupID.x * BN;
    uint k_begin, k_end;
    split_range(k_begin, k_end, a_off, b_off);

    F32MAT acc[FM][FN];
    [[unroll]] for (uint i = 0u; i < FM; ++i)
        [[unroll]] for (uint j = 0u; j < FN; ++j) acc[i][j] = F32MAT(0.0);

    fetch(k_begin);
    stash();
    barrier();
    for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
        bool more = k0 + BK < k_end;
        if (more) fetch(k0 + BK);
        [[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
            F16MAT fa[FM], fb[FN];
            [[unroll]] for (uint i = 0u; i < FM; ++i) {
#if TRANS_A
                coopMatLoadNV(fa[i], As, kk * A_S + wm + i * 16u, A_S, true);
#else
                coopMatLoadNV(fa[i], As, (wm + i * 16u) * A_S + kk, A_S, false);
#endif
            }
            [[unroll]] for (uint j = 0u; j < FN; ++j) {
#if TRANS_B
                coopMatLoadNV(fb[j], Bs, (wn + j * 16u) * B_S + kk, B_S, true);
#else
                coopMatLoadNV(fb[j], Bs, kk * B_S + wn + j * 16u, B_S, false);
#endif
            }
            [[unroll]] for (uint i = 0u; i < FM; ++i)
                [[unroll]] for (uint j = 0u; j < FN; ++j) acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);
        }
        barrier();
        if (more) {
            stash();
            barrier();
        }
    }

    uint c_off = gl_WorkGroupID.z * M * N;  // split-K: partial products [split][batch][M][N]
#if VEC_C
    if (m0 + BM <= M && n0 + BN <= N) {  // wholly inside, rows 16-byte aligned: store directly
        [[unroll]] for (uint i = 0u; i < FM; ++i)
            [[unroll]] for (uint j = 0u; j < FN; ++j)
                coopMatStoreNV(acc[i][j], c.d, c_off + (m0 + wm + i * 16u) * N + n0 + wn + j * 16u, N, false);
        return;
    }
#endif
    [[unroll]] for (uint i = 0u; i < FM; ++i) {
        [[unroll]] for (uint j = 0u; j < FN; ++j) {
            coopMatStoreNV(acc[i][j], Cs, warp * 256u, 16u, false);
            barrier();
            for (uint e = lane; e < 256u; e += SG) {
                uint gm = m0 + wm + i * 16u + e / 16u, gn = n0 + wn + j * 16u + e % 16u;
                if (gm < M && gn < N) c.d[c_off + gm * N + gn] = Cs[warp * 256u + e];
            }
            barrier();
        }
    }
}
)";

}  // namespace

uint32_t coop_shared_bytes(const CoopGeometry& g) {
    return 2 * ((g.bm + 8) * kBK + (g.bn + 8) * kBK) + 4 * 256 * g.subgroups();
}

KernelSource coop_kernel(const MatmulSpec& spec, const CoopGeometry& t, uint32_t subgroup_size, uint32_t split_k,
                         uint32_t max_groups) {
    const uint32_t wg = t.subgroups() * subgroup_size;
    if (t.bm % t.wm || t.bn % t.wn || t.wm % 16 || t.wn % 16 || (t.bm * kBK / 4) % wg || (t.bn * kBK / 4) % wg) {
        throw Error("cooperative matmul tiles must divide evenly");
    }
    KernelSource k = base_kernel(spec, wg, "matmul_coop", split_k);
    k.required_subgroup_size = subgroup_size;
    std::string defs = define("BM", t.bm) + define("BN", t.bn) + define("BK", kBK) + define("WM", t.wm) +
                       define("WN", t.wn) + define("SG", subgroup_size) + "#define TRANS_A " +
                       (spec.trans_a ? "1" : "0") + "\n#define TRANS_B " + (spec.trans_b ? "1" : "0") +
                       "\n#define VEC_C " + (spec.n % 4 == 0 ? "1" : "0") + "\n";
    k.glsl = preamble(k.iface, kExtensions) + defs + common_glsl(spec) + loader_glsl(spec, 'a') + loader_glsl(spec, 'b') + kHead + kRegisterFetchGlsl + kTail;
    k.groups = tile_grid(spec, t.bm, t.bn, split_k, max_groups);
    return k;
}

}  // namespace mn::codegen::matmul_detail
