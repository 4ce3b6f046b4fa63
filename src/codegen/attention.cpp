// Attention family: flash-style forward and backward, the score matrix never leaving shared memory.
//
// The query heads of one kv head are taken together: q viewed as [B*Hkv, ROWS = G*Tq, D] (row
// r = g*Tq + t is query t of head kv*G + g), so one staged K/V tile serves the whole group. A
// workgroup owns BR rows, TPR threads per row; each thread owns the columns d = lane + c*TPR of its
// row (neighbouring threads touch neighbouring shared words). The other operand streams through
// shared memory BT rows at a time. Per tile, each thread computes the scores of its row for the
// tile entries jj = lane + n*TPR into shared memory; after a barrier every thread of the row reads
// the whole score row back, so no cross-thread reduction is needed.
//
//   forward: rows = query rows; online softmax (running max m, sum l, rescaled accumulator) over
//            key tiles; writes out and the row's logsumexp m + log(l) for the backward.
//   dQ:      rows = query rows; recomputes P = exp(s - lse), dS = P (dO.v - delta) per key tile,
//            accumulates dQ = scale * dS K.
//   dK, dV:  rows = key rows; loops over every query row of the group (all G heads), so each
//            workgroup owns its keys' gradients outright: no atomics, deterministic sums.
// delta = rowsum(dO * out) comes from a small kernel of its own.
//
// Causal masks let a block skip whole tiles: only keys [begin, end) that some row of the block
// can see are staged (key_range), and only query rows that can see some key of the block are
// visited (query_range). Shapes, the mask and the scale are specialization constants; the tile
// sizes are #defines because they fix the workgroup size and the shared arrays, and so is the
// head-dim chunk HC of the dot products (see HEAD_DIM).
//
// A forward with few rows on a device they leave idle (decode) splits its keys in SPLITS chunks,
// one workgroup each (SPLIT: the forward stores the chunk's partials; attention_decode.cpp).
//
// The forward's variants, in order: the cooperative-matrix one in precision fast
// (attention_coop.cpp), then flash-decoding for few rows, the blocked kernels for many, the row-wise
// ones; the choice names the variant and why the cooperative one declined where it could have run.
#include <algorithm>

#include "codegen/attention_blocked.hpp"
#include "codegen/attention_coop.hpp"
#include "codegen/attention_decode.hpp"
#include "codegen/families.hpp"

namespace mn::codegen {

namespace {

const char* const kCommon = R"(
#extension GL_EXT_control_flow_attributes : require
const uint ROWS = G * TQ;       // rows per kv head
const uint DS = D + 1u;         // padded shared row stride: rows read across threads hit distinct banks
const uint DPT = (D + TPR - 1u) / TPR;  // columns per thread
const uint SS = BT + 1u;
#define NEG_INF uintBitsToFloat(0xff800000u)

float scale() { return uintBitsToFloat(SCALE_BITS); }

int query_start() {
#ifdef DYNAMIC_START
    return start.d[0];
#else
    return int(QSTART);  // the uint constant carries the int's bits
#endif
}

// Whether the query at `position` sees key j.
bool sees(int position, uint j) {
    if (CAUSAL == 0u) return true;
    int jj = int(j);
    return jj <= position && (WINDOW == 0u || jj > position - int(WINDOW));
}

// Keys [x, y) that some row of r0..r1 (inclusive) may see. Rows of several heads repeat
// positions, so a block that crosses a head boundary spans every position.
uvec2 key_range(uint r0, uint r1) {
    if (CAUSAL == 0u) return uvec2(0u, TK);
    int s = query_start();
    int lo = s + int(r0 % TQ), hi = s + int(r1 % TQ);
    if (r1 / TQ != r0 / TQ) { lo = s; hi = s + int(TQ) - 1; }
    int begin = WINDOW == 0u ? 0 : lo - int(WINDOW) + 1;
    return uvec2(uint(clamp(begin, 0, int(TK))), uint(clamp(hi + 1, 0, int(TK))));
}

#ifndef SPLIT
const uint SPLITS = 1u;
#endif
// Chunk `split` of the keys [x, y): SPLITS chunks of whole BT-key tiles, cut from the keys the rows
// can see at run time, so a short visible range leaves the last chunks empty and none is masked.
uvec2 chunk_of(uvec2 keys, uint split) {
    uint per = ((keys.y - keys.x + SPLITS - 1u) / SPLITS + BT - 1u) / BT * BT;
    uint begin = min(keys.x + split * per, keys.y);
    return uvec2(begin, min(begin + per, keys.y));
}

// Query indices [x, y) of one head that may see some key of j0..j1 (inclusive).
uvec2 query_range(uint j0, uint j1) {
    if (CAUSAL == 0u) return uvec2(0u, TQ);
    int s = query_start();
    int begin = int(j0) - s;
    int end = WINDOW == 0u ? int(TQ) : int(j1) + int(WINDOW) - s;
    return uvec2(uint(clamp(begin, 0, int(TQ))), uint(clamp(end, 0, int(TQ))));
}

// Loops over a thread's columns and over a score row are unrolled (so the accumulators stay in
// registers), dot products over the head dim in unrolled chunks of HC (a divisor of D). Lavapipe
// needs the latter: its JIT silently ends a shader invocation's loops once they have run 65535
// iterations in all (gallivm's loop limiter), which a long key sweep reached with one iteration
// per multiply-add; unrolling the whole dot product instead made its compiles take a minute. Sweeps
// too long even so take the blocked kernels there, or are refused (use_blocked, check_loop_limit).
#define HEAD_DIM(d) \
    for (uint d##_0 = 0u; d##_0 < D; d##_0 += HC) [[unroll]] for (uint d##_u = 0u, d = d##_0; d##_u < HC; ++d##_u, ++d)

// The block of query rows this workgroup owns: its head, first row r0, this thread's row r (live
// when inside), the row's position among the keys and the key range the block can see.
#define QUERY_BLOCK \
    uint lid = gl_LocalInvocationID.x, row = lid / TPR, lane = lid % TPR; \
    uint blocks = (ROWS + BR - 1u) / BR; \
    uint g = mn_group_id(); \
    if (g >= HEADS * blocks * SPLITS) return; \
    uint split = g % SPLITS, qblock = g / SPLITS; \
    uint head = qblock / blocks, r0 = (qblock % blocks) * BR, r = r0 + row; \
    bool live = r < ROWS; \
    int position = query_start() + int(r % TQ); \
    uvec2 keys = chunk_of(key_range(r0, min(r0 + BR, ROWS) - 1u), split);
// Stages the key and value rows j0..j0+BT of `head` into Ks and Vs (zeros past TK).
#define STAGE_KV(j0) \
    for (uint e = lid; e < BT * D; e += WG) { \
        uint jj = e / D, at = (head * TK + j0) * D + e; \
        bool in_range = j0 + jj < TK; \
        Ks[jj * DS + e % D] = in_range ? float(k.d[at]) : 0.0; \
        Vs[jj * DS + e % D] = in_range ? float(v.d[at]) : 0.0; \
    }
)";

const char* const kForward = R"(
shared float Qs[BR * DS];
shared float Ks[BT * DS];
shared float Vs[BT * DS];
shared float Ss[BR * SS];

void main() {
    QUERY_BLOCK

    uint qbase = (head * ROWS + r0) * D;
    for (uint e = lid; e < BR * D; e += WG) {
        uint i = e / D;
        Qs[i * DS + e % D] = r0 + i < ROWS ? float(q.d[qbase + e]) * scale() : 0.0;
    }
    float acc[DPT];
    [[unroll]] for (uint c = 0u; c < DPT; ++c) acc[c] = 0.0;
    float m = NEG_INF, l = 0.0;
    for (uint j0 = keys.x; j0 < keys.y; j0 += BT) {
        barrier();  // the previous tile is consumed (and Qs staged, on the first pass)
        STAGE_KV(j0)
        barrier();
        for (uint jj = lane; jj < BT; jj += TPR) {
            uint j = j0 + jj;
            float s = NEG_INF;
            if (live && j < keys.y && sees(position, j)) {
                s = 0.0;
                HEAD_DIM(d) s += Qs[row * DS + d] * Ks[jj * DS + d];
            }
            Ss[row * SS + jj] = s;
        }
        barrier();
        float tile_max = NEG_INF;
        [[unroll]] for (uint jj = 0u; jj < BT; ++jj) tile_max = max(tile_max, Ss[row * SS + jj]);
        float m_new = max(m, tile_max);
        if (m_new == NEG_INF) continue;  // nothing seen yet: acc and l stay 0
        float alpha = exp(m - m_new);
        l *= alpha;
        [[unroll]] for (uint c = 0u; c < DPT; ++c) acc[c] *= alpha;
        for (uint jj = 0u; jj < BT; ++jj) {
            float p = exp(Ss[row * SS + jj] - m_new);
            l += p;
            [[unroll]] for (uint c = 0u; c < DPT; ++c) {
                uint d = lane + c * TPR;
                if (d < D) acc[c] += p * Vs[jj * DS + d];
            }
        }
        m = m_new;
    }
    if (!live) return;
#ifdef SPLIT
    // The chunk's record for the combine kernel: unnormalized sums, then m and l.
    uint pbase = ((head * ROWS + r) * SPLITS + split) * (D + 2u);
    [[unroll]] for (uint c = 0u; c < DPT; ++c) {
        uint d = lane + c * TPR;
        if (d < D) part.d[pbase + d] = acc[c];
    }
    if (lane == 0u) {
        part.d[pbase + D] = m;
        part.d[pbase + D + 1u] = l;
    }
#else
    float inv = l > 0.0 ? 1.0 / l : 0.0;  // a row that sees no key yields zeros
    uint obase = out_row(head * ROWS + r) * D;
    [[unroll]] for (uint c = 0u; c < DPT; ++c) {
        uint d = lane + c * TPR;
        if (d < D) o.d[obase + d] = STORE(acc[c] * inv);
    }
    if (lane == 0u) lse.d[head * ROWS + r] = l > 0.0 ? m + log(l) : NEG_INF;
#endif
}
)";

const char* const kGradQ = R"(
shared float Qs[BR * DS];
shared float Os[BR * DS];
shared float Ks[BT * DS];
shared float Vs[BT * DS];
shared float Ss[BR * SS];

void main() {
    QUERY_BLOCK
    float row_lse = live ? lse.d[head * ROWS + r] : 0.0;
    float row_delta = live ? delta.d[head * ROWS + r] : 0.0;

    uint qbase = (head * ROWS + r0) * D;
    for (uint e = lid; e < BR * D; e += WG) {
        uint i = e / D;
        bool in_range = r0 + i < ROWS;
        Qs[i * DS + e % D] = in_range ? float(q.d[qbase + e]) * scale() : 0.0;
        Os[i * DS + e % D] = in_range ? float(dout.d[qbase + e]) : 0.0;
    }
    float acc[DPT];
    [[unroll]] for (uint c = 0u; c < DPT; ++c) acc[c] = 0.0;
    for (uint j0 = keys.x; j0 < keys.y; j0 += BT) {
        barrier();
        STAGE_KV(j0)
        barrier();
        for (uint jj = lane; jj < BT; jj += TPR) {
            uint j = j0 + jj;
            float ds = 0.0;
            if (live && j < keys.y && sees(position, j)) {
                float s = 0.0, dp = 0.0;
                HEAD_DIM(d) {
                    s += Qs[row * DS + d] * Ks[jj * DS + d];
                    dp += Os[row * DS + d] * Vs[jj * DS + d];
                }
                ds = exp(s - row_lse) * (dp - row_delta);
            }
            Ss[row * SS + jj] = ds;
        }
        barrier();
        for (uint jj = 0u; jj < BT; ++jj) {
            float ds = Ss[row * SS + jj];
            [[unroll]] for (uint c = 0u; c < DPT; ++c) {
                uint d = lane + c * TPR;
                if (d < D) acc[c] += ds * Ks[jj * DS + d];
            }
        }
    }
    if (!live) return;
    uint obase = (head * ROWS + r) * D;
    [[unroll]] for (uint c = 0u; c < DPT; ++c) {
        uint d = lane + c * TPR;
        if (d < D) dq.d[obase + d] = STORE(acc[c] * scale());
    }
}
)";

const char* const kGradKV = R"(
shared float Ks[BR * DS];
shared float Vs[BR * DS];
shared float Qs[BT * DS];
shared float Os[BT * DS];
shared float Ls[BT];
shared float Dl[BT];
shared float Ps[BR * SS];
shared float Gs[BR * SS];

void main() {
    uint lid = gl_LocalInvocationID.x, row = lid / TPR, lane = lid % TPR;
    uint blocks = (TK + BR - 1u) / BR;
    uint g = mn_group_id();
    if (g >= HEADS * blocks) return;
    uint head = g / blocks, j0 = (g % blocks) * BR, j = j0 + row;
    bool live = j < TK;
    int s0 = query_start();
    uvec2 queries = query_range(j0, min(j0 + BR, TK) - 1u);

    uint kbase = (head * TK + j0) * D;
    for (uint e = lid; e < BR * D; e += WG) {
        uint jj = e / D;
        bool in_range = j0 + jj < TK;
        Ks[jj * DS + e % D] = in_range ? float(k.d[kbase + e]) : 0.0;
        Vs[jj * DS + e % D] = in_range ? float(v.d[kbase + e]) : 0.0;
    }
    float dk_acc[DPT], dv_acc[DPT];
    [[unroll]] for (uint c = 0u; c < DPT; ++c) { dk_acc[c] = 0.0; dv_acc[c] = 0.0; }
    for (uint gh = 0u; gh < G; ++gh) {
        for (uint t0 = queries.x; t0 < queries.y; t0 += BT) {
            barrier();
            uint rbase = head * ROWS + gh * TQ + t0;  // the tile's first row
            for (uint e = lid; e < BT * D; e += WG) {
                uint i = e / D;
                bool in_range = t0 + i < queries.y;
                Qs[i * DS + e % D] = in_range ? float(q.d[rbase * D + e]) * scale() : 0.0;
                Os[i * DS + e % D] = in_range ? float(dout.d[rbase * D + e]) : 0.0;
            }
            for (uint i = lid; i < BT; i += WG) {
                bool in_range = t0 + i < queries.y;
                Ls[i] = in_range ? lse.d[rbase + i] : 0.0;
                Dl[i] = in_range ? delta.d[rbase + i] : 0.0;
            }
            barrier();
            for (uint i = lane; i < BT; i += TPR) {
                uint t = t0 + i;
                float p = 0.0, ds = 0.0;
                if (live && t < queries.y && sees(s0 + int(t), j)) {
                    float s = 0.0, dp = 0.0;
                    HEAD_DIM(d) {
                        s += Qs[i * DS + d] * Ks[row * DS + d];
                        dp += Os[i * DS + d] * Vs[row * DS + d];
                    }
                    p = exp(s - Ls[i]);
                    ds = p * (dp - Dl[i]);
                }
                Ps[row * SS + i] = p;
                Gs[row * SS + i] = ds;
            }
            barrier();
            for (uint i = 0u; i < BT; ++i) {
                float p = Ps[row * SS + i], ds = Gs[row * SS + i];
                [[unroll]] for (uint c = 0u; c < DPT; ++c) {
                    uint d = lane + c * TPR;
                    if (d < D) {
                        dv_acc[c] += p * Os[i * DS + d];
                        dk_acc[c] += ds * Qs[i * DS + d];  // Qs holds scale * q
                    }
                }
            }
        }
    }
    if (!live) return;
    uint obase = (head * TK + j) * D;
    [[unroll]] for (uint c = 0u; c < DPT; ++c) {
        uint d = lane + c * TPR;
        if (d < D) {
            dk.d[obase + d] = STORE(dk_acc[c]);
            dv.d[obase + d] = STORE(dv_acc[c]);
        }
    }
}
)";

uint32_t pow2_at_least(int64_t v) {
    uint32_t p = 1;
    while (p < v && p < (1u << 30)) p *= 2;
    return p;
}

// What a kernel stages in shared memory: `owned` arrays of [BR, D+1], `streamed` of [BT, D+1],
// `scores` of [BR, BT+1] and `vectors` of [BT].
struct Footprint {
    uint32_t owned, streamed, scores, vectors;
    uint64_t bytes(uint64_t br, uint64_t bt, uint64_t dim) const {
        return 4 * (owned * br * (dim + 1) + streamed * bt * (dim + 1) + scores * br * (bt + 1) + vectors * bt);
    }
};

// The tiles for one problem: no larger than the rows there are (a decode step's few rows get more
// threads each, up to 32, so the workgroup stays as wide), halved (the streamed tile first) until
// the shared arrays fit the device.
AttentionTiles fit(AttentionTiles t, int64_t dim, int64_t own_rows, int64_t stream_rows, const Footprint& fp) {
    const uint32_t threads = std::min(t.rows * t.threads_per_row, t.max_invocations);
    t.rows = std::min(t.rows, pow2_at_least(own_rows));
    t.threads_per_row = std::max(t.threads_per_row, std::min<uint32_t>({threads / t.rows, 32u, pow2_at_least(dim)}));
    while (t.rows > 1 && t.rows * t.threads_per_row > t.max_invocations) t.rows /= 2;
    t.tile = std::min(t.tile, pow2_at_least(stream_rows));
    while (fp.bytes(t.rows, t.tile, static_cast<uint64_t>(dim)) > t.shared_bytes) {
        if (t.tile > 1 && (t.tile >= t.rows || t.rows == 1)) {
            t.tile /= 2;
        } else if (t.rows > 1) {
            t.rows /= 2;
        } else {
            throw Error("[attention] head dim " + std::to_string(dim) + " needs more shared memory than the device's " +
                        std::to_string(t.shared_bytes) + " bytes");
        }
    }
    return t;
}

// The blocked kernels' tiles: rows a power of two from 4 (groups of 4) up to the rows there are,
// the streamed tile a multiple of the threads per group; halved (the tile first) until they fit.
AttentionTiles fit_blocked(AttentionTiles t, int64_t dim, int64_t own_rows, int64_t stream_rows, BlockedKind kind) {
    t.rows = std::max(4u, std::min(std::bit_floor(t.rows), pow2_at_least(own_rows)));
    t.threads_per_row = std::bit_floor(t.threads_per_row);
    t.tile = std::max(t.threads_per_row, std::min(std::bit_floor(t.tile), pow2_at_least(stream_rows)));
    const auto bytes = [&] { return blocked_shared_bytes(kind, t.rows, t.tile, t.threads_per_row, static_cast<uint64_t>(dim)); };
    while (bytes() > t.shared_bytes) {
        if (t.tile > t.threads_per_row && (t.tile >= t.rows || t.rows == 4)) {
            t.tile /= 2;
        } else if (t.rows > 4) {
            t.rows /= 2;
        } else {
            throw Error("[attention] head dim " + std::to_string(dim) + " needs more shared memory than the device's " +
                        std::to_string(t.shared_bytes) + " bytes");
        }
    }
    return t;
}

// Problems with at least this many rows per workgroup's side take the blocked kernels, and so do
// sweeps longer than kLongSweep on a device that limits loop iterations (a decode step over 300,000
// keys passed llvmpipe's limit in the row-wise kernel, 40,000 did not).
constexpr int64_t kBlockedMinRows = 16, kLongSweep = 4096;

bool use_blocked(const AttentionTiles& t, int64_t own_rows, int64_t stream_rows) {
    return t.blocked && (own_rows >= kBlockedMinRows || (t.max_loop_iterations && stream_rows > kLongSweep));
}

// The largest of 8, 4, 2, 1 that divides the head dim: dot products run in unrolled chunks of it.
int64_t head_dim_chunk(int64_t dim) {
    int64_t c = 8;
    while (dim % c != 0) c /= 2;
    return c;
}

// On a device that ends long loops (llvmpipe), a blocked kernel's sweep must fit: its loops run
// once per tile of the sweep and once per head-dim chunk in it (the others are unrolled), over
// `passes` sweeps of `stream_rows` rows. Measured on llvmpipe: 9,375 tiles at head dim 16 pass,
// at head dim 64 (9 loop iterations a tile) they come out wrong.
void check_loop_limit(const AttentionTiles& t, int64_t dim, int64_t stream_rows, int64_t passes) {
    if (!t.max_loop_iterations) return;
    const int64_t per_tile = dim / head_dim_chunk(dim) + 1, budget = int64_t(t.max_loop_iterations) * 9 / 10;
    if (passes * ((stream_rows + t.tile - 1) / t.tile) * per_tile <= budget) return;
    throw Error("[attention] a sweep over " + std::to_string(stream_rows) + " rows (x" + std::to_string(passes) +
                ") at head dim " + std::to_string(dim) + " needs more loop iterations than this device allows one shader "
                "invocation (" + std::to_string(t.max_loop_iterations) + "); at most " +
                std::to_string(budget / per_tile / passes * t.tile) + " rows here");
}

}  // namespace

std::string out_row_glsl(const AttentionSpec& s) {
    if (!s.merged_out) return "uint out_row(uint f) { return f; }\n";
    return heads_row_fn("out_row", std::to_string(s.q_len) + "u", std::to_string(s.q_heads) + "u");
}

namespace {

// The interface and the shared GLSL of the tiled kernels; `bindings` lists the inputs before
// query_start, `outputs` those after it. splits > 0: the forward over that many key chunks.
// `extensions` go right after #version.
KernelSource tiled_kernel(const char* label, const AttentionSpec& s, const AttentionTiles& t, bool blocked,
                          std::vector<Binding> inputs, const std::vector<Binding>& outputs, const std::string& body,
                          uint64_t groups, uint32_t max_groups, uint32_t splits = 0, const std::string& extensions = "") {
    if (s.query_start < INT32_MIN || s.query_start > INT32_MAX) throw Error("[attention] query_start does not fit 32 bits");
    KernelSource k;
    k.label = label;
    k.iface.local_size = (blocked ? t.rows / 4 : t.rows) * t.threads_per_row;
    k.iface.spec_constants = {"HEADS", "G", "TQ", "TK", "D", "CAUSAL", "WINDOW", "QSTART", "SCALE_BITS"};
    k.spec_values = {checked_u32(s.batch * s.kv_heads, "attention heads"), checked_u32(s.q_heads / s.kv_heads, "attention group"),
                     checked_u32(s.q_len, "attention length"), checked_u32(s.kv_len, "attention length"),
                     checked_u32(s.head_dim, "attention head dim"), s.causal ? 1u : 0u,
                     checked_u32(s.window, "attention window"),
                     static_cast<uint32_t>(static_cast<int32_t>(s.query_start)), float_bits(s.scale)};
    if (splits) {
        k.iface.spec_constants.push_back("SPLITS");
        k.spec_values.push_back(splits);
    }
    checked_u32(s.batch * s.q_heads * std::max(s.q_len, s.kv_len) * s.head_dim, "attention tensor size");
    if (s.dynamic_start) inputs.push_back({"start", DType::I32});
    k.iface.bindings = std::move(inputs);
    k.iface.bindings.insert(k.iface.bindings.end(), outputs.begin(), outputs.end());
    const std::string defs = std::string(s.dynamic_start ? "#define DYNAMIC_START\n" : "") + (splits ? "#define SPLIT\n" : "") +
                             "#define BR " + std::to_string(t.rows) + "u\n#define TPR " +
                             std::to_string(t.threads_per_row) + "u\n#define BT " + std::to_string(t.tile) +
                             "u\n#define HC " + std::to_string(head_dim_chunk(s.head_dim)) +
                             "u\n#define STORE " + storage_type(s.dtype) + "\n";
    k.glsl = glsl_preamble(k.iface) + defs + out_row_glsl(s) + kFlatGroupId + kCommon + (blocked ? kBlockedCommon : "") + body;
    k.glsl.insert(k.glsl.find('\n') + 1, extensions);
    k.groups = grid_for(groups, max_groups);
    return k;
}

uint64_t blocks_of(int64_t n, uint32_t block) { return static_cast<uint64_t>((n + block - 1) / block); }

// What the f32 kernels of a problem are, for KernelSource::choice: blocked or row-wise, over how many
// owned rows, `more`, and why the cooperative kernels declined where they could have run.
std::string f32_choice(bool blocked, int64_t own_rows, const char* owned, int64_t stream_rows, const char* streamed,
                       const AttentionTiles& tiles, const std::string& coop_declined, const std::string& more = "") {
    const std::string rows = std::to_string(own_rows) + owned;
    std::string choice = !blocked ? "row-wise: " + rows
                         : own_rows >= kBlockedMinRows
                             ? "blocked: " + rows
                             : "blocked: a sweep of " + std::to_string(stream_rows) + streamed + " past the device's loop limit";
    return choice + more + (tiles.coop_subgroup ? "; cooperative declined: " + coop_declined : "");
}

}  // namespace

AttentionForwardKernels attention_forward_kernels(const AttentionSpec& s, const AttentionTiles& tiles, const Launch& launch) {
    const int64_t rows = s.q_len * (s.q_heads / s.kv_heads);
    const std::vector<Binding> qkv = {{"q", s.dtype}, {"k", s.dtype}, {"v", s.dtype}};
    const std::string row_count = std::to_string(rows) + " rows per kv head";
    const std::vector<Binding> out_lse = {{"o", s.dtype, true}, {"lse", DType::F32, true}};
    AttentionForwardKernels out;
    AttentionTiles coop = tiles;
    const std::string coop_declined = fit_coop(CoopKind::Forward, s, coop);
    if (coop_declined.empty()) {
        out.forward = tiled_kernel("attention_coop", s, coop, false, qkv, out_lse, coop_forward_glsl(s),
                                   static_cast<uint64_t>(s.batch * s.kv_heads) * blocks_of(rows, coop.rows),
                                   launch.max_groups, 0, coop_extensions());
        out.forward.required_subgroup_size = coop.coop_subgroup;
        out.forward.choice = "cooperative: " + row_count + ", " + std::to_string(coop.rows) + " per workgroup, " +
                             std::to_string(coop.tile) + "-key tiles";
        return out;
    }
    // Said only where the device and precision would have run it.
    const std::string not_coop = tiles.coop_subgroup ? "; cooperative declined: " + coop_declined : "";
    std::string not_split;
    if (!tiles.blocked || rows < kBlockedMinRows) {
        const AttentionTiles t = fit(tiles, s.head_dim, rows, s.kv_len, {1, 2, 1, 0});
        const uint64_t groups = static_cast<uint64_t>(s.batch * s.kv_heads) * blocks_of(rows, t.rows);
        const KeySplit split = choose_key_split(s, t, groups, kLongSweep);
        if (split.splits > 1) {
            out.forward = tiled_kernel("attention_chunks", s, t, false, qkv, {{"part", DType::F32, true}}, kForward,
                                       groups * split.splits, launch.max_groups, split.splits);
            out.forward.choice = "row-wise, " + row_count + ", keys in " + std::to_string(split.splits) + " chunks of " +
                                 std::to_string(split.chunk) + " (flash-decoding): " + split.why + not_coop;
            out.combine = attention_combine_kernel(s, split.splits, launch);
            out.partial_elements = s.batch * s.q_heads * s.q_len * split.splits * (s.head_dim + 2);
            return out;
        }
        not_split = "; keys not split: " + split.why;
    }
    const bool blocked = use_blocked(tiles, rows, s.kv_len);
    const AttentionTiles t = blocked ? fit_blocked(tiles, s.head_dim, rows, s.kv_len, BlockedKind::Forward)
                                     : fit(tiles, s.head_dim, rows, s.kv_len, {1, 2, 1, 0});
    if (blocked) check_loop_limit(t, s.head_dim, s.kv_len, 1);
    out.forward = tiled_kernel("attention", s, t, blocked, qkv, out_lse, blocked ? kBlockedForward : kForward,
                               static_cast<uint64_t>(s.batch * s.kv_heads) * blocks_of(rows, t.rows), launch.max_groups);
    out.forward.choice = f32_choice(blocked, rows, " rows per kv head", s.kv_len, " keys", tiles, coop_declined, not_split);
    return out;
}

namespace {

// The backward's inputs, then its outputs (dq, or dk and dv); with the cooperative kernels' views of them.
std::vector<Binding> grad_inputs(const AttentionSpec& s) {
    return {{"q", s.dtype}, {"k", s.dtype}, {"v", s.dtype}, {"dout", s.dtype}, {"lse", DType::F32}, {"delta", DType::F32}};
}
std::vector<CoopView> grad_views(const AttentionSpec& s, std::initializer_list<const char*> outputs) {
    std::vector<CoopView> views = {{"q", 0, false}, {"k", 1, false}, {"v", 2, false}, {"dout", 3, false}};
    size_t binding = s.dynamic_start ? 7 : 6;  // after lse, delta and [start]
    for (const char* out : outputs) views.push_back({out, binding++, true});
    return views;
}

// The cooperative kernel of `kind` (label, body) where fit_coop takes the problem, its choice naming the
// owned rows, the workgroup's and the streamed tile's; otherwise nullopt with *declined saying why.
std::optional<KernelSource> coop_grad_kernel(CoopKind kind, const AttentionSpec& s, const AttentionTiles& tiles,
                                             uint32_t max_groups, std::string* declined) {
    AttentionTiles t = tiles;
    *declined = fit_coop(kind, s, t);
    if (!declined->empty()) return std::nullopt;
    const bool kv = kind == CoopKind::GradKV;
    const int64_t own = kv ? s.kv_len : s.q_len * (s.q_heads / s.kv_heads);
    const std::vector<Binding> outputs = kv ? std::vector<Binding>{{"dk", s.dtype, true}, {"dv", s.dtype, true}}
                                            : std::vector<Binding>{{"dq", s.dtype, true}};
    KernelSource k = tiled_kernel(kv ? "attention_grad_kv_coop" : "attention_grad_q_coop", s, t, false, grad_inputs(s),
                                  outputs, coop_glsl(s, kv ? grad_views(s, {"dk", "dv"}) : grad_views(s, {"dq"}),
                                                     kv ? kCoopGradKV : kCoopGradQ),
                                  static_cast<uint64_t>(s.batch * s.kv_heads) * blocks_of(own, t.rows), max_groups, 0,
                                  coop_extensions());
    k.required_subgroup_size = t.coop_subgroup;
    k.choice = "cooperative: " + std::to_string(own) + (kv ? " keys per kv head, " : " rows per kv head, ") +
               std::to_string(t.rows) + " per workgroup, " + std::to_string(t.tile) + (kv ? "-row query tiles" : "-key tiles");
    return k;
}

}  // namespace

KernelSource attention_grad_q_kernel(const AttentionSpec& s, const AttentionTiles& tiles, uint32_t max_groups) {
    std::string coop_declined;
    if (auto k = coop_grad_kernel(CoopKind::GradQ, s, tiles, max_groups, &coop_declined)) return std::move(*k);
    const int64_t rows = s.q_len * (s.q_heads / s.kv_heads);
    const bool blocked = use_blocked(tiles, rows, s.kv_len);
    const AttentionTiles t = blocked ? fit_blocked(tiles, s.head_dim, rows, s.kv_len, BlockedKind::GradQ)
                                     : fit(tiles, s.head_dim, rows, s.kv_len, {2, 2, 1, 0});
    if (blocked) check_loop_limit(t, s.head_dim, s.kv_len, 1);
    KernelSource k = tiled_kernel("attention_grad_q", s, t, blocked, grad_inputs(s), {{"dq", s.dtype, true}},
                                  blocked ? kBlockedGradQ : kGradQ,
                                  static_cast<uint64_t>(s.batch * s.kv_heads) * blocks_of(rows, t.rows), max_groups);
    k.choice = f32_choice(blocked, rows, " rows per kv head", s.kv_len, " keys", tiles, coop_declined);
    return k;
}

KernelSource attention_grad_kv_kernel(const AttentionSpec& s, const AttentionTiles& tiles, uint32_t max_groups) {
    std::string coop_declined;
    if (auto k = coop_grad_kernel(CoopKind::GradKV, s, tiles, max_groups, &coop_declined)) return std::move(*k);
    const int64_t queries = s.q_len * (s.q_heads / s.kv_heads);
    const bool blocked = use_blocked(tiles, s.kv_len, queries);
    const AttentionTiles t = blocked ? fit_blocked(tiles, s.head_dim, s.kv_len, s.q_len, BlockedKind::GradKV)
                                     : fit(tiles, s.head_dim, s.kv_len, s.q_len, {2, 2, 2, 2});
    if (blocked) check_loop_limit(t, s.head_dim, s.q_len, s.q_heads / s.kv_heads);
    KernelSource k = tiled_kernel("attention_grad_kv", s, t, blocked, grad_inputs(s),
                                  {{"dk", s.dtype, true}, {"dv", s.dtype, true}}, blocked ? kBlockedGradKV : kGradKV,
                                  static_cast<uint64_t>(s.batch * s.kv_heads) * blocks_of(s.kv_len, t.rows), max_groups);
    k.choice = f32_choice(blocked, s.kv_len, " keys per kv head", queries, " query rows", tiles, coop_declined);
    return k;
}

KernelSource attention_delta_kernel(DType dtype, int64_t rows, int64_t head_dim, const Launch& launch) {
    KernelSource k;
    k.label = "attention_delta";
    k.iface.local_size = launch.local_size;
    k.iface.spec_constants = {"ROWS", "D"};
    k.spec_values = {checked_u32(rows, "attention rows"), checked_u32(head_dim, "attention head dim")};
    checked_u32(rows * head_dim, "attention tensor size");
    k.iface.bindings = {{"o", dtype}, {"dout", dtype}, {"delta", DType::F32, true}};
    k.glsl = glsl_preamble(k.iface) + kFlatGroupId +
             "void main() {\n"
             "    uint r = mn_group_id() * WG + gl_LocalInvocationID.x;\n"
             "    if (r >= ROWS) return;\n"
             "    float s = 0.0;\n"
             "    for (uint d = 0u; d < D; ++d) s += float(o.d[r * D + d]) * float(dout.d[r * D + d]);\n"
             "    delta.d[r] = s;\n"
             "}\n";
    k.groups = grid_for(blocks_of(rows, launch.local_size), launch.max_groups);
    return k;
}

}  // namespace mn::codegen
