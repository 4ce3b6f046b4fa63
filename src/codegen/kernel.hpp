#pragma once
// codegen/: one GLSL compute shader per kernel family, generated from a C++ description.
//
// A kernel's interface (its storage bindings, specialization constants and workgroup size) is
// declared once, in a KernelInterface; the GLSL declarations are generated from it, and the
// compiler checks a dispatch against it. Shapes and sizes are specialization constants, so a
// family's SPIR-V is compiled once and every layer with the same shapes shares one pipeline; the
// driver constant-folds the index math. Nothing here knows Vulkan handles.
#include <array>
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "meganeura/graph.hpp"

namespace mn::codegen {

struct Binding {
    std::string name;  // the GLSL block's instance name; elements are name.d[i]
    DType dtype;
    bool writes = false;  // false: readonly
    // Written by some workgroups and read by others of the same dispatch (split-K's pieces that the last of a tile
    // sums: matmul.cpp's piece_sum_glsl), so never cached where another workgroup's writes are not seen.
    bool coherent = false;
};

struct KernelInterface {
    std::vector<Binding> bindings;            // set 0, binding i
    std::vector<std::string> spec_constants;  // uint constants, constant_id i, in order
    uint32_t local_size = 64;                 // 1-D workgroups
};

// A kernel ready to dispatch: source + the values of its specialization constants + grid.
struct KernelSource {
    KernelInterface iface;
    std::string glsl;  // full source; identical for every instance of a family variant
    std::vector<uint32_t> spec_values;
    std::array<uint32_t, 3> groups{1, 1, 1};
    std::string label;
    // > 0: the pipeline must run with exactly this subgroup size and full subgroups (kernels that
    // split work by subgroup, such as cooperative-matrix ones).
    uint32_t required_subgroup_size = 0;
    // Families with several variants (matmul, conv): which one this is and why the others declined
    // (MEGANEURA_DEBUG=1 prints it).
    std::string choice;
};

// The GLSL type used to store / compute a dtype.
const char* storage_type(DType t);
const char* compute_type(DType t);

// "#version 450", the extensions the bindings need, the constant and buffer declarations.
std::string glsl_preamble(const KernelInterface& iface);

enum class Access { Read, Write, ReadWrite };
// The declaration of binding `at` as the block instance `name` of `type` elements (name.d[i]). Besides the one
// glsl_preamble gives each binding, a kernel may declare another of the same binding (Vulkan allows aliased
// descriptors): a view through which it reads or writes 16 bytes at a time (type vec4).
std::string buffer_view(size_t at, const std::string& name, Access access, const std::string& type = "vec4",
                        bool coherent = false);

// Helpers shared by the families ------------------------------------------------------------

inline constexpr int kMaxRank = 6;

// Splits a flat workgroup count into a grid no dimension of which exceeds `max_per_dim`;
// kernels recover the flat id with mn_group_id() (see kFlatGroupId).
std::array<uint32_t, 3> grid_for(uint64_t groups, uint32_t max_per_dim);
extern const char* const kFlatGroupId;
// GLSL `vec2 wg_sum(vec2 v)`: the sum over the workgroup, every invocation getting it (shared `red[WG]`; every
// invocation must call it: it holds barriers), for the kernels of one workgroup per row (the norms).
extern const char* const kWorkgroupPairSum;
// GLSL `float lane_sum(float v)`: the sum of v over each run of TPR invocations (a power of two, defined before the
// text) added in shared memory in a fixed order, right in the run's first; every invocation must call it (barriers).
// For the kernels of TPR threads a row (the attention backward's delta).
extern const char* const kLaneSum;
// GLSL `bool last_piece(uint tile, uint arrivals)` for the kernels that finish their own split work (split-K's sum,
// the attention's merge of key chunks) in the workgroup that stores a tile's last piece: whether this one's is the
// last of the tile's `arrivals` (binding cnt, i32, a counter a tile, zero before and after the dispatch), after which
// it sees every piece stored (the pieces' binding coherent). Every invocation calls it.
extern const char* const kLastPieceGlsl;
// GLSL `void rope_rotate(inout float a, inout float b, float position, float inv_freq, float sign)`: the RoPE pair
// (a, b) rotated by the angle position * inv_freq (sign -1: the inverse rotation), the one arithmetic of rope_kernel
// and of a GEMV that rotates its q and k rows (MatmulSpec's ColumnPart::rope).
extern const char* const kRopeRotate;
// GLSL `uint cache_start(uint rows, uint len)`: the first of `len` rows a kernel writes into a cache of `rows` rows,
// binding `start` (i32) clamped so that they fit: what the RoPE's, the GEMV's and slice_write's cache stores share.
extern const char* const kCacheStart;

uint32_t checked_u32(int64_t v, const char* what);

}  // namespace mn::codegen

namespace mn::codegen {

// Index math over a rank-kMaxRank iteration space whose dims are the spec constants
// `<dims>0..<dims>5` (leading dims padded with 1): returns GLSL for
// `uint <fn>(uint flat)` = offset + sum_d coord_d * <strides>d.
std::string strided_offset_fn(const std::string& fn, const std::string& dims, const std::string& strides,
                              const std::string& offset = "0u");
// GLSL `uint <fn>(uint r)`: where row r = (b * heads + h) * seq + t of a [batch, heads, seq, ...] tensor
// is in its [batch, seq, heads, ...] layout, (b * seq + t) * heads + h: a model's split or merge of the
// attention heads (permute {0, 2, 1, 3}) read or stored in place. seq and heads are GLSL uint expressions.
std::string heads_row_fn(const std::string& fn, const std::string& seq, const std::string& heads);

// A float constant's f32 bits, for a shader to read back exactly (uintBitsToFloat): an epsilon, a scale.
inline uint32_t float_bits(double v) { return std::bit_cast<uint32_t>(static_cast<float>(v)); }

// Appends `<prefix>0..5` to the interface's spec constants and their values (padded to kMaxRank
// with `pad` in front).
void add_rank_constants(KernelSource& k, const std::string& prefix, const std::vector<int64_t>& values,
                        int64_t pad);

}  // namespace mn::codegen
