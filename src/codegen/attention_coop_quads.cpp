// The cooperative attention kernels with each row in accumulators (precision fast, issue 14), where the device says
// which lanes hold a row (DeviceCaps::coop_accumulator_quads: NVIDIA's, each row in a quad of lanes).
//
// attention_coop.cpp's forward takes every tile's scores out of the accumulators into shared memory for its threads'
// softmax, and every tile's P V back out to add it to outputs held by threads: per 64-key tile of 16 rows, 4 KiB of
// scores stored and read, 2 KiB of P, 4 KiB of P V, and the barriers between; its backward takes S and dP out so.
// Here they stay in the subgroup's accumulators, worked on element by element:
//   - a lane's 8 elements of each 16 x 16 accumulator lie in its quad's two rows, lane / 4 (upper) and lane / 4 + 8
//     (lower); which element is where is the driver's order, found once per workgroup by loading a matrix of indices
//     as an accumulator (FIND_ELEMENTS: `lower`, a bit per element, its row; `cols`, 4 bits per element, its column);
//   - the forward's tile maximum of a row is the lane's maximum over its elements in that row, then over the quad
//     (two shuffles); its sum stays a per-lane share until the end; the rescale of O by exp(m_old - m_new) and the
//     final 1 / l are element by element on O's accumulators;
//   - the backward's P = exp(S - lse) and dS = P (dP - delta) are element by element on S's accumulators, with lse
//     and delta of the element's row (dQ: the lane's two rows, in registers) or column (dK/dV: the query, in shared
//     memory), and dP one 16-column block at a time beside them.
// Only P and dS go through shared memory, as f16 (ACCUMULATORS_TO_PS): a product's A operand cannot be an
// accumulator (KHR gives the two different uses), so they are stored from the accumulators and loaded back.
//
// The rest is attention_coop.cpp's and attention_coop_backward.cpp's: BR rows a workgroup (16 a subgroup), BT-row
// tiles staged as f16 (fit_coop), the owned operands' fragments in registers, the sweeps split into chunks (SPLIT)
// where the workgroups are few, the masks, the backward's running scales of dO and dS. Shared memory: as there, less
// the threads' words (Xs); Ws holds only the final stores.
#include "codegen/attention_coop.hpp"

namespace mn::codegen {

const char* const kCoopQuadsCommon = R"(
const uint AE = 8u;  // a lane's elements of a 16 x 16 accumulator

// Where the lane's elements of an accumulator lie: a 16 x 16 matrix of their indices, stored to `staged` (the
// kernel's staging buffer of uvec4s, before its first tile) and loaded as an accumulator. Bit i of `lower`: element i
// is in the lane's lower row (lane / 4 + 8; else lane / 4); bits 4i..4i+3 of `cols`: its column. Not through Ws:
// glslang declares shared variables as the code first uses them, and a cooperative store's target (Ws, Ps) must come
// after the variables only scalar code touches (Xm, Ls, Dl: coop_shared_order_test.cpp says why).
#define FIND_ELEMENTS(staged) \
    for (uint e = lid; e < 64u; e += WG) staged[e] = floatBitsToUint(vec4(4u * e) + vec4(0.0, 1.0, 2.0, 3.0)); \
    barrier(); \
    uint lower = 0u, cols = 0u; \
    { \
        F32MAT index; \
        coopMatLoadNV(index, staged, 0u, 4u, false); \
        [[unroll]] for (uint i = 0u; i < AE; ++i) { \
            uint e = uint(index[i]); \
            lower |= (e / 128u) << i; \
            cols |= (e % 16u) << (4u * i); \
        } \
    } \
    barrier(); /* every subgroup has read the matrix */
#define IN_LOWER(i) (((lower >> (i)) & 1u) != 0u)
#define COLUMN(i) ((cols >> (4u * (i))) & 15u)
// Of a pair (x: the lane's upper row's, y: its lower row's), element i's.
#define OF_ROW(i, pair) (IN_LOWER(i) ? (pair).y : (pair).x)
// Each of mat's elements times its row's factor.
#define SCALE_ROWS(mat, f) \
    [[unroll]] for (uint i = 0u; i < AE; ++i) mat[i] *= OF_ROW(i, f);

// Block n (16 columns) of the subgroup's 16 x BT product of its fragments left[OG] (16 x DH) by the BT staged
// rows of src from uvec4 `at`, transposed: S = Q K^T, dP = dO V^T, and the dK/dV kernel's S^T and dP^T.
#define PRODUCT_BLOCK(x, n, left, src, at) \
    x = F32MAT(0.0); \
    [[unroll]] for (uint i = 0u; i < OG; ++i) { \
        F16MAT f; \
        coopMatLoadNV(f, src, (at) + (n) * 16u * D4 + i * 2u, D4, true); \
        x = coopMatMulAddNV(left[i], f, x); \
    }

// The subgroup's TG accumulators mats (16 x BT) times `factor` as f16 into its rows of Ps, once every lane has
// read what Ps held: the A operands of ACCUMULATE_PS_TIMES.
#define ACCUMULATORS_TO_PS(mats, factor) \
    subgroupBarrier(); \
    [[unroll]] for (uint n = 0u; n < TG; ++n) { \
        F16MAT half_mat = F16MAT(mats[n] * (factor)); \
        coopMatStoreNV(half_mat, Ps, warp * 16u * P4 + n * 2u, P4, false); \
    } \
    subgroupMemoryBarrierShared(); \
    subgroupBarrier();

// The backward's dS = P (dP - delta) of block n in place of P (s[n]), dP computed here (dp: one block's
// accumulator); delta of element i given by DELTA_OF(i); ds_max gathers its largest magnitude.
#define DS_BLOCK(n, left, src, at, DELTA_OF) { \
        F32MAT dp; \
        PRODUCT_BLOCK(dp, n, left, src, at) \
        [[unroll]] for (uint i = 0u; i < AE; ++i) { \
            s[n][i] *= dp[i] * inv_o - DELTA_OF(i); \
            ds_max = max(ds_max, abs(s[n][i])); \
        } \
    }
)";

const char* const kCoopForwardQuads = R"(
const uint VOFF = BT * D4;  // V's tile after K's in KV

shared uvec4 KV[2u * VOFF];
shared uvec4 Ps[BR * P4];
shared float Ws[BR * SW];

float quad_max(float x) {
    x = max(x, subgroupShuffleXor(x, 1u));
    return max(x, subgroupShuffleXor(x, 2u));
}
float quad_sum(float x) {
    x += subgroupShuffleXor(x, 1u);
    return x + subgroupShuffleXor(x, 2u);
}

void main() {
    OWN_QUERY_ROWS
    FIND_ELEMENTS(KV)
    STAGE_F16(KV, q4, head * ROWS + r0, BR, ROWS - r0, 0u, scale())
    barrier();
    F16MAT qf[OG];
    [[unroll]] for (uint i = 0u; i < OG; ++i) coopMatLoadNV(qf[i], KV, warp * 16u * D4 + i * 2u, D4, false);

    uvec2 row = w0 + lane / 4u + uvec2(0u, 8u);  // the lane's rows, upper and lower
    bvec2 row_live = lessThan(row, uvec2(ROWS));
    ivec2 pos = query_start() + ivec2(row % TQ);
    F32MAT o[OG];  // unnormalized
    [[unroll]] for (uint i = 0u; i < OG; ++i) o[i] = F32MAT(0.0);
    vec2 m = vec2(NEG_INF), l = vec2(0.0);  // the rows' running maxima; this lane's share of their sums
    // Key tile j0's K and V as f16 in registers (a thread's groups of 8), fetched while the tile before is computed.
    uvec4 next[2u * ROW_GROUPS(BT)];
#define FETCH_KEY_TILE(j0) \
    [[unroll]] for (uint u = 0u; u < ROW_GROUPS(BT); ++u) { \
        vec4 lo, hi; \
        GROUP_LOAD(u, k4, head * TK + (j0), BT, TK - (j0), lo, hi) \
        next[u] = pack8(lo, hi, 1.0); \
        GROUP_LOAD(u, v4, head * TK + (j0), BT, TK - (j0), lo, hi) \
        next[ROW_GROUPS(BT) + u] = pack8(lo, hi, 1.0); \
    }
    if (keys.x < keys.y) FETCH_KEY_TILE(keys.x)
    for (uint j0 = keys.x; j0 < keys.y; j0 += BT) {
        barrier();  // the tile before is consumed
        [[unroll]] for (uint u = 0u; u < ROW_GROUPS(BT); ++u) {
            uint e = lid + u * WG;
            if (e < BT * D8) {
                KV[e / D8 * D4 + e % D8] = next[u];
                KV[VOFF + e / D8 * D4 + e % D8] = next[ROW_GROUPS(BT) + u];
            }
        }
        barrier();
        if (j0 + BT < keys.y) FETCH_KEY_TILE(j0 + BT)
        if (!rows_here || j0 >= seen.y || j0 + BT <= seen.x) continue;  // the same for the whole subgroup

        // S = (scale Q) K^T, masked; the rows' maxima over the tile, over the lane's elements, then its quad's.
        F32MAT s[TG];
        vec2 tile_max = vec2(NEG_INF);
        [[unroll]] for (uint n = 0u; n < TG; ++n) {
            PRODUCT_BLOCK(s[n], n, qf, KV, 0u)
            [[unroll]] for (uint i = 0u; i < AE; ++i) {
                uint j = j0 + n * 16u + COLUMN(i);
                float x = OF_ROW(i, row_live) && j < keys.y && sees(OF_ROW(i, pos), j) ? s[n][i] : NEG_INF;
                s[n][i] = x;
                if (IN_LOWER(i)) tile_max.y = max(tile_max.y, x);
                else tile_max.x = max(tile_max.x, x);
            }
        }
        vec2 m_new = max(m, vec2(quad_max(tile_max.x), quad_max(tile_max.y)));
        vec2 base = vec2(m_new.x == NEG_INF ? 0.0 : m_new.x, m_new.y == NEG_INF ? 0.0 : m_new.y);  // no key yet: p = 0
        vec2 alpha = exp(m - base);
        m = m_new;
        l *= alpha;
        [[unroll]] for (uint d = 0u; d < OG; ++d) SCALE_ROWS(o[d], alpha)

        // P = exp(S - m), then O += P V.
        [[unroll]] for (uint n = 0u; n < TG; ++n) {
            [[unroll]] for (uint i = 0u; i < AE; ++i) {
                float p = exp(s[n][i] - OF_ROW(i, base));
                s[n][i] = p;
                if (IN_LOWER(i)) l.y += p;
                else l.x += p;
            }
        }
        ACCUMULATORS_TO_PS(s, 1.0)
        ACCUMULATE_PS_TIMES(o, KV, VOFF)
    }
    l = vec2(quad_sum(l.x), quad_sum(l.y));
    uint valid = rows_here ? ROWS - w0 : 0u;
#ifdef SPLIT
    // The chunk's record for the combine kernel (attention_decode.cpp): unnormalized sums, then m and l.
#define PUT_RECORD { \
        uint pb = ((head * ROWS + r) * SPLITS + split) * (DH + 2u) + col; \
        [[unroll]] for (uint e = 0u; e < 8u; ++e) part.d[pb + e] = Ws[at + e]; \
    }
    STORE_ROWS_WITH(o, valid, PUT_RECORD)
    [[unroll]] for (uint h = 0u; h < 2u; ++h) {
        if (lane % 4u == 0u && row_live[h]) {
            uint pb = ((head * ROWS + row[h]) * SPLITS + split) * (DH + 2u);
            part.d[pb + DH] = m[h];
            part.d[pb + DH + 1u] = l[h];
        }
    }
#ifdef COMBINE
    combine_block(head, r0, qblock);
#endif
#else
    vec2 inv = vec2(l.x > 0.0 ? 1.0 / l.x : 0.0, l.y > 0.0 ? 1.0 / l.y : 0.0);  // a row that sees no key yields zeros
    [[unroll]] for (uint d = 0u; d < OG; ++d) SCALE_ROWS(o[d], inv)
    STORE_ROWS(o4, o, 1.0, head * ROWS + w0, valid, out_row)
    [[unroll]] for (uint h = 0u; h < 2u; ++h) {
        if (lane % 4u == 0u && row_live[h]) lse.d[head * ROWS + row[h]] = l[h] > 0.0 ? m[h] + log(l[h]) : NEG_INF;
    }
#endif
}
)";

const char* const kCoopGradQQuads = R"(
const uint VOFF = BT * D4;  // V's tile after K's in KV

shared float Xm[WG / 32u];  // scalar code's alone: before the cooperative stores' targets (coop_shared_order_test.cpp)
shared uvec4 KV[2u * VOFF];
shared uvec4 Ps[BR * P4];
shared float Ws[BR * SW];

void main() {
    OWN_QUERY_ROWS
    FIND_ELEMENTS(KV)
    uvec2 row = w0 + lane / 4u + uvec2(0u, 8u);  // the lane's rows, upper and lower
    bvec2 row_live = lessThan(row, uvec2(ROWS));
    ivec2 pos = query_start() + ivec2(row % TQ);
    vec2 row_lse = vec2(row_live.x ? lse.d[head * ROWS + row.x] : 0.0, row_live.y ? lse.d[head * ROWS + row.y] : 0.0);
    vec2 row_delta = vec2(row_live.x ? delta.d[head * ROWS + row.x] : 0.0, row_live.y ? delta.d[head * ROWS + row.y] : 0.0);
    OWN_Q_AND_DO

    F32MAT acc[OG];  // dQ / scale in units of g_scale
    [[unroll]] for (uint i = 0u; i < OG; ++i) acc[i] = F32MAT(0.0);
    float g_scale = exp2(126.0);  // dS's running scale: no tile yet
    for (uint j0 = keys.x; j0 < keys.y; j0 += BT) {
        STAGE_KEY_TILE(j0)  // (dO's fragments are loaded on the first pass)
        if (!rows_here || j0 >= seen.y || j0 + BT <= seen.x) continue;  // the same for the whole subgroup

        // P = exp((scale Q) K^T - lse); dS = P (dP - delta) with dP = (o_scale dO) V^T, as f16 in units of g_scale
        // (acc rescaled with it) into Ps; dQ += dS K.
        F32MAT s[TG];
        float ds_max = 0.0;
#define ROW_DELTA(i) OF_ROW(i, row_delta)
        [[unroll]] for (uint n = 0u; n < TG; ++n) {
            PRODUCT_BLOCK(s[n], n, qf, KV, 0u)
            [[unroll]] for (uint i = 0u; i < AE; ++i) {
                uint j = j0 + n * 16u + COLUMN(i);
                s[n][i] = OF_ROW(i, row_live) && j < keys.y && sees(OF_ROW(i, pos), j) ? exp(s[n][i] - OF_ROW(i, row_lse)) : 0.0;
            }
            DS_BLOCK(n, of, KV, VOFF, ROW_DELTA)
        }
        TAKE_SCALE(g_scale, ds_max, acc)
        ACCUMULATORS_TO_PS(s, g_scale)
        ACCUMULATE_PS_TIMES(acc, KV, 0u)
    }
    uint valid = rows_here ? ROWS - w0 : 0u;
#ifdef SPLIT
    // The chunk's partial sums, [SPLITS][rows][D], which the sum kernel adds in chunk order.
    STORE_ROWS(part4, acc, scale() / g_scale, split * HEADS * ROWS + head * ROWS + w0, valid, flat_row)
#ifdef COMBINE
    sum_block(qblock, head * ROWS + r0, min(r0 + BR, ROWS) - r0);
#endif
#else
    STORE_ROWS(dq4, acc, scale() / g_scale, head * ROWS + w0, valid, out_row)
#endif
}
)";

const char* const kCoopGradKVQuads = R"(
const uint OOFF = BT * D4;  // dO's tile after Q's in QO

shared float Ls[BT];  // scalar code's alone: before the cooperative stores' targets (coop_shared_order_test.cpp)
shared float Dl[BT];
shared float Xm[WG / 32u];
shared uvec4 QO[2u * OOFF];
shared uvec4 Ps[BR * P4];
shared float Ws[BR * SW];

void main() {
    OWN_KEYS
    FIND_ELEMENTS(QO)
    uvec2 key_row = k0 + lane / 4u + uvec2(0u, 8u);  // the lane's keys (rows), upper and lower
    bvec2 key_live = lessThan(key_row, uvec2(TK));
    OWN_K_AND_V

    DK_DV_ACCUMULATORS
    for (uint step = steps.x; step < steps.y; ++step) {
        QUERY_TILE_OF_STEP  // (V's fragments are loaded on the first pass)
        if (!keys_here || t0 >= seen.y || t0 + BT <= seen.x) continue;  // the same for the whole subgroup

        // P^T = exp(K (scale Q)^T - lse), keys as rows; dV += P^T (o_scale dO).
        F32MAT s[TG];
        [[unroll]] for (uint n = 0u; n < TG; ++n) {
            PRODUCT_BLOCK(s[n], n, kf, QO, 0u)
            [[unroll]] for (uint i = 0u; i < AE; ++i) {
                uint col = n * 16u + COLUMN(i);
                s[n][i] = OF_ROW(i, key_live) && col < valid && sees(s0 + int(t0 + col), OF_ROW(i, key_row))
                              ? exp(s[n][i] - Ls[col]) : 0.0;
            }
        }
        ACCUMULATORS_TO_PS(s, 1.0)
        ACCUMULATE_PS_TIMES(dv, QO, OOFF)

        // dS^T = P^T (dP^T - delta) with dP^T = V (o_scale dO)^T, as f16 in units of g_scale (dk rescaled with it)
        // into Ps; dK += dS^T (scale Q).
        float inv_o = 1.0 / o_scale, ds_max = 0.0;
#define COLUMN_DELTA(i) Dl[n * 16u + COLUMN(i)]
        [[unroll]] for (uint n = 0u; n < TG; ++n) DS_BLOCK(n, vf, QO, OOFF, COLUMN_DELTA)
        TAKE_SCALE(g_scale, ds_max, dk)
        ACCUMULATORS_TO_PS(s, g_scale)
        ACCUMULATE_PS_TIMES(dk, QO, 0u)
    }
    uint valid = keys_here ? TK - k0 : 0u;
#ifdef SPLIT
    // The chunk's partial sums, [SPLITS][dK, dV][HEADS * TK][D], which the sum kernel adds in chunk order.
    STORE_ROWS(part4, dk, 1.0 / g_scale, 2u * split * HEADS * TK + head * TK + k0, valid, flat_row)
    STORE_ROWS(part4, dv, 1.0 / o_scale, (2u * split + 1u) * HEADS * TK + head * TK + k0, valid, flat_row)
#ifdef COMBINE
    sum_block(kblock, head * TK + j0, min(j0 + BR, TK) - j0);
#endif
#else
    STORE_ROWS(dk4, dk, 1.0 / g_scale, head * TK + k0, valid, kv_row)
    STORE_ROWS(dv4, dv, 1.0 / o_scale, head * TK + k0, valid, dv_row)
#endif
}
)";

}  // namespace mn::codegen
