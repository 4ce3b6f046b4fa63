// The register-tiled f32 matmul. A workgroup computes a BM x BN tile of C; each BK-deep slice of
// A and B is read from memory 4 contiguous elements at a time (16-byte loads where the row length
// allows), into registers first, so that the next slice's loads are in flight while the current
// one is multiplied out of shared memory. Each operand is staged as it is read, one vec4 store a group: an operand
// read along M or N (A^T, or B) as k-major rows of the tile, one read along K (A, or B^T) as its own rows of 4 k's a
// vec4 (TiledGeometry::a_rows, b_rows), each row padded by one vec4. Transposing the latter to k-major took 4 scalar
// stores a group and cost the product ~20% (2048^3 on the H100: 32.7 TFLOP/s with A staged that way, 40.9 with A^T;
// 36.3 with A's rows; bench/results/2026-12-06-session43-h100.md). With STAGES 2 the next slice is stored into a
// second buffer while this one is read, one barrier a slice. Each thread owns TM rows x TN columns of C, in groups of
// 4 strided across the tile, so its shared reads are vec4 and neighbouring threads read neighbouring vec4s. The
// arithmetic is plain f32.
#include "codegen/matmul_common.hpp"

namespace mn::codegen::matmul_detail {

namespace {

const char* const kHead = R"(
// Each operand's slice in memory order is OUTER x INNER; a thread stages G of its 4-element groups.
#if TRANS_A
const uint A_TI = BM;
#else
const uint A_TI = BK;
#endif
#if TRANS_B
const uint B_TI = BK;
#else
const uint B_TI = BN;
#endif
)";

// After the shared register fetch (matmul_common.hpp): writing the fetched groups to shared memory.
const char* const kTail = R"(
void stash() {
    [[unroll]] for (uint p = 0u; p < GA; ++p) {
        uint g = lid + p * WG, o = g / (A_TI / 4u), i = (g % (A_TI / 4u)) * 4u;
#if A_ROWS
        As[st * BM + o][i >> 2] = ra[p];
#else
        As[st * BK + o][i >> 2] = ra[p];
#endif
    }
    [[unroll]] for (uint p = 0u; p < GB; ++p) {
        uint g = lid + p * WG, o = g / (B_TI / 4u), i = (g % (B_TI / 4u)) * 4u;
#if B_ROWS
        Bs[st * BN + o][b_slot(o, i >> 2)] = rb[p];
#else
        Bs[st * BK + o][i >> 2] = rb[p];
#endif
    }
}

)";

// After the shared register-tile product (matmul_common.hpp): the kernel itself.
const char* const kMain = R"(
void main() {
    lid = gl_LocalInvocationID.x;
    uint tx = lid % TX, ty = lid / TX;
    m0 = gl_WorkGroupID.y * BM;
    n0 = gl_WorkGroupID.x * BN;
    uint k_begin, k_end;
    split_range(k_begin, k_end, a_off, b_off);

    multiply_range(k_begin, k_end, tx, ty);

    uint c_off = gl_WorkGroupID.z * M * N;  // split-K: partial products [pair][split][batch][M][N]
    STORE_TILE
#if SUMS
    sum_pieces();
#endif
}
)";

// The thread's TM x TN / 4 quads of C stored through the epilogue, written out here rather than left to the driver's
// unrolling of a loop: a store loop it declined to unroll (a long epilogue, column parts) would index the
// accumulators at run time, keeping all of them in local memory for the whole kernel, what Whisper-tiny's q, k, v
// product looked like on the H200 before this (~28 us per 16-deep slice of K; see store_glsl).
std::string store_tile_glsl(const TiledGeometry& t) {
    std::string glsl = R"(#if VEC_C
#define STORE_QUAD(i, gn, v) if ((gn) < N) store_c4(i, C_EPI4(i, v));
#else
#define STORE_QUAD(i, gn, v) \
    if ((gn) < N) store_c(i, C_EPI(i, (v).x)); \
    if ((gn) + 1u < N) store_c((i) + 1u, C_EPI((i) + 1u, (v).y)); \
    if ((gn) + 2u < N) store_c((i) + 2u, C_EPI((i) + 2u, (v).z)); \
    if ((gn) + 3u < N) store_c((i) + 3u, C_EPI((i) + 3u, (v).w));
#endif
#define STORE_ACC(r, j) { \
    uint gm = m0 + ((r) >> 2) * TY * 4u + ty * 4u + ((r) & 3u), gn = n0 + (j) * TX * 4u + tx * 4u; \
    if (gm < M) { STORE_QUAD(c_off + gm * N + gn, gn, acc[r][j]) } \
}
#define STORE_TILE)";
    for (uint32_t r = 0; r < t.tm; ++r) {
        for (uint32_t j = 0; j < t.tn / 4; ++j) glsl += " STORE_ACC(" + std::to_string(r) + "u, " + std::to_string(j) + "u)";
    }
    return glsl + "\n";
}

}  // namespace

KernelSource tiled_kernel(const MatmulSpec& spec, const TiledGeometry& t, uint32_t split_k, uint32_t max_groups,
                          const MatmulSpec* summed) {
    const uint32_t wg = t.threads();
    if (t.bm % t.tm || t.bn % t.tn || t.tm % 4 || t.tn % 4 || (t.bm * t.bk / 4) % wg || (t.bn * t.bk / 4) % wg) {
        throw Error("matmul tiles must divide evenly");
    }
    if (t.a_rows == spec.trans_a || t.b_rows != spec.trans_b) {
        throw Error("matmul: the tile stages an operand read along K as its rows (choose_tiled_geometry's stage_rows)");
    }
    KernelSource k = base_kernel(spec, wg, "matmul", split_k);
    const std::string store = product_store_glsl(k, spec, split_k, summed);
    const bool pair = summed && summed->b2;
    std::string defs = tiled_defines(t) + "#define TRANS_A " + (spec.trans_a ? "1" : "0") + "\n#define TRANS_B " +
                       (spec.trans_b ? "1" : "0") + "\n#define VEC_C " + (spec.n % 4 == 0 ? "1" : "0") + "\n";
    k.glsl = preamble(k.iface, "") + defs + common_glsl(spec, summed != nullptr) + store + loader_glsl(spec, 'a', pair && summed->a2) +
             loader_glsl(spec, 'b', pair) + kTiledSharedGlsl + kHead + kRegisterFetchGlsl + kTail + kRegisterTileProductGlsl +
             (summed ? std::string(kLastPieceGlsl) + kPieceSumGlsl : "") + store_tile_glsl(t) + kMain;
    k.groups = tile_grid(spec, t.bm, t.bn, split_k, max_groups, pair);
    return k;
}

}  // namespace mn::codegen::matmul_detail
