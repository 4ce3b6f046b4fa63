// The attention forward on NV cooperative matrices (precision fast; see attention_coop.cpp):
// whether it takes a problem, its tiles, and its GLSL. attention.cpp puts it first in the
// forward's variants and supplies the interface and the shared definitions.
#pragma once

#include <string>

#include "codegen/families.hpp"

namespace mn::codegen {

// Why the cooperative forward declines the problem, or "" with t's rows (16 per subgroup),
// threads_per_row (2) and tile (keys per step) set for it.
std::string fit_coop_forward(const AttentionSpec& spec, AttentionTiles& t);

// Shared memory a workgroup of `rows` query rows needs at `tile` keys per step and head dim `dim`.
uint64_t coop_forward_shared_bytes(uint64_t rows, uint64_t tile, uint64_t dim);

// The extensions (right after #version) and the body, after attention.cpp's common definitions.
std::string coop_forward_extensions();
std::string coop_forward_glsl(const AttentionSpec& spec);

}  // namespace mn::codegen
