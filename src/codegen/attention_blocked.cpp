// The register-blocked attention kernels, for problems with many rows (prefill, training). Same
// algorithms as the row-wise kernels of attention_rowwise.cpp (online-softmax forward, dQ, dK+dV without
// atomics), but each tile step is two small matrix products computed from registers:
//
//   a workgroup owns BR rows in groups of 4; NT threads share a group. Thread (rg, tx) keeps
//   4 rows x BT/NT scores (tile rows tx + n*NT; the forward's KEY(n)) and 4 rows x its share of the head dim as vec4s,
//   one component per row. The owned operands are staged once, transposed, as vec4 arrays
//   [d][row group] (one load feeds 4 rows; head dims padded to whole quads with zeros). The
//   backward kernels stream their tiles as they lie, rows of head-dim quads [tile row][quad] with an
//   odd vec4 stride: a product over d takes a quad at a time, 4 loads of the owned rows and one quad
//   of each of the thread's tile rows (consecutive threads, consecutive rows: distinct banks) feeding
//   16 multiply-adds a tile row, and a product over tile rows a vec4 of scores and one quad (the
//   thread's head-dim quads tx + c*NT) for 16 more. The forward streams its key tiles as [d][tile
//   row] (floats or, where a thread has 2 keys a tile, neighbouring pairs) and its value tiles as
//   the backward's quads where they divide evenly among a group (see kBlockedForward). The scores
//   go through shared memory once, transposed into [tile row][row group] vec4s, to feed the second
//   product. The forward's row maxima and sums across a group's threads take subgroup shuffles
//   where the device can require a subgroup size NT divides (GROUP_SHUFFLES; its scores, written and
//   read by one group, then need a subgroup barrier only), shared memory and barriers elsewhere.
//
// On the H200 the quads took Whisper-tiny's dK/dV from 1.83 to 1.52 ms and SmolLM2-135M's dQ from
// 0.45 to 0.38 (bench/results/2026-12-05-h200-session33.md).
#include "codegen/attention_blocked.hpp"

#include <algorithm>

namespace mn::codegen {

const char* const kBlockedCommon = R"(
const uint NT = TPR;                         // threads per group of 4 rows
const uint RG = BR / 4u;                     // row groups
const uint SN = BT / NT;                     // tile rows per thread
const uint R4 = RG + 1u;                     // vec4 stride of a [d][row group] array (padded)
const uint DQA = (D + 3u) / 4u;              // head-dim quads (the last padded with zeros)
const uint QC = DQA % 2u == 0u ? 2u : 1u;    // quads a step of the unrolled dot products
const uint DQ = (DQA + NT - 1u) / NT;        // head-dim quads per thread
const uint DQP = DQ * NT;                    // head-dim quads a staged tile row (padded)
const uint QS = DQP | 1u;                    // vec4 stride of a [tile row][quad] array
const uint QPT = (BT * DQP + WG - 1u) / WG;  // quads of a streamed tile a thread fetches

// rg: the thread's row group (rows 4*rg .. 4*rg+3 of the block), tx: its lane within the group. Where the forward
// reduces across a group in subgroup shuffles (GROUP_SHUFFLES: full subgroups of a size NT divides), a group is NT
// consecutive invocations of a subgroup, whatever order the driver gives the workgroup's invocations in them.
#ifdef GROUP_SHUFFLES
#define BLOCK_THREAD \
    uint lid = gl_LocalInvocationID.x, sub = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID, rg = sub / NT, \
         tx = sub % NT;
#else
#define BLOCK_THREAD uint lid = gl_LocalInvocationID.x, rg = lid / NT, tx = lid % NT;
#endif

// A product over the head dim, a quad dq at a time: as HEAD_DIM, its loop runs DQA / QC times (per
// tile, which the loop limit of blocked_long_sweep counts).
#define HEAD_QUADS(dq) \
    for (uint dq##_0 = 0u; dq##_0 < DQA; dq##_0 += QC) [[unroll]] for (uint dq##_u = 0u, dq = dq##_0; dq##_u < QC; ++dq##_u, ++dq)
// The 4 head dims of quad dq of the thread's 4 owned rows: a[j] holds dim 4 * dq + j of each row.
#define OWNED_QUAD(a, src, dq) \
    vec4 a[4]; \
    [[unroll]] for (uint j = 0u; j < 4u; ++j) a[j] = src[((dq) * 4u + j) * R4 + rg];
// The backward kernels' two products over the head dim: s[n] and dp[n] (the 4 owned rows against the thread's tile row
// tx + n * NT) add the owned rows of a_src times the tile's of x_src, and of b_src times y_src's.
#define QUAD_SCORES(a_src, b_src, x_src, y_src) \
    HEAD_QUADS(dq) { \
        OWNED_QUAD(a, a_src, dq) \
        OWNED_QUAD(b, b_src, dq) \
        [[unroll]] for (uint n = 0u; n < SN; ++n) { \
            uint at = (tx + n * NT) * QS + dq; \
            vec4 xq = x_src[at], yq = y_src[at]; \
            [[unroll]] for (uint j = 0u; j < 4u; ++j) { \
                s[n] += a[j] * xq[j]; \
                dp[n] += b[j] * yq[j]; \
            } \
        } \
    }

// A streamed tile: BT rows of src from row `first` (those past `valid` as zeros), as head-dim
// quads, fetched into registers (QPT quads per thread: all loads in flight at once, and while the
// previous tile is being used) and then stored as dst[row * QS + quad].
#define FETCH_QUADS(regs, src, first, valid, factor) \
    [[unroll]] for (uint u = 0u; u < QPT; ++u) { \
        uint e = lid + u * WG, i = e / DQP, d0 = e % DQP * 4u; \
        [[unroll]] for (uint j = 0u; j < 4u; ++j) { \
            bool in_range = e < BT * DQP && i < (valid) && d0 + j < D; \
            regs[u][j] = in_range ? float(src.d[((first) + i) * D + d0 + j]) * (factor) : 0.0; \
        } \
    }
#define STORE_QUADS(dst, regs) \
    [[unroll]] for (uint u = 0u; u < QPT; ++u) { \
        uint e = lid + u * WG; \
        if (e < BT * DQP) dst[e / DQP * QS + e % DQP] = regs[u]; \
    }
// The forward's and dQ's block of query rows: its head, first row r0 and the keys it may see (of
// its chunk, where the forward's keys are split: SPLIT);
// Qt staged (scaled); whether each of the thread's 4 rows exists and its position among the keys.
#define BLOCKED_QUERY_BLOCK \
    BLOCK_THREAD \
    uint blocks = (ROWS + BR - 1u) / BR; \
    uint g = mn_group_id(); \
    if (g >= HEADS * blocks * SPLITS) return; \
    uint split = g % SPLITS, qblock = g / SPLITS; \
    uint head = qblock / blocks, r0 = (qblock % blocks) * BR; \
    uvec2 keys = chunk_of(key_range(r0, min(r0 + BR, ROWS) - 1u), split); \
    STAGE_ROWS4(Qt, q, head * ROWS + r0, ROWS - r0, scale()) \
    bvec4 live; \
    ivec4 position; \
    [[unroll]] for (uint i = 0u; i < 4u; ++i) { \
        uint r = r0 + rg * 4u + i; \
        live[i] = r < ROWS; \
        position[i] = query_start() + int(r % TQ); \
    }
// dQ's key tiles, in registers k_next and v_next: FETCH_KEY_TILE(j0) reads tile j0 of k and v as
// quads; STAGE_KEY_TILE(j0, end) stores it as Ks and Vs once every thread is done with the
// previous tile (and the owned rows are staged), then fetches the tile after j0 while the caller
// uses this one.
#define FETCH_KEY_TILE(j0) \
    FETCH_QUADS(k_next, k, head * TK + (j0), TK - (j0), 1.0) \
    FETCH_QUADS(v_next, v, head * TK + (j0), TK - (j0), 1.0)
#define STAGE_KEY_TILE(j0, end) \
    barrier(); \
    STORE_QUADS(Ks, k_next) \
    STORE_QUADS(Vs, v_next) \
    barrier(); \
    if ((j0) + BT < (end)) { FETCH_KEY_TILE((j0) + BT) }
// BR rows of src from row `first` into dst[d * R4 + i / 4][i % 4], and zeros for the dims of the
// last quad past D.
#define STAGE_ROWS4(dst, src, first, valid, factor) \
    for (uint e = lid; e < BR * DQA * 4u; e += WG) { \
        uint i = e / (DQA * 4u), d = e % (DQA * 4u); \
        dst[d * R4 + i / 4u][i % 4u] = i < (valid) && d < D ? float(src.d[((first) + i) * D + d]) * (factor) : 0.0; \
    }
)";

// The forward streams its key tiles as [d][key] (a load feeding 4 multiply-adds, or 8 with KEY_PAIRS), its value tiles
// as [key][head-dim quad] where the quads divide evenly among a group's threads (VALUE_QUADS: a load feeding 16), else
// as [d][key] floats. Its first form, key and value tiles both [d][key] floats, took Whisper-tiny's 4 layers 0.739 ms on
// the H100 where this takes 0.717 (value quads alone 0.731, key pairs alone 0.771: bench/results/2026-12-06-session35-h100.md);
// its key tiles as head-dim quads, as the backward kernels read them, 5% longer on the H200 (session 33).
const char* const kBlockedForward = R"(
const uint ON = (D + NT - 1u) / NT;   // head-dim columns per thread
const uint DP = ON * NT;              // head dim padded to whole column sets
const uint CS = BT + 1u;              // float stride of a [d][key] array
const uint CPT = (BT * DP + WG - 1u) / WG;

// A tile's rows of src from key j0 (zeros past TK), d < DP, fetched into registers (all loads in flight at once, and
// while the previous tile is being used) and then stored as dst[d * CS + i].
#define FETCH_COLUMNS(regs, src, j0) \
    [[unroll]] for (uint u = 0u; u < CPT; ++u) { \
        uint e = lid + u * WG, i = e / DP, d = e % DP; \
        regs[u] = e < BT * DP && (j0) + i < TK && d < D ? float(src.d[(head * TK + (j0) + i) * D + d]) : 0.0; \
    }
#define STORE_COLUMNS(dst, regs) \
    [[unroll]] for (uint u = 0u; u < CPT; ++u) { \
        uint e = lid + u * WG; \
        if (e < BT * DP) dst[(e % DP) * CS + e / DP] = regs[u]; \
    }

// The thread's SN keys of a tile: KEY(n). With KEY_PAIRS (SN = 2) they are neighbours, one vec2 of Kt [d][key pair]
// (an odd vec2 stride: a transposing store's pairs spread over the banks); else every NT-th key, floats of Kt [d][key].
#ifdef KEY_PAIRS
#define KEY(n) (2u * tx + (n))
const uint PS = BT / 2u + 1u;  // vec2 stride of Kt
const uint KPT = (BT / 2u * DP + WG - 1u) / WG;  // key pairs a thread fetches
shared vec2 Kt[DP * PS];
#define FETCH_KEYS(j0) \
    [[unroll]] for (uint u = 0u; u < KPT; ++u) { \
        uint e = lid + u * WG, i = e / DP * 2u, d = e % DP; \
        [[unroll]] for (uint w = 0u; w < 2u; ++w) { \
            bool in_range = e < BT / 2u * DP && (j0) + i + w < TK && d < D; \
            k_next[u][w] = in_range ? float(k.d[(head * TK + (j0) + i + w) * D + d]) : 0.0; \
        } \
    }
#define STORE_KEYS \
    [[unroll]] for (uint u = 0u; u < KPT; ++u) { \
        uint e = lid + u * WG; \
        if (e < BT / 2u * DP) Kt[(e % DP) * PS + e / DP] = k_next[u]; \
    }
#define KEY_REGISTERS vec2 k_next[KPT];
#define ADD_KEY_SCORES(a, d) \
    vec2 kk = Kt[(d) * PS + tx]; \
    s[0] += (a) * kk.x; \
    s[1] += (a) * kk.y;
#else
#define KEY(n) (tx + (n) * NT)
shared float Kt[DP * CS];
#define FETCH_KEYS(j0) FETCH_COLUMNS(k_next, k, j0)
#define STORE_KEYS STORE_COLUMNS(Kt, k_next)
#define KEY_REGISTERS float k_next[CPT];
#define ADD_KEY_SCORES(a, d) [[unroll]] for (uint n = 0u; n < SN; ++n) s[n] += (a) * Kt[(d) * CS + KEY(n)];
#endif

// The thread's accumulators: acc[c] holds head dim ACC_DIM(c) of its 4 rows. With VALUE_QUADS the thread's quads are
// tx + q * NT, q < DQ, read from Vs [key][quad] (kBlockedCommon's streamed layout); else its columns tx + c * NT from
// Vt [d][key].
#ifdef VALUE_QUADS
const uint AC = DQ * 4u;
#define ACC_DIM(c) (4u * (tx + (c) / 4u * NT) + (c) % 4u)
shared vec4 Vs[BT * QS];
#define FETCH_VALUES(j0) FETCH_QUADS(v_next, v, head * TK + (j0), TK - (j0), 1.0)
#define STORE_VALUES STORE_QUADS(Vs, v_next)
#define VALUE_REGISTERS vec4 v_next[QPT];
#define ADD_VALUES(p, jj) \
    [[unroll]] for (uint q = 0u; q < DQ; ++q) { \
        vec4 vq = Vs[(jj) * QS + tx + q * NT]; \
        [[unroll]] for (uint j = 0u; j < 4u; ++j) acc[q * 4u + j] += (p) * vq[j]; \
    }
#else
const uint AC = ON;
#define ACC_DIM(c) (tx + (c) * NT)
shared float Vt[DP * CS];
#define FETCH_VALUES(j0) FETCH_COLUMNS(v_next, v, j0)
#define STORE_VALUES STORE_COLUMNS(Vt, v_next)
#define VALUE_REGISTERS float v_next[CPT];
#define ADD_VALUES(p, jj) [[unroll]] for (uint c = 0u; c < ON; ++c) acc[c] += (p) * Vt[(tx + c * NT) * CS + (jj)];
#endif

// The next key tile: stored once every thread is done with the previous one, then the one after it fetched while the
// caller uses this one.
#define FETCH_FORWARD_TILE(j0) FETCH_KEYS(j0) FETCH_VALUES(j0)
#define STAGE_FORWARD_TILE(j0, end) \
    barrier(); \
    STORE_KEYS \
    STORE_VALUES \
    barrier(); \
    if ((j0) + BT < (end)) { FETCH_FORWARD_TILE((j0) + BT) }

shared vec4 Qt[DQA * 4u * R4];
shared vec4 Pt[BT * R4];
#ifdef GROUP_SHUFFLES
// The maximum and the sum of v over the group's NT threads: a butterfly of shuffles within NT consecutive invocations.
vec4 group_max(vec4 v) {
    [[unroll]] for (uint o = NT / 2u; o > 0u; o /= 2u) v = max(v, subgroupShuffleXor(v, o));
    return v;
}
vec4 group_sum(vec4 v) {
    [[unroll]] for (uint o = NT / 2u; o > 0u; o /= 2u) v += subgroupShuffleXor(v, o);
    return v;
}
#else
shared vec4 Red[RG * NT];  // the group's threads' maxima, then sums
#endif

void main() {
    BLOCKED_QUERY_BLOCK
    vec4 acc[AC];
    [[unroll]] for (uint c = 0u; c < AC; ++c) acc[c] = vec4(0.0);
    vec4 m = vec4(NEG_INF), l = vec4(0.0);  // l: this thread's share of the row sums
    KEY_REGISTERS
    VALUE_REGISTERS
    FETCH_FORWARD_TILE(keys.x)
    for (uint j0 = keys.x; j0 < keys.y; j0 += BT) {
        STAGE_FORWARD_TILE(j0, keys.y)
        vec4 s[SN];
        [[unroll]] for (uint n = 0u; n < SN; ++n) s[n] = vec4(0.0);
        HEAD_DIM(d) {
            vec4 a = Qt[d * R4 + rg];
            ADD_KEY_SCORES(a, d)
        }
        vec4 tile_max = vec4(NEG_INF);
        [[unroll]] for (uint n = 0u; n < SN; ++n) {
            uint j = j0 + KEY(n);
            [[unroll]] for (uint i = 0u; i < 4u; ++i) {
                if (!(live[i] && j < keys.y && sees(position[i], j))) s[n][i] = NEG_INF;
            }
            tile_max = max(tile_max, s[n]);
        }
#ifdef GROUP_SHUFFLES
        tile_max = group_max(tile_max);
#else
        Red[rg * NT + tx] = tile_max;
        barrier();
        [[unroll]] for (uint t = 0u; t < NT; ++t) tile_max = max(tile_max, Red[rg * NT + t]);
#endif
        vec4 m_new = max(m, tile_max);
        vec4 base = mix(m_new, vec4(0.0), isinf(m_new));  // a row that has seen no key: p = 0
        vec4 alpha = exp(m - base);
        m = m_new;
        l *= alpha;
        [[unroll]] for (uint c = 0u; c < AC; ++c) acc[c] *= alpha;
        [[unroll]] for (uint n = 0u; n < SN; ++n) {
            vec4 p = exp(s[n] - base);
            l += p;
            Pt[KEY(n) * R4 + rg] = p;
        }
#ifdef GROUP_SHUFFLES
        subgroupBarrier();  // a group's probabilities are read only by its own threads, all in one subgroup
#else
        barrier();
#endif
        [[unroll]] for (uint jj = 0u; jj < BT; ++jj) {
            vec4 p = Pt[jj * R4 + rg];
            ADD_VALUES(p, jj)
        }
    }
    // The row sums across the group's threads.
#ifdef GROUP_SHUFFLES
    vec4 total = group_sum(l);
#else
    Red[rg * NT + tx] = l;  // every read of Red above precedes the last barrier
    barrier();
    vec4 total = vec4(0.0);
    [[unroll]] for (uint t = 0u; t < NT; ++t) total += Red[rg * NT + t];
#endif
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
        if (!live[i]) continue;
        uint r = head * ROWS + r0 + rg * 4u + i;
#ifdef SPLIT
        // The chunk's record for the combine kernel (attention_decode.cpp): unnormalized sums, then m and l.
        uint pbase = (r * SPLITS + split) * (D + 2u);
        [[unroll]] for (uint c = 0u; c < AC; ++c) {
            uint d = ACC_DIM(c);
            if (d < D) part.d[pbase + d] = acc[c][i];
        }
        if (tx == 0u) {
            part.d[pbase + D] = m[i];
            part.d[pbase + D + 1u] = total[i];
        }
#else
        float inv = total[i] > 0.0 ? 1.0 / total[i] : 0.0;  // a row that sees no key yields zeros
        [[unroll]] for (uint c = 0u; c < AC; ++c) {
            uint d = ACC_DIM(c);
            if (d < D) o.d[out_row(r) * D + d] = STORE(acc[c][i] * inv);
        }
        if (tx == 0u) lse.d[r] = total[i] > 0.0 ? m[i] + log(total[i]) : NEG_INF;
#endif
    }
#ifdef COMBINE
    combine_block(head, r0, qblock);
#endif
}
)";

const char* const kBlockedGradQ = R"(
shared vec4 Qt[DQA * 4u * R4];
shared vec4 Ot[DQA * 4u * R4];
shared vec4 Ks[BT * QS];
shared vec4 Vs[BT * QS];
shared vec4 St[BT * R4];

void main() {
    BLOCKED_QUERY_BLOCK
    STAGE_ROWS4(Ot, dout, head * ROWS + r0, ROWS - r0, 1.0)
    vec4 row_lse, row_delta;
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
        uint r = head * ROWS + r0 + rg * 4u + i;
        row_lse[i] = live[i] ? lse.d[r] : 0.0;
        row_delta[i] = live[i] ? delta.d[r] : 0.0;
    }
    vec4 acc[DQ * 4u];  // acc[c * 4 + j]: head dim 4 * (tx + c * NT) + j of the 4 rows
    [[unroll]] for (uint c = 0u; c < DQ * 4u; ++c) acc[c] = vec4(0.0);
    vec4 k_next[QPT], v_next[QPT];
    FETCH_KEY_TILE(keys.x)
    for (uint j0 = keys.x; j0 < keys.y; j0 += BT) {
        STAGE_KEY_TILE(j0, keys.y)
        vec4 s[SN], dp[SN];
        [[unroll]] for (uint n = 0u; n < SN; ++n) { s[n] = vec4(0.0); dp[n] = vec4(0.0); }
        QUAD_SCORES(Qt, Ot, Ks, Vs)
        [[unroll]] for (uint n = 0u; n < SN; ++n) {
            uint j = j0 + tx + n * NT;
            vec4 ds = exp(s[n] - row_lse) * (dp[n] - row_delta);
            [[unroll]] for (uint i = 0u; i < 4u; ++i) {
                if (!(live[i] && j < keys.y && sees(position[i], j))) ds[i] = 0.0;
            }
            St[(tx + n * NT) * R4 + rg] = ds;
        }
        barrier();
        [[unroll]] for (uint jj = 0u; jj < BT; ++jj) {
            vec4 ds = St[jj * R4 + rg];
            [[unroll]] for (uint c = 0u; c < DQ; ++c) {
                vec4 kq = Ks[jj * QS + tx + c * NT];
                [[unroll]] for (uint j = 0u; j < 4u; ++j) acc[c * 4u + j] += ds * kq[j];
            }
        }
    }
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
        if (!live[i]) continue;
        uint r = head * ROWS + r0 + rg * 4u + i;
        [[unroll]] for (uint c = 0u; c < DQ * 4u; ++c) {
            uint d = 4u * (tx + c / 4u * NT) + c % 4u;
#ifdef SPLIT
            // The chunk's partial sums, [SPLITS][rows][D], which the sum kernel adds in chunk order.
            if (d < D) part.d[(split * HEADS * ROWS + r) * D + d] = acc[c][i] * scale();
#else
            if (d < D) dq.d[out_row(r) * D + d] = STORE(acc[c][i] * scale());
#endif
        }
    }
#ifdef COMBINE
    sum_block(qblock, head * ROWS + r0, min(r0 + BR, ROWS) - r0);
#endif
}
)";

const char* const kBlockedGradKV = R"(
shared vec4 Kt[DQA * 4u * R4];
shared vec4 Vt[DQA * 4u * R4];
shared vec4 Qs[BT * QS];
shared vec4 Os[BT * QS];
shared vec4 Pt[BT * R4];
shared vec4 St[BT * R4];

#ifdef STORE_SCORES
// The tile's dS (St: its query rows by the block's keys) times the scale, into scores [HEADS * ROWS][TK] from row
// `row` (those of queries before `end`), from which dQ = dS K is a matmul (grad_q_from_scores). Consecutive threads
// store consecutive keys of a row: the BR keys of the block as whole vec4s where TK is a multiple of 4 (a thread's
// own 4 keys of 16 rows took a quarter of the kernel's time more on the H200, Whisper-tiny's encoder).
void store_scores(uint row, uint t0, uint end, uint j0) {
    [[unroll]] for (uint u = 0u; u < BT * RG / WG; ++u) {
        uint e = gl_LocalInvocationID.x + u * WG, i = e / RG, key = j0 + (e % RG) * 4u;
        if (t0 + i >= end) continue;
        vec4 v = St[i * R4 + e % RG] * scale();
#ifdef SCORES4
        if (key < TK) scores4.d[((row + i) * TK + key) / 4u] = v;
#else
        [[unroll]] for (uint c = 0u; c < 4u; ++c) {
            if (key + c < TK) scores.d[(row + i) * TK + key + c] = v[c];
        }
#endif
    }
}
#endif

void main() {
    BLOCK_THREAD
    KEY_BLOCK
    int s0 = query_start();
    uvec2 queries = query_range(j0, min(j0 + BR, TK) - 1u);
    STAGE_ROWS4(Kt, k, head * TK + j0, TK - j0, 1.0)
    STAGE_ROWS4(Vt, v, head * TK + j0, TK - j0, 1.0)
    uvec4 key = uvec4(j0 + rg * 4u) + uvec4(0u, 1u, 2u, 3u);
    bvec4 live = lessThan(key, uvec4(TK));
    vec4 dk_acc[DQ * 4u], dv_acc[DQ * 4u];  // [c * 4 + j]: head dim 4 * (tx + c * NT) + j of the 4 keys
    [[unroll]] for (uint c = 0u; c < DQ * 4u; ++c) { dk_acc[c] = vec4(0.0); dv_acc[c] = vec4(0.0); }
    // One step per tile of BT query rows of each of the G heads; the next step's tile is fetched
    // into registers while this one is used.
    uint per_head = (queries.y - queries.x + BT - 1u) / BT;
    uvec2 steps = steps_of(G * per_head, split);
#define QUERY_TILE(step) \
    uint t0 = queries.x + ((step) % per_head) * BT, rbase = head * ROWS + (step) / per_head * TQ + t0;
    vec4 q_next[QPT], o_next[QPT];
    if (steps.x < steps.y) {
        QUERY_TILE(steps.x)
        FETCH_QUADS(q_next, q, rbase, queries.y - t0, scale())
        FETCH_QUADS(o_next, dout, rbase, queries.y - t0, 1.0)
    }
    for (uint step = steps.x; step < steps.y; ++step) {
        barrier();  // the previous tile is consumed
        STORE_QUADS(Qs, q_next)
        STORE_QUADS(Os, o_next)
        barrier();
        if (step + 1u < steps.y) {
            QUERY_TILE(step + 1u)
            FETCH_QUADS(q_next, q, rbase, queries.y - t0, scale())
            FETCH_QUADS(o_next, dout, rbase, queries.y - t0, 1.0)
        }
        QUERY_TILE(step)
        vec4 s[SN], dp[SN];
        float row_lse[SN], row_delta[SN];  // read now, used after the products
        [[unroll]] for (uint n = 0u; n < SN; ++n) {
            s[n] = vec4(0.0);
            dp[n] = vec4(0.0);
            bool in_range = t0 + tx + n * NT < queries.y;
            row_lse[n] = in_range ? lse.d[rbase + tx + n * NT] : 0.0;
            row_delta[n] = in_range ? delta.d[rbase + tx + n * NT] : 0.0;
        }
        QUAD_SCORES(Kt, Vt, Qs, Os)
        [[unroll]] for (uint n = 0u; n < SN; ++n) {
            uint i = tx + n * NT, t = t0 + i;
            vec4 p = exp(s[n] - row_lse[n]);
            vec4 ds = p * (dp[n] - row_delta[n]);
            [[unroll]] for (uint c = 0u; c < 4u; ++c) {
                if (!(live[c] && t < queries.y && sees(s0 + int(t), key[c]))) { p[c] = 0.0; ds[c] = 0.0; }
            }
            Pt[i * R4 + rg] = p;
            St[i * R4 + rg] = ds;
        }
        barrier();
#ifdef STORE_SCORES
        store_scores(rbase, t0, queries.y, j0);
#endif
        [[unroll]] for (uint i = 0u; i < BT; ++i) {
            vec4 p = Pt[i * R4 + rg], ds = St[i * R4 + rg];
            [[unroll]] for (uint c = 0u; c < DQ; ++c) {
                uint at = i * QS + tx + c * NT;
                vec4 oq = Os[at], qq = Qs[at];  // Qs holds scale * q
                [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                    dv_acc[c * 4u + j] += p * oq[j];
                    dk_acc[c * 4u + j] += ds * qq[j];
                }
            }
        }
    }
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
        if (!live[i]) continue;
#ifdef SPLIT
        // The chunk's partial sums, [SPLITS][dK, dV][HEADS * TK][D], which the sum kernel adds in chunk order.
        uint at = (2u * split * HEADS * TK + head * TK + key[i]) * D, dv_at = at + HEADS * TK * D;
        [[unroll]] for (uint c = 0u; c < DQ * 4u; ++c) {
            uint d = 4u * (tx + c / 4u * NT) + c % 4u;
            if (d < D) {
                part.d[at + d] = dk_acc[c][i];
                part.d[dv_at + d] = dv_acc[c][i];
            }
        }
#else
        uint dk_at = kv_row(head * TK + key[i]) * D, dv_at = dv_row(head * TK + key[i]) * D;
        [[unroll]] for (uint c = 0u; c < DQ * 4u; ++c) {
            uint d = 4u * (tx + c / 4u * NT) + c % 4u;
            if (d < D) {
                dk.d[dk_at + d] = STORE(dk_acc[c][i]);
                dv.d[dv_at + d] = STORE(dv_acc[c][i]);
            }
        }
#endif
    }
#ifdef COMBINE
    sum_block(kblock, head * TK + j0, min(j0 + BR, TK) - j0);
#endif
}
)";

const char* const kGroupShuffles = "#extension GL_KHR_shader_subgroup_shuffle : require\n#define GROUP_SHUFFLES\n";

// The smallest size leaves each invocation the most registers (Intel's SIMD8-32). On the H200 the reductions in
// subgroups took Whisper-tiny's forward from 0.793 to 0.760 ms (measured as clustered subgroup operations:
// bench/results/2026-12-05-h200-session34.md).
uint32_t group_shuffle_subgroup(uint32_t group, uint32_t threads, uint32_t min_subgroup, uint32_t max_subgroup) {
    const uint32_t size = std::max(group, min_subgroup);  // both powers of two: a group divides it
    return min_subgroup && size <= max_subgroup && threads % size == 0 ? size : 0;
}

namespace {

struct ForwardLayout {
    bool key_pairs;    // KEY_PAIRS: a thread's 2 keys of a tile are neighbours
    bool value_quads;  // VALUE_QUADS: the head-dim quads divide evenly among a group's threads
};

ForwardLayout forward_layout(uint64_t tile, uint64_t threads, uint64_t dim) {
    return {tile == 2 * threads, dim % 4 == 0 && dim / 4 % threads == 0};
}

}  // namespace

std::string blocked_forward_defines(uint32_t tile, uint32_t threads, uint64_t dim) {
    const ForwardLayout f = forward_layout(tile, threads, dim);
    return std::string(f.key_pairs ? "#define KEY_PAIRS\n" : "") + (f.value_quads ? "#define VALUE_QUADS\n" : "");
}

uint64_t blocked_shared_bytes(BlockedKind kind, uint64_t rows, uint64_t tile, uint64_t threads, uint64_t dim) {
    const uint64_t quads = (dim + 3) / 4;
    const uint64_t owned = 4 * 4 * quads * (rows / 4 + 1);                                  // [d][row group] vec4s
    const uint64_t quad_rows = 4 * tile * ((quads + threads - 1) / threads * threads | 1);  // [tile row][quad] vec4s
    const uint64_t scores = 4 * tile * (rows / 4 + 1);                                      // [tile row][row group] vec4s
    switch (kind) {
        case BlockedKind::Forward: {
            const ForwardLayout f = forward_layout(tile, threads, dim);
            const uint64_t padded = (dim + threads - 1) / threads * threads;
            const uint64_t columns = padded * (tile + 1);  // [d][key] floats
            const uint64_t keys = f.key_pairs ? 2 * padded * (tile / 2 + 1) : columns, values = f.value_quads ? quad_rows : columns;
            return 4 * (owned + keys + values + scores + rows * threads);  // Red counted, as without GROUP_SHUFFLES
        }
        case BlockedKind::GradQ: return 4 * (2 * owned + 2 * quad_rows + scores);
        case BlockedKind::GradKV: return 4 * (2 * owned + 2 * quad_rows + 2 * scores);
    }
    return 0;
}

}  // namespace mn::codegen
