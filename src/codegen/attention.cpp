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
//
// The shared machinery (tiles, the tiled kernels' interface and GLSL) is attention_tiles.cpp's; the gradients are
// attention_backward.cpp's.
#include "codegen/attention_blocked.hpp"
#include "codegen/attention_coop.hpp"
#include "codegen/attention_decode.hpp"
#include "codegen/attention_rowwise.hpp"
#include "codegen/attention_tiles.hpp"
#include "codegen/families.hpp"

namespace mn::codegen {

using namespace attention_detail;

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
    // A dispatch merges the cooperative kernel's chunks (coop_grad_kernels): merged in the kernel they were right but
    // slower on the H100 (SmolLM2's fast inference 1.82 -> 2.08 ms, Whisper's 0.93 -> 0.99; session 41).
    coop.last_chunk_merges = false;
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

}  // namespace mn::codegen
