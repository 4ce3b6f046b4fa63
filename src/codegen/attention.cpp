// Attention family: flash-style forward and backward, the score matrix never leaving shared memory.
//
// The query heads of one kv head are taken together: q viewed as [B*Hkv, ROWS = G*Tq, D] (row
// r = g*Tq + t is query t of head kv*G + g), so one staged K/V tile serves the whole group. A
// workgroup owns BR rows; the other operand streams through shared memory BT rows at a time
// (the row-wise kernels: attention_rowwise.cpp; the register-blocked ones: attention_blocked.cpp).
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
// A forward whose workgroups would leave the device idle splits its keys in SPLITS chunks, one
// workgroup each (SPLIT: the forward stores the chunk's partials; attention_decode.cpp): a decode
// step's few rows, and a prefill of few heads (Whisper-tiny's encoder: 6 heads of 1500 rows, 144
// workgroups of 64 rows for the H200's 132 compute units, one workgroup of 4 to 8 subgroups each).
//
// The forward's variants, in order: the cooperative-matrix one in precision fast
// (attention_coop.cpp), then flash-decoding for few rows, the blocked kernels for many, the row-wise
// ones; the choice names the variant and why the cooperative one declined where it could have run.
#include <algorithm>
#include <bit>

#include "codegen/attention_blocked.hpp"
#include "codegen/attention_coop.hpp"
#include "codegen/attention_decode.hpp"
#include "codegen/attention_rowwise.hpp"
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
// A blocked or cooperative kernel's split sweep (a prefill's, a backward's) goes in chunks of at least
// this many rows: each chunk's workgroup stages its own rows again (a decode step's few rows take
// chunks of one tile).
constexpr int64_t kMinChunk = 128;

// A kernel's workgroup: BR rows (blocked: BR / 4 groups of 4), TPR threads each.
uint32_t workgroup_threads(const AttentionTiles& t, bool blocked) { return (blocked ? t.rows / 4 : t.rows) * t.threads_per_row; }

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
// once per tile of the sweep and once per head-dim chunk in it (the others are unrolled). Measured
// on llvmpipe: 9,375 tiles at head dim 16 pass, at head dim 64 (9 loop iterations a tile) they come
// out wrong. The longest sweep, in whole tiles (no limit: INT64_MAX):
int64_t blocked_long_sweep(const AttentionTiles& t, int64_t dim) {
    if (!t.max_loop_iterations) return INT64_MAX;
    const int64_t per_tile = dim / head_dim_chunk(dim) + 1, budget = int64_t(t.max_loop_iterations) * 9 / 10;
    return budget / per_tile * t.tile;
}

// Refuses `passes` sweeps of `stream_rows` rows longer than that, with a clear error.
void check_loop_limit(const AttentionTiles& t, int64_t dim, int64_t stream_rows, int64_t passes) {
    const int64_t longest = blocked_long_sweep(t, dim);
    if (passes * ((stream_rows + t.tile - 1) / t.tile) * t.tile <= longest) return;
    throw Error("[attention] a sweep over " + std::to_string(stream_rows) + " rows (x" + std::to_string(passes) +
                ") at head dim " + std::to_string(dim) + " needs more loop iterations than this device allows one shader "
                "invocation (" + std::to_string(t.max_loop_iterations) + "); at most " +
                std::to_string(longest / t.tile / passes * t.tile) + " rows here");
}

}  // namespace

std::string out_row_glsl(const AttentionSpec& s) {
    const auto row_fn = [](const char* fn, bool merged, int64_t len, int64_t heads) {
        return merged ? heads_row_fn(fn, std::to_string(len) + "u", std::to_string(heads) + "u")
                      : "uint " + std::string(fn) + "(uint f) { return f; }\n";
    };
    return row_fn("out_row", s.merged_out, s.q_len, s.q_heads) + row_fn("kv_row", s.merged_out, s.kv_len, s.kv_heads) +
           row_fn("dv_row", s.merged_dv, s.kv_len, s.kv_heads);
}

namespace {

// A forward's chunks merged by the workgroup that stores a block's last one (AttentionTiles::last_chunk_merges), as the
// combine would (the same bits): a thread per output (merge_chunks), or many chunks (MERGE_LANES) a row at a time over
// the combine's lanes (merge_row). Every invocation calls combine_block after storing its rows' records.
const char* const kCombineBlock = R"(
void combine_block(uint head, uint r0, uint qblock) {
    if (!last_piece(qblock, SPLITS)) return;
    uint rows = min(r0 + BR, ROWS) - r0;
#ifdef MERGE_LANES
    for (uint r = 0u; r < rows; ++r) merge_row(head * ROWS + r0 + r);
#else
    for (uint f = gl_LocalInvocationID.x; f < rows * D; f += WG) merge_chunks(head * ROWS + r0 + f / D, f % D);
#endif
}
)";

// The interface and the shared GLSL of the tiled kernels; `bindings` lists the inputs before
// query_start, `outputs` those after it. splits > 0: the forward over that many key chunks (a backward kernel: of
// its sweep); `merge`, the GLSL with which the workgroup that stores a block's last chunk finishes the block (COMBINE:
// the forward's combine_block, a backward's sum_block). `extensions` go right after #version.
KernelSource tiled_kernel(const char* label, const AttentionSpec& s, const AttentionTiles& t, bool blocked,
                          std::vector<Binding> inputs, const std::vector<Binding>& outputs, const std::string& body,
                          uint64_t groups, uint32_t max_groups, uint32_t splits = 0, const std::string& extensions = "",
                          const std::string& merge = "") {
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

uint64_t blocks_of(int64_t n, uint32_t block) { return static_cast<uint64_t>((n + block - 1) / block); }

// KernelSource::choice's words on a sweep's split: ", keys in 4 chunks of 384: why" or "; keys not split: why".
std::string split_words(const KeySplit& split, const std::string& what, const std::string& how = "") {
    return split.splits > 1 ? ", " + what + " in " + std::to_string(split.splits) + " chunks of " +
                                  std::to_string(split.chunk) + how + ": " + split.why
                            : "; " + what + " not split: " + split.why;
}

// A blocked kernel's split of its sweep of `sweep` rows, `own` rows owned by each of `groups` workgroups:
// none where it owns few rows (it runs only because their sweep passes a loop limit).
KeySplit blocked_split(int64_t own, int64_t sweep, const std::string& what, const AttentionTiles& t, uint64_t groups,
                       int64_t dim) {
    if (own < kBlockedMinRows) return {};
    return choose_key_split(sweep, what, t, groups, blocked_long_sweep(t, dim), kMinChunk, workgroup_threads(t, true));
}

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
    const uint64_t heads = static_cast<uint64_t>(s.batch * s.kv_heads);
    const std::vector<Binding> qkv = {{"q", s.dtype}, {"k", s.dtype}, {"v", s.dtype}};
    const std::string row_count = std::to_string(rows) + " rows per kv head";
    AttentionForwardKernels out;
    // The forward of `label` (split: "<label>_chunks" storing each key chunk's partials, and the combine).
    const auto emit = [&](const std::string& label, const AttentionTiles& t, bool blocked, const std::string& body,
                          const KeySplit& split, const std::string& extensions) {
        const uint64_t groups = heads * blocks_of(rows, t.rows);
        if (split.splits == 1) {
            out.forward = tiled_kernel(label.c_str(), s, t, blocked, qkv, {{"o", s.dtype, true}, {"lse", DType::F32, true}},
                                       body, groups, launch.max_groups, 0, extensions);
            return;
        }
        out.partial_elements = s.batch * s.q_heads * s.q_len * split.splits * (s.head_dim + 2);
        // Many chunks merge over the combine's lanes, which this kernel's threads must divide.
        const bool lanes = split.splits > kMaxColumnSplits;
        const uint32_t lane_threads = combine_threads(split.splits, launch);
        if (t.last_chunk_merges && (!lanes || lane_threads % workgroup_threads(t, blocked) == 0)) {
            const std::vector<Binding> outputs = {{"part", DType::F32, true, true}, {"cnt", DType::I32, true},
                                                  {"o", s.dtype, true}, {"lse", DType::F32, true}};
            const std::string merge = lanes ? "#define MERGE_LANES\n" + merge_lanes_glsl(s.head_dim, lane_threads) + kCombineBlock
                                            : std::string(kMergeChunks) + kCombineBlock;
            out.forward = tiled_kernel((label + "_chunks").c_str(), s, t, blocked, qkv, outputs, body, groups * split.splits,
                                       launch.max_groups, split.splits, extensions, merge);
            out.tile_counters = static_cast<int64_t>(groups);
            return;
        }
        out.forward = tiled_kernel((label + "_chunks").c_str(), s, t, blocked, qkv, {{"part", DType::F32, true}}, body,
                                   groups * split.splits, launch.max_groups, split.splits, extensions);
        out.combine = attention_combine_kernel(s, split.splits, launch);
    };
    AttentionTiles coop = tiles;
    coop.last_chunk_merges = false;  // a dispatch merges the cooperative kernel's chunks (coop_grad_kernels)
    const std::string coop_declined = fit_coop(CoopKind::Forward, s, coop);
    if (coop_declined.empty()) {
        const KeySplit split = choose_key_split(s.kv_len, "keys", coop, heads * blocks_of(rows, coop.rows), kLongSweep, kMinChunk);
        emit("attention_coop", coop, false, coop_forward_glsl(s, split.splits > 1), split, coop_extensions());
        out.forward.required_subgroup_size = coop.coop_subgroup;
        out.forward.choice = "cooperative: " + row_count + ", " + std::to_string(coop.rows) + " per workgroup, " +
                             std::to_string(coop.tile) + "-key tiles" + split_words(split, "keys");
        return out;
    }
    // Said only where the device and precision would have run it.
    const std::string not_coop = tiles.coop_subgroup ? "; cooperative declined: " + coop_declined : "";
    std::string not_split;
    if (!tiles.blocked || rows < kBlockedMinRows) {
        const AttentionTiles t = fit(tiles, s.head_dim, rows, s.kv_len, {1, 2, 1, 0});
        const KeySplit split = choose_key_split(s.kv_len, "keys", t, heads * blocks_of(rows, t.rows), kLongSweep);
        if (split.splits > 1) {
            std::string why_not;
            if (const std::optional<DecodeLanes> d = decode_lanes(s, t, rows, split.chunk, &why_not)) {
                emit("attention", t, false, kDecodeChunks, split, d->extensions);
                out.forward.required_subgroup_size = d->subgroup;
                out.forward.choice = "key lanes, " + row_count + ", " + std::to_string(d->lanes) + " lanes a key" +
                                     split_words(split, "keys", " (flash-decoding)") + not_coop;
                return out;
            }
            emit("attention", t, false, kRowwiseForward, split, "");
            out.forward.choice = "row-wise, " + row_count + split_words(split, "keys", " (flash-decoding)") +
                                 "; key lanes declined: " + why_not + not_coop;
            return out;
        }
        not_split = split_words(split, "keys");
        if (!use_blocked(tiles, rows, s.kv_len)) {
            emit("attention", t, false, kRowwiseForward, split, "");
            out.forward.choice = f32_choice(false, rows, " rows per kv head", s.kv_len, " keys", tiles, coop_declined, not_split);
            return out;
        }
    }
    // The blocked kernel: many rows, or a sweep past a loop limit (few rows whose keys were not split).
    const AttentionTiles t = fit_blocked(tiles, s.head_dim, rows, s.kv_len, BlockedKind::Forward);
    const KeySplit split = blocked_split(rows, s.kv_len, "keys", t, heads * blocks_of(rows, t.rows), s.head_dim);
    check_loop_limit(t, s.head_dim, split.splits > 1 ? split.chunk : s.kv_len, 1);
    const uint32_t subgroup =
        group_shuffle_subgroup(t.threads_per_row, workgroup_threads(t, true), t.shuffle_min_subgroup, t.shuffle_max_subgroup);
    emit("attention", t, true, kBlockedForward, split,
         (subgroup ? kGroupShuffles : "") + blocked_forward_defines(t.tile, t.threads_per_row, static_cast<uint64_t>(s.head_dim)));
    out.forward.required_subgroup_size = subgroup;
    out.forward.choice = f32_choice(true, rows, " rows per kv head", s.kv_len, " keys", tiles, coop_declined,
                                    (subgroup ? ", row maxima and sums in subgroup shuffles" : "") +
                                        (rows >= kBlockedMinRows ? split_words(split, "keys") : not_split));
    return out;
}


namespace {

// The backward's inputs, then its outputs (dq, or dk and dv); with the cooperative kernels' views of them.
std::vector<Binding> grad_inputs(const AttentionSpec& s) {
    return {{"q", s.dtype}, {"k", s.dtype}, {"v", s.dtype}, {"dout", s.dtype}, {"lse", DType::F32}, {"delta", DType::F32}};
}
// dq, or dk and dv; where the sweep is split into chunks, the chunks' f32 partial sums in their place, or where the
// kernel adds its chunks itself (`merged`), the partial sums (coherent), the blocks' counters, then dq, or dk and dv.
std::vector<Binding> grad_outputs(const AttentionSpec& s, bool kv, bool chunks, bool merged = false) {
    std::vector<Binding> out;
    if (chunks) out.push_back({"part", DType::F32, true, merged});
    if (chunks && !merged) return out;
    if (merged) out.push_back({"cnt", DType::I32, true});
    if (kv) out.insert(out.end(), {{"dk", s.dtype, true}, {"dv", s.dtype, true}});
    else out.push_back({"dq", s.dtype, true});
    return out;
}
// The cooperative kernels' vec4 views of the inputs they stage and of their float outputs.
std::vector<CoopView> grad_views(const AttentionSpec& s, const std::vector<Binding>& outputs) {
    std::vector<CoopView> views = {{"q", 0, false}, {"k", 1, false}, {"v", 2, false}, {"dout", 3, false}};
    size_t binding = s.dynamic_start ? 7 : 6;  // after lse, delta and [start]
    for (const Binding& out : outputs) {
        if (out.dtype != DType::I32) views.push_back({out.name, binding, true, out.coherent});
        ++binding;
    }
    return views;
}

// Where dq (ROT_KV: the record's dk half) is stored rotated (ROT_SIGN, AttentionSpec::rotate_sign), the RoPE that reads it
// computed where the chunks are added, by sum_block or by the sum kernel (kGradSumRotated), the same way:
// store_rotated_pair adds row r's columns (c, c + D / 2) over the chunks' records (RECORD floats each, in ROT_PARTS)
// in chunk order, rotates them together (the row's position: its place in its head of ROT_LEN rows) and stores them;
// store_dv adds and stores element e of dv's half of the record. Needs EACH, RECORD, SPLITS, STORE, kRopeRotate.
const char* const kRotatedPairs = R"(
void store_rotated_pair(uint r, uint c) {
    const uint HALF = D / 2u;
    uint e = r * D + c;
    float a = 0.0, b = 0.0;
    for (uint q = 0u; q < SPLITS; ++q) {
        a += ROT_PARTS.d[q * RECORD + e];
        b += ROT_PARTS.d[q * RECORD + e + HALF];
    }
    rope_rotate(a, b, float(positions.d[r % ROT_LEN]), float(inv_freq.d[c]), ROT_SIGN);
#if ROT_KV
    uint at = kv_row(r) * D + c;
    dk.d[at] = STORE(a);
    dk.d[at + HALF] = STORE(b);
#else
    uint at = out_row(r) * D + c;
    dq.d[at] = STORE(a);
    dq.d[at + HALF] = STORE(b);
#endif
}
#if ROT_KV
void store_dv(uint e) {
    float sum = 0.0;
    for (uint q = 0u; q < SPLITS; ++q) sum += ROT_PARTS.d[q * RECORD + EACH + e];
    dv.d[dv_row(e / D) * D + e % D] = STORE(sum);
}
#endif
)";

// The GLSL of kRotatedPairs for a backward kernel of `s` (kv: the dK/dV one) reading its chunks' records from `parts`,
// its head lengths `len` (a GLSL expression); nothing where it does not rotate.
std::string rotated_pairs_glsl(const AttentionSpec& s, bool kv, const std::string& parts, const std::string& len) {
    if (s.rotate_sign == 0) return "";
    return "#define ROT_SIGN " + std::to_string(s.rotate_sign) + "\n#define ROT_KV " + (kv ? "1" : "0") + "\n#define ROT_PARTS " +
           parts + "\n#define ROT_LEN (" + len + ")\n" + kRopeRotate + kRotatedPairs;
}

// A backward kernel's chunks added by the workgroup that stores a block's last one (AttentionTiles::last_chunk_merges),
// as the sum kernel would (kGradSum: the same additions in the same order): `block` counts the block's chunks, whose
// rows of the record (its dq rows, or both halves' dk and dv rows) are `rows` from flat row `first`. Every invocation
// calls it after storing its chunk.
//
// With ROT_SIGN, dq (or the record's dk half) is stored rotated (kRotatedPairs), then dv's rows as they are.
const char* const kGradSumBlock = R"(
void sum_block(uint block, uint first, uint rows) {
    if (!last_piece(block, SPLITS)) return;
#ifdef ROT_SIGN
    const uint HALF = D / 2u;
    for (uint f = gl_LocalInvocationID.x; f < rows * HALF; f += WG) store_rotated_pair(first + f / HALF, f % HALF);
#if GS_KV
    for (uint f = gl_LocalInvocationID.x; f < rows * D; f += WG) store_dv(first * D + f);
#endif
    return;
#endif
    for (uint f = gl_LocalInvocationID.x; f < (GS_KV + 1u) * rows * D; f += WG) {
        uint second = f / (rows * D), e = first * D + f % (rows * D);  // second: dv's half of the record
        float sum = 0.0;
        for (uint q = 0u; q < SPLITS; ++q) sum += part.d[q * RECORD + second * EACH + e];
#if GS_KV
        if (second == 1u) {
            dv.d[dv_row(e / D) * D + e % D] = STORE(sum);
            continue;
        }
        dk.d[kv_row(e / D) * D + e % D] = STORE(sum);
#else
        dq.d[out_row(e / D) * D + e % D] = STORE(sum);
#endif
    }
}
)";
std::string grad_sum_block_glsl(const AttentionSpec& s, bool kv) {
    return std::string("#define GS_KV ") + (kv ? "1" : "0") +
           "\nconst uint EACH = HEADS * (GS_KV != 0 ? TK : ROWS) * D, RECORD = (GS_KV + 1u) * EACH;\n" +
           rotated_pairs_glsl(s, kv, "part", "GS_KV != 0 ? TK : TQ") + kGradSumBlock;
}

// The spec a backward kernel's product is built from: it stores dq (dk) rotated only where its last chunk of a block
// adds the chunks (`merged`); where a sum kernel adds them, that kernel rotates (with_partial_sums), and an unsplit
// sweep's gradient is rotated by the RoPE's own kernel.
AttentionSpec rotated_where_merged(const AttentionSpec& s, bool merged) {
    AttentionSpec rs = s;
    if (!merged) rs.rotate_sign = 0;
    return rs;
}

// The RoPE's positions and frequencies a kernel that stores rotated binds after its outputs; else nothing.
std::vector<Binding> rotation_bindings(const AttentionSpec& s) {
    if (s.rotate_sign == 0) return {};
    return {{"positions", DType::I32}, {"inv_freq", s.rotate_freq_dtype}};
}

// A thread per V elements (4 where the head dim allows: 16-byte accesses) of a chunk's record, dq or [dk, dv]
// (P, OUT and DV: the bindings p, dq or dk, and dv, or their vec4 views):
// the chunks' partials added in chunk order, stored at the row's place (ROW: out_row or kv_row, and dv_row for
// dv: the heads merged where AttentionSpec says).
const char* const kGradSum = R"(
void main() {
    uint i = mn_group_id() * WG + gl_LocalInvocationID.x;
    if (i >= RECORD / V) return;
    VEC sum = VEC(0.0);
    for (uint q = 0u; q < SPLITS; ++q) sum += P.d[q * (RECORD / V) + i];
    uint e = i * V % EACH;
#if KV
    if (i * V >= EACH) {
        DV.d[(dv_row(e / D) * D + e % D) / V] = STOREV(sum);
        return;
    }
#endif
    OUT.d[(ROW(e / D) * D + e % D) / V] = STOREV(sum);
}
)";

// kGradSum where dq (or the record's dk half) is stored rotated (kRotatedPairs, as sum_block stores it): a thread per
// column pair, then per element of dv.
const char* const kGradSumRotated = R"(
void main() {
    uint f = mn_group_id() * WG + gl_LocalInvocationID.x;
    const uint HALF = D / 2u;
    if (f < EACH / 2u) {
        store_rotated_pair(f / HALF, f % HALF);
        return;
    }
#if ROT_KV
    if (f - EACH / 2u < EACH) store_dv(f - EACH / 2u);
#endif
}
)";

// The f32 partials of a backward kernel whose sweep is split into `split.splits` chunks, and the kernel
// that adds them in chunk order (deterministic: no atomic additions) into dq, or into dk and dv (the two halves
// of each chunk's record); or where the product adds them itself (`blocks` > 0: sum_block), its counters. Either
// stores dq (dk) rotated where `s` says (AttentionSpec::rotate_sign); an unsplit sweep's product never does.
AttentionGradKernels with_partial_sums(KernelSource product, const AttentionSpec& s, bool kv, const KeySplit& split,
                                       uint32_t max_groups, uint64_t blocks = 0) {
    AttentionGradKernels out{std::move(product)};
    if (split.splits == 1) return out;
    out.rotated = s.rotate_sign != 0;
    const int64_t each = s.batch * s.head_dim * (kv ? s.kv_heads * s.kv_len : s.q_heads * s.q_len);
    const int64_t record = kv ? 2 * each : each;
    out.partial_elements = record * split.splits;
    checked_u32(out.partial_elements, "attention gradient partials");
    if (blocks) {
        out.tile_counters = static_cast<int64_t>(blocks);
        return out;
    }
    KernelSource& k = out.sum.emplace();
    k.label = kv ? "attention_grad_kv_sum" : "attention_grad_q_sum";
    k.iface.local_size = 256;
    k.iface.spec_constants = {"RECORD", "EACH", "D", "SPLITS"};
    k.spec_values = {checked_u32(record, "attention gradient size"), checked_u32(each, "attention gradient size"),
                     checked_u32(s.head_dim, "attention head dim"), split.splits};
    k.choice = "adds " + std::to_string(split.splits) + " chunks' partial sums in chunk order";
    k.iface.bindings = {{"p", DType::F32}};
    if (kv) {
        k.iface.bindings.insert(k.iface.bindings.end(), {{"dk", s.dtype, true}, {"dv", s.dtype, true}});
    } else {
        k.iface.bindings.push_back({"dq", s.dtype, true});
    }
    if (out.rotated) {
        k.iface.spec_constants.push_back("LEN");
        k.spec_values.push_back(checked_u32(kv ? s.kv_len : s.q_len, "attention length"));
        for (Binding& b : rotation_bindings(s)) k.iface.bindings.push_back(std::move(b));
        k.glsl = glsl_preamble(k.iface) + kFlatGroupId + out_row_glsl(s) + "#define STORE " + storage_type(s.dtype) + "\n" +
                 rotated_pairs_glsl(s, kv, "p", "LEN") + kGradSumRotated;
        k.groups = grid_for((static_cast<uint64_t>(each / 2 + (kv ? each : 0)) + 255) / 256, max_groups);
        k.choice += kv ? ", dk rotated by the RoPE that reads it" : ", dq rotated by the RoPE that reads it";
        return out;
    }
    const uint32_t v = s.head_dim % 4 == 0 ? 4 : 1;
    const std::string vec = v == 4 ? "vec4" : "float", stored = v == 4 ? (s.dtype == DType::F16 ? "f16vec4" : "vec4") : storage_type(s.dtype);
    // With V = 4, the bindings again as vec4 views named <binding>4, which the kernel uses (P, OUT, DV).
    std::string views;
    const std::string suffix = v == 4 ? "4" : "";
    for (size_t b = 0; v == 4 && b < k.iface.bindings.size(); ++b) {
        const std::string& name = k.iface.bindings[b].name;
        views += "layout(std430, set = 0, binding = " + std::to_string(b) + ") " + (b == 0 ? "readonly" : "writeonly") +
                 " buffer B_" + name + "4 { " + (b == 0 ? vec : stored) + " d[]; } " + name + "4;\n";
    }
    k.glsl = glsl_preamble(k.iface) + views + kFlatGroupId + out_row_glsl(s) + "#define V " + std::to_string(v) + "u\n#define VEC " +
             vec + "\n#define STOREV " + stored + "\n#define KV " + (kv ? "1" : "0") + "\n#define ROW " + (kv ? "kv_row" : "out_row") +
             "\n#define P p" + suffix + "\n#define OUT " + (kv ? "dk" : "dq") + suffix + "\n#define DV dv" + suffix + "\n" + kGradSum;
    k.groups = grid_for((static_cast<uint64_t>(record / v) + 255) / 256, max_groups);
    return out;
}

// The sweep a backward kernel splits: dQ's keys, or dK/dV's query rows (of all G heads).
int64_t grad_sweep(const AttentionSpec& s, bool kv) { return kv ? s.q_len * (s.q_heads / s.kv_heads) : s.kv_len; }

// The cooperative kernels of `kind` (label, body) where fit_coop takes the problem, the choice naming the
// owned rows, the workgroup's and the streamed tile's and the split; otherwise nullopt with *declined
// saying why.
std::optional<AttentionGradKernels> coop_grad_kernels(CoopKind kind, const AttentionSpec& s, const AttentionTiles& tiles,
                                                      uint32_t max_groups, std::string* declined) {
    AttentionTiles t = tiles;
    t.last_chunk_merges = false;  // the cooperative kernels' chunks: a dispatch adds them (as split-K's: matmul.cpp)
    *declined = fit_coop(kind, s, t);
    if (!declined->empty()) return std::nullopt;
    const bool kv = kind == CoopKind::GradKV;
    const int64_t own = kv ? s.kv_len : s.q_len * (s.q_heads / s.kv_heads);
    const uint64_t groups = static_cast<uint64_t>(s.batch * s.kv_heads) * blocks_of(own, t.rows);
    const KeySplit split = choose_key_split(grad_sweep(s, kv), kv ? "query rows" : "keys", t, groups, kLongSweep, kMinChunk);
    const bool chunks = split.splits > 1, merged = chunks && t.last_chunk_merges;
    const AttentionSpec rs = rotated_where_merged(s, merged);
    const std::vector<Binding> outputs = grad_outputs(s, kv, chunks, merged), rotation = rotation_bindings(rs);
    std::vector<Binding> bound = outputs;
    bound.insert(bound.end(), rotation.begin(), rotation.end());
    KernelSource k = tiled_kernel(kv ? "attention_grad_kv_coop" : "attention_grad_q_coop", s, t, false, grad_inputs(s),
                                  bound, coop_glsl(s, grad_views(s, outputs), kv ? kCoopGradKV : kCoopGradQ), groups * split.splits,
                                  max_groups, chunks ? split.splits : 0, coop_extensions(), merged ? grad_sum_block_glsl(rs, kv) : "");
    k.required_subgroup_size = t.coop_subgroup;
    k.choice = "cooperative: " + std::to_string(own) + (kv ? " keys per kv head, " : " rows per kv head, ") +
               std::to_string(t.rows) + " per workgroup, " + std::to_string(t.tile) +
               (kv ? "-row query tiles" : "-key tiles") + split_words(split, kv ? "query rows" : "keys");
    return with_partial_sums(std::move(k), s, kv, split, max_groups, merged ? groups : 0);
}

// At most this many bytes of dS (f32) are stored for dQ's matmul (grad_q_from_scores): Whisper-tiny's encoder
// stores 54 MB a layer (6 heads of 1,500 x 1,500).
constexpr uint64_t kMaxStoredScores = uint64_t(256) << 20;

// The binding through which the blocked dK/dV kernel stores dS times the scale (bound after delta), and its GLSL:
// STORE_SCORES, and a vec4 view of it where whole rows are vec4s.
Binding scores_binding() { return {"scores", DType::F32, true}; }
std::string scores_glsl(const AttentionSpec& s) {
    std::string g = "#define STORE_SCORES\n";
    if (s.kv_len % 4 == 0) {
        g += "#define SCORES4\nlayout(std430, set = 0, binding = " + std::to_string(grad_inputs(s).size()) +
             ") writeonly buffer B_scores4 { vec4 d[]; } scores4;\n";
    }
    return g;
}

// The f32 kernels of dQ or dK/dV: blocked for many rows, their sweep split as the cooperative ones';
// row-wise otherwise, whole. store_scores: the dK/dV kernel stores dS too (grad_q_from_scores).
AttentionGradKernels f32_grad_kernels(CoopKind kind, const AttentionSpec& s, const AttentionTiles& tiles, uint32_t max_groups,
                                      const std::string& coop_declined, bool store_scores = false) {
    const bool kv = kind == CoopKind::GradKV;
    const int64_t group = s.q_heads / s.kv_heads, own = kv ? s.kv_len : s.q_len * group, sweep = grad_sweep(s, kv);
    const int64_t stream = kv ? s.q_len : s.kv_len;  // rows of the streamed operand per head
    const bool blocked = use_blocked(tiles, own, sweep);
    const AttentionTiles t = blocked ? fit_blocked(tiles, s.head_dim, own, stream, kv ? BlockedKind::GradKV : BlockedKind::GradQ)
                                     : fit(tiles, s.head_dim, own, stream, kv ? Footprint{2, 2, 2, 2} : Footprint{2, 2, 1, 0});
    const uint64_t groups = static_cast<uint64_t>(s.batch * s.kv_heads) * blocks_of(own, t.rows);
    const KeySplit split = blocked ? blocked_split(own, sweep, kv ? "query rows" : "keys", t, groups, s.head_dim) : KeySplit{};
    if (blocked && split.splits == 1) check_loop_limit(t, s.head_dim, stream, kv ? group : 1);
    if (blocked && split.splits > 1) {
        // The chunks are runs of the (G *) ceil(rows / BT) tiles of the sweep.
        const int64_t steps = (kv ? group : 1) * ((stream + t.tile - 1) / t.tile);
        check_loop_limit(t, s.head_dim, (steps + split.splits - 1) / split.splits * t.tile, 1);
    }
    const bool chunks = split.splits > 1, merged = chunks && t.last_chunk_merges;
    const AttentionSpec rs = rotated_where_merged(s, merged);
    std::vector<Binding> outputs = grad_outputs(s, kv, chunks, merged);
    for (Binding& b : rotation_bindings(rs)) outputs.push_back(std::move(b));
    if (store_scores && !(kv && blocked)) throw Error("[attention] only the blocked dK/dV kernel stores dS");
    std::vector<Binding> inputs = grad_inputs(s);
    if (store_scores) inputs.push_back(scores_binding());
    const std::string body = (store_scores ? scores_glsl(s) : "") +
                             (kv ? (blocked ? kBlockedGradKV : kRowwiseGradKV) : (blocked ? kBlockedGradQ : kRowwiseGradQ));
    KernelSource k = tiled_kernel(kv ? "attention_grad_kv" : "attention_grad_q", s, t, blocked, inputs,
                                  outputs, body, groups * split.splits, max_groups,
                                  chunks ? split.splits : 0, "", merged ? grad_sum_block_glsl(rs, kv) : "");
    k.choice = f32_choice(blocked, own, kv ? " keys per kv head" : " rows per kv head", sweep, kv ? " query rows" : " keys",
                          tiles, coop_declined, blocked && own >= kBlockedMinRows ? split_words(split, kv ? "query rows" : "keys") : "") +
               (store_scores ? "; stores dS for dQ's matmul" : "");
    return with_partial_sums(std::move(k), s, kv, split, max_groups, merged ? groups : 0);
}

}  // namespace

AttentionGradKernels attention_grad_q_kernels(const AttentionSpec& s, const AttentionTiles& tiles, uint32_t max_groups) {
    std::string coop_declined;
    if (auto k = coop_grad_kernels(CoopKind::GradQ, s, tiles, max_groups, &coop_declined)) return std::move(*k);
    return f32_grad_kernels(CoopKind::GradQ, s, tiles, max_groups, coop_declined);
}

AttentionGradKernels attention_grad_kv_kernels(const AttentionSpec& s, const AttentionTiles& tiles, uint32_t max_groups,
                                               bool store_scores) {
    std::string coop_declined;
    if (store_scores && !grad_q_from_scores(s, tiles)) throw Error("[attention] this dK/dV kernel does not store dS");
    if (auto k = coop_grad_kernels(CoopKind::GradKV, s, tiles, max_groups, &coop_declined)) return std::move(*k);
    return f32_grad_kernels(CoopKind::GradKV, s, tiles, max_groups, coop_declined, store_scores);
}

// dQ = scale * dS K recomputes S and dP tile by tile, as the dK/dV kernel did (a third of the backward's
// multiply-adds more, and on the H200 Whisper-tiny's dQ kernels took 1.33 ms of its strict step's 7.2). Where dS
// is small enough to store and the dK/dV kernel is the blocked f32 one, that kernel stores it and dQ is one
// batched matmul. Causal and windowed problems keep the dQ kernel: the dK/dV kernel skips the tiles they mask, so
// it would leave dS unwritten there.
bool grad_q_from_scores(const AttentionSpec& s, const AttentionTiles& tiles) {
    AttentionTiles coop = tiles;
    if (!tiles.grad_q_from_scores || s.causal || s.dtype != DType::F32) return false;
    if (tiles.coop_subgroup && fit_coop(CoopKind::GradKV, s, coop).empty()) return false;
    const uint64_t scores = static_cast<uint64_t>(s.batch * s.q_heads * s.q_len * s.kv_len);
    return use_blocked(tiles, s.kv_len, grad_sweep(s, true)) && 4 * scores <= kMaxStoredScores && scores <= UINT32_MAX;
}

// TPR threads a row (a power of two; 4 elements each at head dim 64), reading it together, their sums
// added in shared memory in a fixed order. A thread a row read 64 elements one after another: on the
// H200 SmolLM2-135M's training step spent 0.63 ms in its 30 dispatches of 1,152 rows (21 us each).
const char* const kAttentionDelta = R"(
void main() {
    uint lid = gl_LocalInvocationID.x, lane = lid % TPR, r = mn_group_id() * (WG / TPR) + lid / TPR;
    float s = 0.0;
    if (r < ROWS) {
        for (uint d = lane; d < D; d += TPR) s += float(o.d[out_row(r) * D + d]) * float(dout.d[r * D + d]);
    }
    s = lane_sum(s);
    if (lane == 0u && r < ROWS) delta.d[r] = s;
}
)";

KernelSource attention_delta_kernel(const AttentionSpec& s, const Launch& launch) {
    const DType dtype = s.dtype;
    const int64_t rows = s.batch * s.q_heads * s.q_len, head_dim = s.head_dim;
    KernelSource k;
    k.label = "attention_delta";
    k.iface.local_size = std::bit_floor(launch.local_size);
    const uint32_t per_row = std::min({32u, k.iface.local_size, std::bit_ceil(checked_u32((head_dim + 3) / 4, "attention head dim"))});
    k.iface.spec_constants = {"ROWS", "D"};
    k.spec_values = {checked_u32(rows, "attention rows"), checked_u32(head_dim, "attention head dim")};
    checked_u32(rows * head_dim, "attention tensor size");
    k.iface.bindings = {{"o", dtype}, {"dout", dtype}, {"delta", DType::F32, true}};
    k.glsl = glsl_preamble(k.iface) + "#define TPR " + std::to_string(per_row) + "u\n" + kLaneSum + kFlatGroupId +
             out_row_glsl(s) + kAttentionDelta;
    k.groups = grid_for(blocks_of(rows, k.iface.local_size / per_row), launch.max_groups);
    return k;
}

}  // namespace mn::codegen
