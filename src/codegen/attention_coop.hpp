// The attention kernels on NV cooperative matrices (precision fast): the forward
// (attention_coop.cpp) and dQ, dK and dV (attention_coop_backward.cpp). Whether they take a problem,
// their tiles, and their GLSL; attention.cpp puts them first among the variants and supplies the
// interface and the shared definitions.
#pragma once

#include <string>
#include <vector>

#include "codegen/families.hpp"

namespace mn::codegen {

enum class CoopKind { Forward, GradQ, GradKV };

// Why the cooperative kernel of `kind` declines the problem, or "" with t's rows (16 per subgroup:
// query rows, or keys for GradKV), threads_per_row (2) and tile (rows streamed per step) set for it.
std::string fit_coop(CoopKind kind, const AttentionSpec& spec, AttentionTiles& t);

// Shared memory a workgroup of `kind` needs with `rows` owned rows, `tile` streamed per step, head dim `dim`.
uint64_t coop_shared_bytes(CoopKind kind, uint64_t rows, uint64_t tile, uint64_t dim);

// The extensions (right after #version).
std::string coop_extensions();

// A binding read or written 4 floats at a time, as <name>4.
struct CoopView {
    std::string name;
    size_t binding;
    bool writes;
    bool coherent = false;  // Binding::coherent
};
// After attention.cpp's common definitions: DH, the views, the matrix types, the kernels' shared GLSL and `body`.
std::string coop_glsl(const AttentionSpec& spec, const std::vector<CoopView>& views, const char* body);

// The forward's; `split`: its keys in chunks, each workgroup storing its chunk's partials (SPLIT) in
// place of out and lse.
std::string coop_forward_glsl(const AttentionSpec& spec, bool split);

// The backward's bodies (attention_coop_backward.cpp), for coop_glsl. Bindings as the f32 kernels':
// q, k, v, dout, lse, delta, [start], then dq, or dk and dv.
extern const char* const kCoopGradQ;
extern const char* const kCoopGradKV;

}  // namespace mn::codegen
