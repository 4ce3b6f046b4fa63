// The register-blocked attention kernels' GLSL (see attention_blocked.cpp); attention.cpp picks
// them for problems with many rows and supplies the interface and the shared definitions.
#pragma once

#include <cstdint>
#include <string>

namespace mn::codegen {

extern const char* const kBlockedCommon;
extern const char* const kBlockedForward;
extern const char* const kBlockedGradQ;
extern const char* const kBlockedGradKV;
// Put before the forward's GLSL (after #version): its rows' maxima and sums in subgroup shuffles.
extern const char* const kGroupShuffles;

enum class BlockedKind { Forward, GradQ, GradKV };

// The forward's operand layouts for `tile` keys a step, `threads` a group of 4 rows, head dim `dim`, as GLSL defines
// (KEY_PAIRS, VALUE_QUADS: see kBlockedForward).
std::string blocked_forward_defines(uint32_t tile, uint32_t threads, uint64_t dim);

// Shared memory one workgroup of `kind` needs: `rows` owned rows, `tile` streamed rows per step,
// `threads` per group of 4 rows, head dim `dim`.
uint64_t blocked_shared_bytes(BlockedKind kind, uint64_t rows, uint64_t tile, uint64_t threads, uint64_t dim);

// The subgroup size the forward requires to take its rows' maxima and sums in subgroup shuffles: the smallest of the
// device's min_subgroup..max_subgroup (0: it runs no shuffles or cannot require a size) that holds a group of `group`
// threads and divides the workgroup's `threads`; 0 where none does (shared memory then).
uint32_t group_shuffle_subgroup(uint32_t group, uint32_t threads, uint32_t min_subgroup, uint32_t max_subgroup);

}  // namespace mn::codegen
