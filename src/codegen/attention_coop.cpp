// The attention forward on NV cooperative matrices (precision fast, issue 14): QK^T and PV as f16
// 16x16x16 products accumulated in f32, the online softmax in f32 by threads. The f32 kernels do the
// same work in FMAs: Whisper-tiny's encoder (1500 positions, d 64) spent 1.17 ms of an H200 there
// for ~3.5 GFLOP.
//
// A workgroup owns BR query rows (16 per subgroup) of one kv head (the rows of attention.cpp: the G query
// heads of the kv head stacked), subgroup w the 16 rows 16w..16w+15, and streams the keys BT at a
// time. Per key tile:
//   - every thread stages K and V as f16 into KV (rows of 8-half uvec4s, padded by one uvec4 as the
//     matmul's slices are: glslang 12's coopMatLoadNV reads f16 matrices from uvec4 arrays);
//   - each subgroup computes its 16 x BT scores S = (scale Q) K^T, Q's fragments held in registers
//     since the start (staged once through KV), and stores them to its rows of the f32 scratch Ws;
//   - its threads, 2 per row (lane % 16 the row, lane / 16 the side; the side owns the 8-column
//     groups side, side + 2, ...), run the online softmax on the f32 scores: masked scores -inf, the
//     row's tile maximum across the two sides through Xs (a word per thread: subgroup shuffles are
//     not among the capabilities DeviceCaps reports), the running rescale of l and of the row's
//     outputs, and write P as f16 to Ps;
//   - the subgroup multiplies P (16 x BT) by V (BT x D) into a fresh accumulator per 16 columns,
//     stores it to Ws, and the threads add it to their outputs.
// Only KV is shared by the subgroups; everything else about a row stays in its subgroup, so the
// softmax steps need subgroup barriers only.
//
// Why the outputs live in threads' registers (D / 2 floats each), not in accumulators: coopmat1 gives
// no element-to-thread mapping, so the per-row rescale needs element access. Keeping O in f32
// accumulators would mean storing, scaling and reloading all of O through shared memory per tile, or
// keeping O in shared memory (BR x D f32, 16 KiB at 64 x 64); instead only the tile's PV goes through
// shared memory, into the scratch the scores just left, so O costs no shared memory at all. The
// scratch holds BT columns, so a head dim wider than the tile takes its PV in chunks of BT columns.
//
// Shared memory: KV 2 * BT * (D/8 + 1) * 16 bytes, Ps BR * (BT/8 + 1) * 16, Ws BR * (BT + 4) * 4
// (rows 16-byte aligned for the stores; read 4 floats at a time by rows 16 words apart, so a
// quarter warp's 16-byte reads hit distinct banks), Xs 2 BR * 4. At BR = BT = D = 64: 18,432 +
// 9,216 + 17,408 + 512 = 45,568 bytes of the H200's 48 KiB; d 80 and d 128 take 32-key tiles
// (26,112 and 32,256 bytes). Q is staged in KV before the first tile, so BR <= 2 BT.
//
// Workgroups: 4 subgroups (128 threads, 64 rows), halved while the workgroups would not fill the
// device's compute units (SmolLM2's prefill of 128 tokens: 384 rows per kv head, 3 kv heads, 18
// workgroups at 64 rows, 72 at 16). A subgroup whose rows see no key of a tile (causal, sliding window) skips
// its products; a tile no row of the workgroup sees is never staged (key_range).
//
// Declined: other subgroup sizes than 32 (the row/side mapping), head dims that are not a multiple
// of 16, f16 attention, fewer than 16 rows per kv head (decode: the row-wise kernels split the keys
// instead), and tiles that do not fit the device's shared memory. Operands beyond f16's range
// (65504) overflow, as the fast matmuls' do. The log-sum-exp is written as the f32 forward writes
// it, so the f32 backward kernels train through this forward unchanged (MEGANEURA_FAST_GRADIENTS=f32).
//
// The cooperative backward (attention_coop_backward.cpp) shares this file's GLSL (the strides of staged
// rows, the staging as f16, the store of a subgroup's rows from accumulators) and its choice of
// workgroup and tile (fit_coop), and declines what this declines.
#include "codegen/attention_coop.hpp"

#include "codegen/matmul_common.hpp"

namespace mn::codegen {

namespace {

constexpr uint32_t kCoopSubgroup = 32, kMaxSubgroups = 4;

// What the forward and the backward share, after the matrix types: the strides of staged rows, the
// staging of rows as f16, the backward's scales, and the store of a subgroup's 16 rows of d from
// accumulators. BR rows are owned, BT streamed per step; lid, warp (the subgroup), rr (the thread's
// row in it), side and srow (its row of Ws) are main's.
const char* const kCoopAttentionCommon = R"(
const uint D8 = DH / 8u, D4 = D8 + 1u;  // uvec4s of 8 halves per staged row of d; the padded stride
const uint P4 = BT / 8u + 1u;         // the padded uvec4 stride of a row of P (or dS)
const uint SW = BT + 4u;              // the f32 stride of a row of the scratch Ws
const uint TG = BT / 16u;             // 8-column groups of a score row per thread (and 16-wide fragments of it)
const uint OG = DH / 16u;             // 8-column groups of a row of d per thread (and 16-wide fragments of d)

// A thread's share of `rows` staged rows: this many groups of 8 elements. Group u of `rows` rows of
// src4 (vec4s) from row `first`, zeros from row `valid` on: GROUP_LOAD into lo and hi, GROUP_PUT
// times `factor` as f16 into dst from uvec4 `at` (rows D4 apart).
#define ROW_GROUPS(rows) (((rows) * D8 + WG - 1u) / WG)
#define GROUP_LOAD(u, src4, first, rows, valid, lo, hi) { \
        uint e = lid + (u) * WG, i = e / D8, c = e % D8; \
        lo = vec4(0.0); \
        hi = vec4(0.0); \
        if (e < (rows) * D8 && i < (valid)) { \
            uint a = (((first) + i) * DH + c * 8u) / 4u; \
            lo = src4.d[a]; \
            hi = src4.d[a + 1u]; \
        } \
    }
#define GROUP_PUT(u, dst, rows, at, lo, hi, factor) { \
        uint e = lid + (u) * WG; \
        if (e < (rows) * D8) dst[(at) + e / D8 * D4 + e % D8] = pack8(lo, hi, factor); \
    }
// The rows staged group by group.
#define STAGE_F16(dst, src4, first, rows, valid, at, factor) \
    [[unroll]] for (uint u = 0u; u < ROW_GROUPS(rows); ++u) { \
        vec4 lo, hi; \
        GROUP_LOAD(u, src4, first, rows, valid, lo, hi) \
        GROUP_PUT(u, dst, rows, at, lo, hi, factor) \
    }
// The rows in registers first (regs: 2 ROW_GROUPS vec4s), for a factor that depends on them, their
// largest magnitude m; then PUT_ROWS.
#define FETCH_ROWS(regs, m, src4, first, rows, valid) \
    m = 0.0; \
    [[unroll]] for (uint u = 0u; u < ROW_GROUPS(rows); ++u) { \
        GROUP_LOAD(u, src4, first, rows, valid, regs[2u * u], regs[2u * u + 1u]) \
        m = max(m, max_abs(regs[2u * u], regs[2u * u + 1u])); \
    }
#define PUT_ROWS(dst, regs, rows, at, factor) \
    [[unroll]] for (uint u = 0u; u < ROW_GROUPS(rows); ++u) GROUP_PUT(u, dst, rows, at, regs[2u * u], regs[2u * u + 1u], factor)

// The backward's running scales: the subgroup's scale s for values up to m (this thread's), the
// accumulators acc[OG] rescaled to it: by a power of two, and only downwards, so exactly and never past
// f32's range.
#define TAKE_SCALE(s, m, acc) { \
        float s_new = min(s, scale_for(floatBitsToUint(subgroupMax(m)))); \
        if (s_new != s) { \
            float ratio = s_new / s; \
            [[unroll]] for (uint i = 0u; i < OG; ++i) acc[i] = acc[i] * ratio; \
            s = s_new; \
        } \
    }

// The setup of a workgroup that owns BR query rows of a kv head (the forward and dQ): its head and
// first row r0 (or an early return past the grid), the keys its rows may see (those of its chunk
// where the forward's keys are split: SPLIT); its subgroup's rows from
// w0 and their keys `seen`; this thread's row r (`live` inside), its position, and its rows srow of
// Ws and prow of Ps.
#define OWN_QUERY_ROWS \
    uint lid = gl_LocalInvocationID.x, warp = lid / 32u, lane = lid % 32u, rr = lane % 16u, side = lane / 16u; \
    uint blocks = (ROWS + BR - 1u) / BR; \
    uint g = mn_group_id(); \
    if (g >= HEADS * blocks * SPLITS) return; \
    uint split = g % SPLITS, qblock = g / SPLITS; \
    uint head = qblock / blocks, r0 = (qblock % blocks) * BR; \
    uvec2 keys = chunk_of(key_range(r0, min(r0 + BR, ROWS) - 1u), split); \
    uint w0 = r0 + warp * 16u; \
    bool rows_here = w0 < ROWS; \
    uvec2 seen = rows_here ? key_range(w0, min(w0 + 16u, ROWS) - 1u) : uvec2(0u); \
    uint r = w0 + rr; \
    bool live = r < ROWS; \
    int position = query_start() + int(r % TQ); \
    uint srow = (warp * 16u + rr) * SW, prow = (warp * 16u + rr) * P4;

// Key tile j0 of K and V staged as f16 into KV (K at 0, V at VOFF), once the previous one is consumed.
#define STAGE_KEY_TILE(j0) \
    barrier(); \
    STAGE_F16(KV, k4, head * TK + (j0), BT, TK - (j0), 0u, 1.0) \
    STAGE_F16(KV, v4, head * TK + (j0), BT, TK - (j0), VOFF, 1.0) \
    barrier();

// The subgroup's 16 x BT product of its fragments left[OG] (16 x DH) by the BT staged rows of src
// from uvec4 `at`, transposed (16 columns of it at a time), into its rows of Ws: S = Q K^T, dP = dO V^T.
#define PRODUCT_TO_WS(left, src, at) \
    [[unroll]] for (uint n = 0u; n < TG; ++n) { \
        F32MAT x = F32MAT(0.0); \
        [[unroll]] for (uint i = 0u; i < OG; ++i) { \
            F16MAT f; \
            coopMatLoadNV(f, src, (at) + n * 16u * D4 + i * 2u, D4, true); \
            x = coopMatMulAddNV(left[i], f, x); \
        } \
        coopMatStoreNV(x, Ws, warp * 16u * SW + n * 16u, SW, false); \
    } \
    subgroupMemoryBarrierShared(); \
    subgroupBarrier();

// The backward's dS = P (dP - delta) from this thread's p[TG * 8] and dP in Ws (in units of o_scale,
// 1 / inv_o), delta of column col given by `delta`; written as f16 in units of the running scale s
// (acc rescaled with it, TAKE_SCALE) to this thread's groups of its row of Ps.
#define DS_TO_PS(p, delta, s, acc) { \
        float ds_max = 0.0; \
        [[unroll]] for (uint t = 0u; t < TG; ++t) { \
            [[unroll]] for (uint e = 0u; e < 8u; ++e) { \
                uint col = (side + 2u * t) * 8u + e; \
                p[t * 8u + e] *= Ws[srow + col] * inv_o - (delta); \
                ds_max = max(ds_max, abs(p[t * 8u + e])); \
            } \
        } \
        TAKE_SCALE(s, ds_max, acc) \
        [[unroll]] for (uint t = 0u; t < TG; ++t) { \
            uint i = t * 8u; \
            Ps[prow + side + 2u * t] = pack8(vec4(p[i], p[i + 1u], p[i + 2u], p[i + 3u]), \
                                             vec4(p[i + 4u], p[i + 5u], p[i + 6u], p[i + 7u]), s); \
        } \
        subgroupMemoryBarrierShared(); \
        subgroupBarrier(); \
    }

// acc[OG] += the subgroup's 16 rows of Ps (P or dS) times the BT staged rows of src from uvec4 `at`:
// dQ += dS K, dV += P^T dO, dK += dS^T Q.
#define ACCUMULATE_PS_TIMES(acc, src, at) { \
        F16MAT pf[TG]; \
        [[unroll]] for (uint t = 0u; t < TG; ++t) coopMatLoadNV(pf[t], Ps, warp * 16u * P4 + t * 2u, P4, false); \
        [[unroll]] for (uint dn = 0u; dn < OG; ++dn) { \
            [[unroll]] for (uint t = 0u; t < TG; ++t) { \
                F16MAT f; \
                coopMatLoadNV(f, src, (at) + t * 16u * D4 + dn * 2u, D4, false); \
                acc[dn] = coopMatMulAddNV(pf[t], f, acc[dn]); \
            } \
        } \
    }

// The subgroup's 16 x DH accumulators acc times `factor` into dst4's rows from `first` (those from
// `valid` on not stored), BT columns at a time through its rows of Ws; row f at ROW(f) (flat_row, or
// out_row, kv_row or dv_row: the heads merged where AttentionSpec says).
uint flat_row(uint f) { return f; }
#define STORE_ROWS(dst4, acc, factor, first, valid, ROW) \
    [[unroll]] for (uint c0 = 0u; c0 < DH; c0 += BT) { \
        subgroupBarrier(); /* every earlier read of the subgroup's rows of Ws is done */ \
        [[unroll]] for (uint dn = c0 / 16u; dn < min(c0 + BT, DH) / 16u; ++dn) \
            coopMatStoreNV(acc[dn], Ws, warp * 16u * SW + dn * 16u - c0, SW, false); \
        subgroupMemoryBarrierShared(); \
        subgroupBarrier(); \
        [[unroll]] for (uint t = 0u; t < OG; ++t) { \
            uint col = (side + 2u * t) * 8u; \
            if (rr < (valid) && col >= c0 && col < c0 + BT) { \
                uint a = (ROW((first) + rr) * DH + col) / 4u, at = srow + col - c0; \
                dst4.d[a] = vec4(Ws[at], Ws[at + 1u], Ws[at + 2u], Ws[at + 3u]) * (factor); \
                dst4.d[a + 1u] = vec4(Ws[at + 4u], Ws[at + 5u], Ws[at + 6u], Ws[at + 7u]) * (factor); \
            } \
        } \
    }
)";

const char* const kCoopForward = R"(
const uint VOFF = BT * D4;            // V's tile after K's in KV

shared uvec4 KV[2u * VOFF];
shared uvec4 Ps[BR * P4];
shared float Ws[BR * SW];
shared float Xs[WG];

// The other side's x, for this thread's row. Every earlier read of Xs by the subgroup is behind a
// subgroup barrier.
float other_side(float x) {
    Xs[gl_LocalInvocationID.x] = x;
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    return Xs[gl_LocalInvocationID.x ^ 16u];
}

void main() {
    OWN_QUERY_ROWS

    STAGE_F16(KV, q4, head * ROWS + r0, BR, ROWS - r0, 0u, scale())
    barrier();
    F16MAT qf[OG];
    [[unroll]] for (uint i = 0u; i < OG; ++i) coopMatLoadNV(qf[i], KV, warp * 16u * D4 + i * 2u, D4, false);

    float o[OG * 8u];  // this thread's output columns (its groups' 8 each), unnormalized
    [[unroll]] for (uint i = 0u; i < OG * 8u; ++i) o[i] = 0.0;
    float m = NEG_INF, l = 0.0;  // the row's running max; this thread's share of its sum
    for (uint j0 = keys.x; j0 < keys.y; j0 += BT) {
        STAGE_KEY_TILE(j0)  // (Q's fragments are loaded on the first pass)
        if (!rows_here || j0 >= seen.y || j0 + BT <= seen.x) continue;  // the same for the whole subgroup

        // S = (scale Q) K^T into this subgroup's rows of Ws.
        PRODUCT_TO_WS(qf, KV, 0u)

        // The online softmax of row r over this side's columns, the max across both sides.
        float s[TG * 8u];
        float tile_max = NEG_INF;
        [[unroll]] for (uint t = 0u; t < TG; ++t) {
            [[unroll]] for (uint e = 0u; e < 8u; ++e) {
                uint col = (side + 2u * t) * 8u + e, j = j0 + col;
                float x = Ws[srow + col];
                s[t * 8u + e] = live && j < keys.y && sees(position, j) ? x : NEG_INF;
                tile_max = max(tile_max, s[t * 8u + e]);
            }
        }
        tile_max = max(tile_max, other_side(tile_max));
        float m_new = max(m, tile_max);
        float base = m_new == NEG_INF ? 0.0 : m_new;  // a row that has seen no key yet: p = 0
        float alpha = exp(m - base);
        m = m_new;
        l *= alpha;
        [[unroll]] for (uint i = 0u; i < OG * 8u; ++i) o[i] *= alpha;
        [[unroll]] for (uint t = 0u; t < TG; ++t) {
            vec4 lo, hi;
            [[unroll]] for (uint e = 0u; e < 4u; ++e) {
                lo[e] = exp(s[t * 8u + e] - base);
                hi[e] = exp(s[t * 8u + 4u + e] - base);
            }
            l += dot(lo, vec4(1.0)) + dot(hi, vec4(1.0));
            Ps[prow + side + 2u * t] = pack8(lo, hi, 1.0);
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();  // P is written and every score read: Ws takes P V

        // O += P V, BT head-dim columns at a time through Ws.
        F16MAT pf[TG];
        [[unroll]] for (uint t = 0u; t < TG; ++t) coopMatLoadNV(pf[t], Ps, warp * 16u * P4 + t * 2u, P4, false);
        [[unroll]] for (uint c0 = 0u; c0 < DH; c0 += BT) {
            [[unroll]] for (uint dn = c0 / 16u; dn < min(c0 + BT, DH) / 16u; ++dn) {
                F32MAT acc = F32MAT(0.0);
                [[unroll]] for (uint t = 0u; t < TG; ++t) {
                    F16MAT vf;
                    coopMatLoadNV(vf, KV, VOFF + t * 16u * D4 + dn * 2u, D4, false);
                    acc = coopMatMulAddNV(pf[t], vf, acc);
                }
                coopMatStoreNV(acc, Ws, warp * 16u * SW + dn * 16u - c0, SW, false);
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            [[unroll]] for (uint t = 0u; t < OG; ++t) {
                uint col = (side + 2u * t) * 8u;
                if (col >= c0 && col < c0 + BT) {
                    [[unroll]] for (uint e = 0u; e < 8u; ++e) o[t * 8u + e] += Ws[srow + col - c0 + e];
                }
            }
            subgroupBarrier();  // the chunk is read before the next one is stored
        }
    }
    float total = l + other_side(l);
#ifdef SPLIT
    // The chunk's record for the combine kernel (attention_decode.cpp): unnormalized sums, then m and l.
    uint pbase = ((head * ROWS + r) * SPLITS + split) * (DH + 2u);
    if (live) {
        [[unroll]] for (uint t = 0u; t < OG; ++t) {
            [[unroll]] for (uint e = 0u; e < 8u; ++e) part.d[pbase + (side + 2u * t) * 8u + e] = o[t * 8u + e];
        }
        if (side == 0u) {
            part.d[pbase + DH] = m;
            part.d[pbase + DH + 1u] = total;
        }
    }
#ifdef COMBINE
    combine_block(head, r0, qblock);
#endif
#else
    if (!live) return;
    float inv = total > 0.0 ? 1.0 / total : 0.0;  // a row that sees no key yields zeros
    uint obase = out_row(head * ROWS + r) * DH;
    [[unroll]] for (uint t = 0u; t < OG; ++t) {
        uint a = (obase + (side + 2u * t) * 8u) / 4u, i = t * 8u;
        o4.d[a] = vec4(o[i], o[i + 1u], o[i + 2u], o[i + 3u]) * inv;
        o4.d[a + 1u] = vec4(o[i + 4u], o[i + 5u], o[i + 6u], o[i + 7u]) * inv;
    }
    if (side == 0u) lse.d[head * ROWS + r] = total > 0.0 ? m + log(total) : NEG_INF;
#endif
}
)";

}  // namespace

uint64_t coop_shared_bytes(CoopKind kind, uint64_t rows, uint64_t tile, uint64_t dim) {
    // The streamed tile's two operands, P (or dS) as f16 and the f32 scratch, as kCoopAttentionCommon's strides.
    const uint64_t common = 2 * tile * (dim / 8 + 1) * 16 + rows * (tile / 8 + 1) * 16 + rows * (tile + 4) * 4;
    switch (kind) {
        case CoopKind::Forward: return common + 2 * rows * 4;                // Xs, a word per thread
        case CoopKind::GradQ: return common + rows / 16 * 4;                 // Xm, a word per subgroup
        case CoopKind::GradKV: return common + 2 * tile * 4 + rows / 16 * 4;  // Ls, Dl and Xm
    }
    return 0;
}

std::string fit_coop(CoopKind kind, const AttentionSpec& s, AttentionTiles& t) {
    if (!t.coop_subgroup) return t.coop_declined;
    if (t.coop_subgroup != kCoopSubgroup) {
        return "written for 32-wide subgroups, the device's are " + std::to_string(t.coop_subgroup);
    }
    if (s.dtype != DType::F32) return "not f32 attention";
    if (s.head_dim % 16) return "head dim " + std::to_string(s.head_dim) + " is not a multiple of 16";
    // The rows a workgroup owns part of: query rows of a kv head (all G heads), or its keys.
    const bool keys = kind == CoopKind::GradKV;
    const int64_t rows = keys ? s.kv_len : s.q_len * (s.q_heads / s.kv_heads);
    const std::string what = keys ? " keys per kv head" : " rows per kv head";
    if (rows < 16) return std::to_string(rows) + what + ", fewer than a subgroup's 16";
    const uint64_t heads = static_cast<uint64_t>(s.batch * s.kv_heads);
    const auto workgroups = [&](uint32_t subgroups) { return heads * ((rows + 16 * subgroups - 1) / (16 * subgroups)); };
    uint32_t subgroups = kMaxSubgroups;
    while (subgroups > 1 && (subgroups * kCoopSubgroup > t.max_invocations ||
                             (t.compute_units && workgroups(subgroups) < t.compute_units))) {
        subgroups /= 2;
    }
    for (; subgroups >= 1; subgroups /= 2) {
        const uint32_t br = 16 * subgroups;
        // The owned rows are staged through the streamed tile's buffer (2 tiles of rows), so br <= 2 tile.
        for (uint32_t tile = 64; tile >= 16 && 2 * tile >= br; tile /= 2) {
            if (coop_shared_bytes(kind, br, tile, static_cast<uint64_t>(s.head_dim)) > t.shared_bytes) continue;
            // dK/dV holds each tile's dO in registers to find its scale: at most 4 groups of 8 a thread
            // (32 floats), as at 64 query rows of d 64 for 4 subgroups, so fewer subgroups take smaller tiles.
            if (kind == CoopKind::GradKV && tile > 16 && tile * static_cast<uint64_t>(s.head_dim / 8) > 4 * 32 * subgroups) continue;
            t.rows = br;
            t.threads_per_row = 2;
            t.tile = tile;
            return "";
        }
    }
    return "head dim " + std::to_string(s.head_dim) + " needs more shared memory than the device's " +
           std::to_string(t.shared_bytes) + " bytes";
}

std::string coop_extensions() { return matmul_detail::kCoopExtensions; }

std::string coop_glsl(const AttentionSpec& s, const std::vector<CoopView>& views, const char* body) {
    // The head dim as a literal too (DH, D's value): it sizes the arrays of matrices and the shared arrays.
    std::string glsl = "#define DH " + std::to_string(s.head_dim) + "u\n";
    for (const CoopView& v : views) {
        glsl += "layout(std430, set = 0, binding = " + std::to_string(v.binding) + ") " + (v.coherent ? "coherent " : "") +
                (v.writes ? "writeonly" : "readonly") + " buffer B_" + v.name + "4 { vec4 d[]; } " + v.name + "4;\n";
    }
    return glsl + matmul_detail::kCoopTypesGlsl + kCoopAttentionCommon + body;
}

std::string coop_forward_glsl(const AttentionSpec& s, bool split) {
    std::vector<CoopView> views = {{"q", 0, false}, {"k", 1, false}, {"v", 2, false}};
    if (!split) views.push_back({"o", s.dynamic_start ? 4u : 3u, true});  // bindings q, k, v, [start], o, lse
    return coop_glsl(s, views, kCoopForward);
}

}  // namespace mn::codegen
