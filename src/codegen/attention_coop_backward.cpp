// The attention backward on NV cooperative matrices (precision fast, issue 14): FlashAttention-2's
// dQ and dK+dV with every product f16 x f16 -> f32 on 16x16x16 fragments. On the H200 the f32 kernels
// spent 1.52 ms (dQ) and 1.98 ms (dK, dV) of Whisper-tiny's fast training step in FMAs, against
// 0.47 ms for the cooperative forward.
//
// Both recompute the probabilities from the forward's logsumexp, P = exp(scale Q K^T - lse), and
// take dS = P (dP - delta) with dP = dO V^T and delta = rowsum(dO * O) (attention_delta_kernel):
//   - dQ (kCoopGradQ): a workgroup owns BR query rows of a kv head as the forward does (the rows of
//     its G query heads stacked), subgroup w the 16 rows 16w..; their scale Q and dO are staged once
//     and kept in fragments. Per BT-key tile (K, V staged as f16 into KV) a subgroup computes S into
//     its rows of the f32 scratch Ws, its threads take P in registers (2 a row, as the forward's
//     softmax), dP goes through Ws too, and dS, written as f16 to Ps, multiplies K into dQ's
//     accumulators: dQ = scale dS K.
//   - dK, dV (kCoopGradKV): a workgroup owns BR keys of a kv head, subgroup w 16 of them, K and V
//     kept in fragments; it loops over BT-row tiles of the query rows of all G query heads (GQA: K
//     and V are read once, never repeated), each staged with dO as f16 into QO. Everything is
//     computed transposed, keys as rows: S^T = K (scale Q)^T, P^T, dV += P^T dO, dP^T = V dO^T,
//     dS^T, dK += dS^T (scale Q). dK and dV never need a rescale by the softmax, so they stay in
//     f32 accumulators for the whole loop and go out through Ws at the end.
// A subgroup whose rows (keys) see nothing of a tile skips its products; tiles that no row of the
// workgroup sees are never staged (key_range, query_range). P is in [0, 1], safe in f16.
//
// Gradients are often far below f16's normal range (2^-14): a loss averaged over a batch gives dO of
// 1e-5 and less. So dO and dS are staged times powers of two, as the scaled matmuls' operands are
// (matmul_coop.cpp): dO's takes the largest magnitude of the staged rows into [2^13, 2^14) (dQ: the
// workgroup's rows, once; dK/dV: each query tile, a running scale that only shrinks, dV's
// accumulators rescaled with it exactly), and dS's the largest of each subgroup's tile (a running
// scale per subgroup, its accumulators, dQ's or dK's, rescaled with it). dP comes back in dO's units
// and is unscaled in f32 before delta is subtracted. The largest magnitudes meet through subgroupMax
// and, for dO, a word per subgroup (Xm) at the barrier that staging waits for anyway; dK/dV holds a
// tile of dO in registers meanwhile (at most 32 floats a thread: fewer subgroups take smaller tiles).
//
// Shared memory, BR = BT = D = 64: the streamed operands 2 * BT * (D/8 + 1) * 16 = 18,432 bytes, Ps
// BR * (BT/8 + 1) * 16 = 9,216, Ws BR * (BT + 4) * 4 = 17,408, and dK/dV's lse and delta of the tile,
// 512: 45,584 bytes of the H200's 48 KiB (dQ 45,072). d 80 and d 128 take 32-row tiles. The owned
// rows are staged through the streamed operands' buffer, so BR <= 2 BT. The choice of BR and BT, and
// why these kernels decline a problem, are the forward's (attention_coop.cpp, fit_coop); dK/dV count
// keys where the others count query rows.
#include "codegen/attention_coop.hpp"

namespace mn::codegen {

const char* const kCoopGradQ = R"(
const uint VOFF = BT * D4;  // V's tile after K's in KV

shared uvec4 KV[2u * VOFF];
shared uvec4 Ps[BR * P4];
shared float Ws[BR * SW];
shared float Xm[WG / 32u];

void main() {
    OWN_QUERY_ROWS
    float row_lse = live ? lse.d[head * ROWS + r] : 0.0, row_delta = live ? delta.d[head * ROWS + r] : 0.0;

    // scale Q, then dO times o_scale (the block's), as fragments, staged through KV in turn.
    STAGE_F16(KV, q4, head * ROWS + r0, BR, ROWS - r0, 0u, scale())
    vec4 ro[2u * ROW_GROUPS(BR)];
    float m;
    FETCH_ROWS(ro, m, dout4, head * ROWS + r0, BR, ROWS - r0)
    m = subgroupMax(m);
    if (lane == 0u) Xm[warp] = m;
    barrier();
    F16MAT qf[OG], of[OG];
    [[unroll]] for (uint i = 0u; i < OG; ++i) coopMatLoadNV(qf[i], KV, warp * 16u * D4 + i * 2u, D4, false);
    m = 0.0;
    [[unroll]] for (uint w = 0u; w < WG / 32u; ++w) m = max(m, Xm[w]);
    float o_scale = scale_for(floatBitsToUint(m)), inv_o = 1.0 / o_scale;
    barrier();  // Q's fragments are loaded
    PUT_ROWS(KV, ro, BR, 0u, o_scale)
    barrier();
    [[unroll]] for (uint i = 0u; i < OG; ++i) coopMatLoadNV(of[i], KV, warp * 16u * D4 + i * 2u, D4, false);

    F32MAT acc[OG];  // dQ / scale in units of g_scale
    [[unroll]] for (uint i = 0u; i < OG; ++i) acc[i] = F32MAT(0.0);
    float g_scale = exp2(126.0);  // dS's running scale: no tile yet
    for (uint j0 = keys.x; j0 < keys.y; j0 += BT) {
        STAGE_KEY_TILE(j0)  // (dO's fragments are loaded on the first pass)
        if (!rows_here || j0 >= seen.y || j0 + BT <= seen.x) continue;  // the same for the whole subgroup

        // S = (scale Q) K^T into this subgroup's rows of Ws; P of this thread's columns.
        PRODUCT_TO_WS(qf, KV, 0u)
        float p[TG * 8u];
        [[unroll]] for (uint t = 0u; t < TG; ++t) {
            [[unroll]] for (uint e = 0u; e < 8u; ++e) {
                uint col = (side + 2u * t) * 8u + e, j = j0 + col;
                p[t * 8u + e] = live && j < keys.y && sees(position, j) ? exp(Ws[srow + col] - row_lse) : 0.0;
            }
        }
        subgroupBarrier();  // every score is read: Ws takes dP

        // dP = (o_scale dO) V^T into Ws; dS = P (dP - delta), as f16 in units of g_scale into Ps; dQ += dS K.
        PRODUCT_TO_WS(of, KV, VOFF)
        DS_TO_PS(p, row_delta, g_scale, acc)
        ACCUMULATE_PS_TIMES(acc, KV, 0u)
    }
#ifdef SPLIT
    // The chunk's partial sums, [SPLITS][rows][D], which the sum kernel adds in chunk order.
    if (rows_here) {
        STORE_ROWS(part4, acc, scale() / g_scale, split * HEADS * ROWS + head * ROWS + w0, ROWS - w0, flat_row)
    }
#ifdef COMBINE
    sum_block(qblock, head * ROWS + r0, min(r0 + BR, ROWS) - r0);
#endif
#else
    if (!rows_here) return;
    STORE_ROWS(dq4, acc, scale() / g_scale, head * ROWS + w0, ROWS - w0, out_row)
#endif
}
)";

const char* const kCoopGradKV = R"(
const uint OOFF = BT * D4;  // dO's tile after Q's in QO

shared uvec4 QO[2u * OOFF];
shared uvec4 Ps[BR * P4];
shared float Ws[BR * SW];
shared float Ls[BT];
shared float Dl[BT];
shared float Xm[WG / 32u];

void main() {
    uint lid = gl_LocalInvocationID.x, warp = lid / 32u, lane = lid % 32u, rr = lane % 16u, side = lane / 16u;
    KEY_BLOCK
    int s0 = query_start();
    uvec2 queries = query_range(j0, min(j0 + BR, TK) - 1u);
    // This subgroup's keys and the queries that may see them; this thread's key.
    uint k0 = j0 + warp * 16u;
    bool keys_here = k0 < TK;
    uvec2 seen = keys_here ? query_range(k0, min(k0 + 16u, TK) - 1u) : uvec2(0u);
    uint key = k0 + rr;
    bool live = key < TK;
    uint srow = (warp * 16u + rr) * SW, prow = (warp * 16u + rr) * P4;

    // K and V of this subgroup's keys as fragments, staged through QO in turn.
    STAGE_F16(QO, k4, head * TK + j0, BR, TK - j0, 0u, 1.0)
    barrier();
    F16MAT kf[OG], vf[OG];
    [[unroll]] for (uint i = 0u; i < OG; ++i) coopMatLoadNV(kf[i], QO, warp * 16u * D4 + i * 2u, D4, false);
    barrier();
    STAGE_F16(QO, v4, head * TK + j0, BR, TK - j0, 0u, 1.0)
    barrier();
    [[unroll]] for (uint i = 0u; i < OG; ++i) coopMatLoadNV(vf[i], QO, warp * 16u * D4 + i * 2u, D4, false);

    F32MAT dk[OG], dv[OG];  // dK in units of g_scale, dV of o_scale
    [[unroll]] for (uint i = 0u; i < OG; ++i) {
        dk[i] = F32MAT(0.0);
        dv[i] = F32MAT(0.0);
    }
    // dO's running scale (the workgroup's, as the staged tile is) and dS's (the subgroup's): no tile yet.
    float o_scale = exp2(126.0), g_scale = exp2(126.0);
    // One step per tile of BT query rows of each of the G heads.
    uint per_head = (queries.y - queries.x + BT - 1u) / BT;
    uvec2 steps = steps_of(G * per_head, split);
    for (uint step = steps.x; step < steps.y; ++step) {
        uint t0 = queries.x + (step % per_head) * BT, rbase = head * ROWS + step / per_head * TQ + t0;
        uint valid = queries.y - t0;  // rows of the tile that may see a key of the block
        barrier();  // the previous tile is consumed (V's fragments loaded, on the first pass)
        STAGE_F16(QO, q4, rbase, BT, valid, 0u, scale())
        vec4 ro[2u * ROW_GROUPS(BT)];
        float m;
        FETCH_ROWS(ro, m, dout4, rbase, BT, valid)
        m = subgroupMax(m);
        if (lane == 0u) Xm[warp] = m;
        for (uint i = lid; i < BT; i += WG) {
            Ls[i] = i < valid ? lse.d[rbase + i] : 0.0;
            Dl[i] = i < valid ? delta.d[rbase + i] : 0.0;
        }
        barrier();
        m = 0.0;
        [[unroll]] for (uint w = 0u; w < WG / 32u; ++w) m = max(m, Xm[w]);
        TAKE_SCALE(o_scale, m, dv)
        PUT_ROWS(QO, ro, BT, OOFF, o_scale)
        barrier();
        if (!keys_here || t0 >= seen.y || t0 + BT <= seen.x) continue;  // the same for the whole subgroup

        // S^T = K (scale Q)^T, this subgroup's 16 keys by BT queries, into its rows of Ws; P^T as f16 into Ps.
        PRODUCT_TO_WS(kf, QO, 0u)
        float p[TG * 8u];
        [[unroll]] for (uint t = 0u; t < TG; ++t) {
            [[unroll]] for (uint e = 0u; e < 8u; ++e) {
                uint col = (side + 2u * t) * 8u + e;
                p[t * 8u + e] = live && col < valid && sees(s0 + int(t0 + col), key) ? exp(Ws[srow + col] - Ls[col]) : 0.0;
            }
            uint i = t * 8u;
            Ps[prow + side + 2u * t] = pack8(vec4(p[i], p[i + 1u], p[i + 2u], p[i + 3u]),
                                             vec4(p[i + 4u], p[i + 5u], p[i + 6u], p[i + 7u]), 1.0);
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();  // P^T is written and every score read: Ws takes dP^T

        // dV += P^T (o_scale dO); dP^T = V (o_scale dO)^T into Ws (its barrier: P^T's fragments are loaded, so
        // Ps takes dS^T); dS^T = P^T (dP^T - delta), as f16 in units of g_scale; dK += dS^T (scale Q).
        ACCUMULATE_PS_TIMES(dv, QO, OOFF)
        PRODUCT_TO_WS(vf, QO, OOFF)
        float inv_o = 1.0 / o_scale;
        DS_TO_PS(p, Dl[col], g_scale, dk)
        ACCUMULATE_PS_TIMES(dk, QO, 0u)
    }
#ifdef SPLIT
    // The chunk's partial sums, [SPLITS][dK, dV][HEADS * TK][D], which the sum kernel adds in chunk order.
    if (keys_here) {
        STORE_ROWS(part4, dk, 1.0 / g_scale, 2u * split * HEADS * TK + head * TK + k0, TK - k0, flat_row)
        STORE_ROWS(part4, dv, 1.0 / o_scale, (2u * split + 1u) * HEADS * TK + head * TK + k0, TK - k0, flat_row)
    }
#ifdef COMBINE
    sum_block(kblock, head * TK + j0, min(j0 + BR, TK) - j0);
#endif
#else
    if (!keys_here) return;
    STORE_ROWS(dk4, dk, 1.0 / g_scale, head * TK + k0, TK - k0, kv_row)
    STORE_ROWS(dv4, dv, 1.0 / o_scale, head * TK + k0, TK - k0, dv_row)
#endif
}
)";

}  // namespace mn::codegen
