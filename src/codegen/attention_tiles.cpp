// The attention family's shared machinery (attention_tiles.hpp): the GLSL every tiled kernel starts with (positions,
// masks, the key and query ranges a block of rows can see, the staging of K and V tiles), the tiles a problem gets
// within the device's shared memory, and the splits' words for KernelSource::choice.
#include "codegen/attention_tiles.hpp"

#include <algorithm>
#include <bit>

namespace mn::codegen {

std::string out_row_glsl(const AttentionSpec& s) {
    const auto row_fn = [](const char* fn, bool merged, int64_t len, int64_t heads) {
        return merged ? heads_row_fn(fn, std::to_string(len) + "u", std::to_string(heads) + "u")
                      : "uint " + std::string(fn) + "(uint f) { return f; }\n";
    };
    return row_fn("out_row", s.merged_out, s.q_len, s.q_heads) + row_fn("kv_row", s.merged_out, s.kv_len, s.kv_heads) +
           row_fn("dv_row", s.merged_dv, s.kv_len, s.kv_heads);
}

namespace attention_detail {

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

// Chunk `split` of `steps` steps (the dK/dV kernels' query tiles, where they are split): SPLITS runs
// of nearly equal length.
uvec2 steps_of(uint steps, uint split) {
    uint per = (steps + SPLITS - 1u) / SPLITS, begin = min(split * per, steps);
    return uvec2(begin, min(begin + per, steps));
}

// The dK/dV kernels' block of BR keys: its head and first key j0, or an early return past the grid;
// its chunk `split` of the query tiles where they are split (SPLIT).
#define KEY_BLOCK \
    uint blocks = (TK + BR - 1u) / BR; \
    uint g = mn_group_id(); \
    if (g >= HEADS * blocks * SPLITS) return; \
    uint split = g % SPLITS, kblock = g / SPLITS; \
    uint head = kblock / blocks, j0 = (kblock % blocks) * BR;

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
// Stages the key and value rows j0..j0+BT of `head` into Ks and Vs (zeros past TK), up to 16 elements of each a
// thread at a time, all loaded before any is stored. A loop of load-then-store waited out the memory latency once
// per element: a decode step's chunk of 32 keys is 16 of each a thread, and the chunk kernel took ~16 us a layer on
// the H200 for 16 KB; SmolLM2-135M's decode at 4K positions went from 1.49 to 1.38 ms a token with rounds of 8, and
// to 1.33 with 16 and the combine's loads in flight (bench/results/2026-12-03-h200-session21.md).
const uint KV_PER = (BT * D + WG - 1u) / WG;  // elements of each a thread stages
const uint KV_ROUND = KV_PER < 16u ? KV_PER : 16u;
#define STAGE_KV(j0) \
    for (uint u0 = 0u; u0 < KV_PER; u0 += KV_ROUND) { \
        float kr[KV_ROUND], vr[KV_ROUND]; \
        [[unroll]] for (uint u = 0u; u < KV_ROUND; ++u) { \
            uint e = lid + (u0 + u) * WG, at = (head * TK + (j0)) * D + e; \
            bool in_range = e < BT * D && (j0) + e / D < TK; \
            kr[u] = in_range ? float(k.d[at]) : 0.0; \
            vr[u] = in_range ? float(v.d[at]) : 0.0; \
        } \
        [[unroll]] for (uint u = 0u; u < KV_ROUND; ++u) { \
            uint e = lid + (u0 + u) * WG; \
            if (e < BT * D) { \
                Ks[e / D * DS + e % D] = kr[u]; \
                Vs[e / D * DS + e % D] = vr[u]; \
            } \
        } \
    }
)";

uint32_t pow2_at_least(int64_t v) {
    uint32_t p = 1;
    while (p < v && p < (1u << 30)) p *= 2;
    return p;
}

// The largest of 8, 4, 2, 1 that divides the head dim: dot products run in unrolled chunks of it.
int64_t head_dim_chunk(int64_t dim) {
    int64_t c = 8;
    while (dim % c != 0) c /= 2;
    return c;
}

// On a device that ends long loops (llvmpipe), a blocked kernel's sweep must fit: its loops run
// once per tile of the sweep and once per head-dim chunk in it (the others are unrolled). Measured
// on llvmpipe: 9,375 tiles at head dim 16 pass, at head dim 64 (9 loop iterations a tile) they come
// out wrong. The longest sweep, in whole tiles (no limit: INT64_MAX):
int64_t blocked_long_sweep(const AttentionTiles& t, int64_t dim) {
    if (!t.max_loop_iterations) return INT64_MAX;
    const int64_t per_tile = dim / head_dim_chunk(dim) + 1, budget = int64_t(t.max_loop_iterations) * 9 / 10;
    return budget / per_tile * t.tile;
}

// Halves the streamed tile (down to min_tile, while it is at least the rows or the rows are at their least) or else the
// rows (down to min_rows) until `bytes()`, the tiles' shared memory as t now is, fits the device.
template <class Bytes>
AttentionTiles& shrink_to_fit(AttentionTiles& t, int64_t dim, uint32_t min_tile, uint32_t min_rows, Bytes bytes) {
    while (bytes() > t.shared_bytes) {
        if (t.tile > min_tile && (t.tile >= t.rows || t.rows == min_rows)) {
            t.tile /= 2;
        } else if (t.rows > min_rows) {
            t.rows /= 2;
        } else {
            throw Error("[attention] head dim " + std::to_string(dim) + " needs more shared memory than the device's " +
                        std::to_string(t.shared_bytes) + " bytes");
        }
    }
    return t;
}

}  // namespace

AttentionTiles fit(AttentionTiles t, int64_t dim, int64_t own_rows, int64_t stream_rows, const Footprint& fp) {
    const uint32_t threads = std::min(t.rows * t.threads_per_row, t.max_invocations);
    t.rows = std::min(t.rows, pow2_at_least(own_rows));
    t.threads_per_row = std::max(t.threads_per_row, std::min<uint32_t>({threads / t.rows, 32u, pow2_at_least(dim)}));
    while (t.rows > 1 && t.rows * t.threads_per_row > t.max_invocations) t.rows /= 2;
    t.tile = std::min(t.tile, pow2_at_least(stream_rows));
    return shrink_to_fit(t, dim, 1, 1, [&] { return fp.bytes(t.rows, t.tile, static_cast<uint64_t>(dim)); });
}

AttentionTiles fit_blocked(AttentionTiles t, int64_t dim, int64_t own_rows, int64_t stream_rows, BlockedKind kind) {
    t.rows = std::max(4u, std::min(std::bit_floor(t.rows), pow2_at_least(own_rows)));
    t.threads_per_row = std::bit_floor(t.threads_per_row);
    t.tile = std::max(t.threads_per_row, std::min(std::bit_floor(t.tile), pow2_at_least(stream_rows)));
    return shrink_to_fit(t, dim, t.threads_per_row, 4,
                         [&] { return blocked_shared_bytes(kind, t.rows, t.tile, t.threads_per_row, static_cast<uint64_t>(dim)); });
}

uint32_t workgroup_threads(const AttentionTiles& t, bool blocked) { return (blocked ? t.rows / 4 : t.rows) * t.threads_per_row; }

bool use_blocked(const AttentionTiles& t, int64_t own_rows, int64_t stream_rows) {
    return t.blocked && (own_rows >= kBlockedMinRows || (t.max_loop_iterations && stream_rows > kLongSweep));
}

void check_loop_limit(const AttentionTiles& t, int64_t dim, int64_t stream_rows, int64_t passes) {
    const int64_t longest = blocked_long_sweep(t, dim);
    if (passes * ((stream_rows + t.tile - 1) / t.tile) * t.tile <= longest) return;
    throw Error("[attention] a sweep over " + std::to_string(stream_rows) + " rows (x" + std::to_string(passes) +
                ") at head dim " + std::to_string(dim) + " needs more loop iterations than this device allows one shader "
                "invocation (" + std::to_string(t.max_loop_iterations) + "); at most " +
                std::to_string(longest / t.tile / passes * t.tile) + " rows here");
}

KernelSource tiled_kernel(const char* label, const AttentionSpec& s, const AttentionTiles& t, bool blocked,
                          std::vector<Binding> inputs, const std::vector<Binding>& outputs, const std::string& body,
                          uint64_t groups, uint32_t max_groups, uint32_t splits, const std::string& extensions,
                          const std::string& merge) {
    if (s.query_start < INT32_MIN || s.query_start > INT32_MAX) throw Error("[attention] query_start does not fit 32 bits");
    KernelSource k;
    k.label = label;
    k.iface.local_size = workgroup_threads(t, blocked);
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
                             (merge.empty() ? "" : "#define COMBINE\n") +
                             "#define BR " + std::to_string(t.rows) + "u\n#define TPR " +
                             std::to_string(t.threads_per_row) + "u\n#define BT " + std::to_string(t.tile) +
                             "u\n#define HC " + std::to_string(head_dim_chunk(s.head_dim)) +
                             "u\n#define STORE " + storage_type(s.dtype) + "\n";
    k.glsl = glsl_preamble(k.iface) + defs + out_row_glsl(s) + kFlatGroupId + kCommon + (blocked ? kBlockedCommon : "") +
             (merge.empty() ? "" : kLastPieceGlsl + merge) + body;
    k.glsl.insert(k.glsl.find('\n') + 1, extensions);
    k.groups = grid_for(groups, max_groups);
    return k;
}

std::string split_words(const KeySplit& split, const std::string& what, const std::string& how) {
    return split.splits > 1 ? ", " + what + " in " + std::to_string(split.splits) + " chunks of " +
                                  std::to_string(split.chunk) + how + ": " + split.why
                            : "; " + what + " not split: " + split.why;
}

KeySplit blocked_split(int64_t own, int64_t sweep, const std::string& what, const AttentionTiles& t, uint64_t groups,
                       int64_t dim) {
    if (own < kBlockedMinRows) return {};
    return choose_key_split(sweep, what, t, groups, blocked_long_sweep(t, dim), kMinChunk, workgroup_threads(t, true));
}

std::string f32_choice(bool blocked, int64_t own_rows, const char* owned, int64_t stream_rows, const char* streamed,
                       const AttentionTiles& tiles, const std::string& coop_declined, const std::string& more) {
    const std::string rows = std::to_string(own_rows) + owned;
    std::string choice = !blocked ? "row-wise: " + rows
                         : own_rows >= kBlockedMinRows
                             ? "blocked: " + rows
                             : "blocked: a sweep of " + std::to_string(stream_rows) + streamed + " past the device's loop limit";
    return choice + more + (tiles.coop_subgroup ? "; cooperative declined: " + coop_declined : "");
}

}  // namespace attention_detail

}  // namespace mn::codegen
