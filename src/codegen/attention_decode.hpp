// Flash-decoding's two halves that attention.cpp does not hold (see attention_decode.cpp): how many
// chunks the keys are split into, and the kernel that merges the chunks.
#pragma once

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

}  // namespace mn::codegen
