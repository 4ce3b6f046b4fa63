// The attention family's shared machinery (attention.cpp's forward, attention_backward.cpp's gradients): the tiles a
// problem gets, the split of a sweep, and the interface and common GLSL of every tiled kernel.
#pragma once

#include <string>
#include <vector>

#include "codegen/attention_blocked.hpp"
#include "codegen/attention_decode.hpp"
#include "codegen/families.hpp"

namespace mn::codegen::attention_detail {

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
AttentionTiles fit(AttentionTiles t, int64_t dim, int64_t own_rows, int64_t stream_rows, const Footprint& fp);
// The blocked kernels' tiles: rows a power of two from 4 (groups of 4) up to the rows there are,
// the streamed tile a multiple of the threads per group; halved (the tile first) until they fit.
AttentionTiles fit_blocked(AttentionTiles t, int64_t dim, int64_t own_rows, int64_t stream_rows, BlockedKind kind);

// Problems with at least this many rows per workgroup's side take the blocked kernels, and so do
// sweeps longer than kLongSweep on a device that limits loop iterations (a decode step over 300,000
// keys passed llvmpipe's limit in the row-wise kernel, 40,000 did not).
constexpr int64_t kBlockedMinRows = 16, kLongSweep = 4096;
// A blocked or cooperative kernel's split sweep (a prefill's, a backward's) goes in chunks of at least
// this many rows: each chunk's workgroup stages its own rows again (a decode step's few rows take
// chunks of one tile).
constexpr int64_t kMinChunk = 128;

// A kernel's workgroup: BR rows (blocked: BR / 4 groups of 4), TPR threads each.
uint32_t workgroup_threads(const AttentionTiles& t, bool blocked);
bool use_blocked(const AttentionTiles& t, int64_t own_rows, int64_t stream_rows);
// On a device that ends long loops (llvmpipe), refuses `passes` sweeps of `stream_rows` rows that a blocked kernel's
// loops could not finish, with a clear error.
void check_loop_limit(const AttentionTiles& t, int64_t dim, int64_t stream_rows, int64_t passes);

// The interface and the shared GLSL of the tiled kernels; `bindings` lists the inputs before
// query_start, `outputs` those after it. splits > 0: the forward over that many key chunks (a backward kernel: of
// its sweep); `merge`, the GLSL with which the workgroup that stores a block's last chunk finishes the block (COMBINE:
// the forward's combine_block, a backward's sum_block). `extensions` go right after #version.
KernelSource tiled_kernel(const char* label, const AttentionSpec& s, const AttentionTiles& t, bool blocked,
                          std::vector<Binding> inputs, const std::vector<Binding>& outputs, const std::string& body,
                          uint64_t groups, uint32_t max_groups, uint32_t splits = 0, const std::string& extensions = "",
                          const std::string& merge = "");

inline uint64_t blocks_of(int64_t n, uint32_t block) { return static_cast<uint64_t>((n + block - 1) / block); }

// KernelSource::choice's words on a sweep's split: ", keys in 4 chunks of 384: why" or "; keys not split: why".
std::string split_words(const KeySplit& split, const std::string& what, const std::string& how = "");
// A blocked kernel's split of its sweep of `sweep` rows, `own` rows owned by each of `groups` workgroups:
// none where it owns few rows (it runs only because their sweep passes a loop limit).
KeySplit blocked_split(int64_t own, int64_t sweep, const std::string& what, const AttentionTiles& t, uint64_t groups,
                       int64_t dim);
// What the f32 kernels of a problem are, for KernelSource::choice: blocked or row-wise, over how many
// owned rows, `more`, and why the cooperative kernels declined where they could have run.
std::string f32_choice(bool blocked, int64_t own_rows, const char* owned, int64_t stream_rows, const char* streamed,
                       const AttentionTiles& tiles, const std::string& coop_declined, const std::string& more = "");

}  // namespace mn::codegen::attention_detail
