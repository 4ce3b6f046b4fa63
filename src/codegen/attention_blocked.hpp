// The register-blocked attention kernels' GLSL (see attention_blocked.cpp); attention.cpp picks
// them for problems with many rows and supplies the interface and the shared definitions.
#pragma once

#include <cstdint>

namespace mn::codegen {

extern const char* const kBlockedCommon;
extern const char* const kBlockedForward;
extern const char* const kBlockedGradQ;
extern const char* const kBlockedGradKV;

enum class BlockedKind { Forward, GradQ, GradKV };

// Shared memory one workgroup of `kind` needs: `rows` owned rows, `tile` streamed rows per step,
// `threads` per group of 4 rows, head dim `dim`.
uint64_t blocked_shared_bytes(BlockedKind kind, uint64_t rows, uint64_t tile, uint64_t threads, uint64_t dim);

}  // namespace mn::codegen
