// What of flash-decoding attention.cpp does not hold (see attention_decode.cpp): how many chunks the
// keys are split into, a decode step's chunk kernel on key lanes, and the kernel that merges the chunks.
#pragma once

#include <optional>
#include <string>

#include "codegen/families.hpp"

namespace mn::codegen {

// The number of chunks a sweep of `sweep` rows (`what`: a forward's or dQ's keys, dK/dV's query rows)
// is split into: `groups` workgroups unsplit, tiles of `tiles.tile` rows, chunks of at least
// `min_chunk` rows where the device would be underfilled (a larger one than the tile: for workgroups
// with many rows each, whose every chunk stages their own rows again; of one tile where even so the
// workgroups are fewer than the compute units), sweeps of at most `long_sweep`
// rows on a device that limits loop iterations. `why` says what decided it (KernelSource::choice).
struct KeySplit {
    uint32_t splits = 1;
    uint32_t chunk = 0;  // keys per chunk at the full key length (a multiple of tile)
    std::string why;
};
// `threads`: each workgroup's, where the split counts threads (the blocked kernels); 0: it counts workgroups.
KeySplit choose_key_split(int64_t sweep, const std::string& what, const AttentionTiles& tiles, uint64_t groups,
                          int64_t long_sweep, int64_t min_chunk = 0, uint32_t threads = 0);

// GLSL `uint out_row(uint f)`: the row of out where the forward kernels and the combine store flat row
// f = (batch * q_heads + head) * q_len + t; f itself unless spec.merged_out (attention.cpp).
std::string out_row_glsl(const AttentionSpec& spec);

// out and lse from `splits` chunks' partials, each [D unnormalized output sums, max, sum] per row.
// Bindings: part, out, lse.
KernelSource attention_combine_kernel(const AttentionSpec& spec, uint32_t splits, const Launch& launch);

// Up to this many chunks the combine takes a thread per output element (kMergeChunks); more (a decode step's, up to a
// few hundred) are shared among the lanes of a workgroup per row. (A forward's last chunk of each block of rows that
// merges them itself, AttentionTiles::last_chunk_merges, takes a thread per output however many.)
constexpr uint32_t kMaxColumnSplits = 16;

// GLSL `void merge_chunks(uint row, uint d)`: column d of flat row `row`'s output and (d = 0) its lse from the row's
// SPLITS chunk records in part, in chunk order. Needs D, SPLITS, NEG_INF, STORE, out_row and the bindings part, o, lse.
extern const char* const kMergeChunks;
// The combine's workgroup size for `splits` chunks (kMaxColumnSplits: a thread per output, else lanes).
uint32_t combine_threads(uint32_t splits, const Launch& launch);
// GLSL `void merge_row(uint row)`: flat row `row`'s output and lse from its SPLITS chunk records, as the combine of many
// chunks merges them over `lane_threads` threads (combine_threads): the same bits from any workgroup whose size divides
// lane_threads, every invocation calling it. Needs D, SPLITS, NEG_INF, STORE, WG, out_row and the bindings part, o, lse;
// declares shared memory of lane_threads floats.
std::string merge_lanes_glsl(int64_t head_dim, uint32_t lane_threads);

// The key-lanes chunk kernel of a decode step (kDecodeChunks: GLSL after the row-wise kernels' shared definitions, with
// `extensions` right after #version): an f32 cache whose head dim comes in quads, at most kDecodeMaxRows rows per kv head
// (all in one block of the tiles' rows), a device that shuffles in subgroups of a required size; `chunk` keys a
// workgroup. `lanes` invocations take a key, in subgroups of `subgroup`; nothing where it declines, `why_not` saying why.
struct DecodeLanes {
    uint32_t lanes = 0, subgroup = 0;
    std::string extensions;
};
constexpr int64_t kDecodeMaxRows = 8;
std::optional<DecodeLanes> decode_lanes(const AttentionSpec& spec, const AttentionTiles& tiles, int64_t rows, uint32_t chunk,
                                        std::string* why_not);
extern const char* const kDecodeChunks;

}  // namespace mn::codegen
