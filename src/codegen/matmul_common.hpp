#pragma once
// Pieces the matmul kernels share (matmul.cpp chooses among them): the interface every matmul
// kernel has (bindings a, b, c; shapes and batch strides as specialization constants), the batch
// decomposition, and the loader that stages 4 contiguous elements of an operand at a time.
#include <functional>
#include <string>

#include "codegen/families.hpp"

namespace mn::codegen::matmul_detail {

// Where a product's rows are stored with their heads merged (MatmulSpec::heads_merged; store_glsl): 0 heads, in place.
struct MergedHeads {
    int64_t heads = 0, seq = 0, row_length = 0;
};
MergedHeads merged_heads(const MatmulSpec& spec);

// Bindings a, b, c and the constants M, N, K, BD0..3 (output batch dims), AS0..3 and BS0..3
// (operand batch strides, 0 where broadcast), NB (batch count) and KSPLIT (the k range of one
// split-K piece; K when not split). Checks the output fits 32-bit indices.
KernelSource base_kernel(const MatmulSpec& spec, uint32_t local_size, const std::string& label, uint32_t k_split);

// GLSL: `STORE4` (the 4-wide storage type of the dtype), 4-wide views a4, b4, c4 of the three
// bindings (16-byte loads and stores where a dimension is a multiple of 4),
// `void batch_offsets(uint z, out uint a_off, out uint b_off)` and, for tiled grids whose z is
// split * NB + batch, `void split_range(out uint k_begin, out uint k_end, out uint a_off, out uint b_off)`, which also
// sets `second_b` (a pair's second product: piece_sum_glsl), and PIECES (K's). With `pieces_summed`, c4 is coherent.
std::string common_glsl(const MatmulSpec& spec, bool pieces_summed = false);

// GLSL: `vec4 load_<x>(uint off, uint o, uint i)`, the elements (o, i..i+3) of operand x ("a" or
// "b") in its memory order (o: the strided dimension, i: the contiguous one), zero outside the
// matrix; 16-byte loads when the contiguous dimension is a multiple of 4. Also defines
// <X>_OUTER and <X>_INNER (the operand's two dims in memory order). With `pair`, the operand's loads read its second
// (b2 or a2, views b24 or a24) where second_b is set.
std::string loader_glsl(const MatmulSpec& spec, char operand, bool pair = false);

// "M x N x K 128x576x1536" (and the batch), for KernelSource::choice.
std::string gemm_size(const MatmulSpec& spec);
// Where the tuning asks a split product to sum its own pieces (a choice's words): ", summed by the last piece of each
// tile", or, where a dispatch sums them all the same, why (`declined`); nothing where the tuning does not ask.
std::string pieces_sum_words(const MatmulTuning& tuning, bool summed, const char* declined);
// The operand's contiguous dimension: K for A and for B^T, M for A^T, N for B.
int64_t inner_dim(const MatmulSpec& spec, char operand);
// Whether the contiguous dimension of operand x allows 16-byte access.
bool vec4_operand(const MatmulSpec& spec, char operand);

std::string define(const std::string& name, int64_t value);

// GLSL shared by the tiled and cooperative kernels, after A_TI and B_TI (each operand slice's
// contiguous extent) are defined: the register arrays ra/rb, the thread's lid/m0/n0/a_off/b_off,
// and `void fetch(uint k0)`, which loads this thread's 4-element groups of the A and B slices at k0.
extern const char* const kRegisterFetchGlsl;

// GLSL shared by the tiled matmul and the convolution kernels, after their fetch() and stash():
// `vec4 acc[TM][TN / 4u]` and `void multiply_range(k_begin, k_end, tx, ty)`, which accumulates the
// product of the K range into acc, BK-deep slices staged through shared memory (As, Bs), the next
// slice fetched into registers while the current one is multiplied.
extern const char* const kRegisterTileProductGlsl;

// glsl_preamble with GL_EXT_control_flow_attributes ([[unroll]]: register tiles must stay in
// registers) and `extensions` right after #version.
std::string preamble(const KernelInterface& iface, const std::string& extensions);

// Grid for a BM x BN tiling with K split into pieces of k_split (`pair`: of two products), checked against the
// device's per-dimension limit.
std::array<uint32_t, 3> tile_grid(const MatmulSpec& spec, uint32_t bm, uint32_t bn, uint32_t k_split,
                                  uint32_t max_groups, bool pair = false);

// The three kernels. Tiled: a BM x BN tile per workgroup, BK-deep slices staged in shared memory,
// a TM x TN register tile per thread (TM, TN multiples of 4).
struct TiledGeometry {
    uint32_t bm, bn, bk, tm, tn;
    double efficiency = 1;  // relative rate when the device is full (for the tile choice)
    uint32_t stages = 1;    // shared buffers of a slice: 2 stages the next while this one is read
    bool by_cost = true;    // false: taken only where MEGANEURA_MATMUL_TILE forces it
    uint32_t resident = 0;  // workgroups a compute unit holds at once (0: unknown, enough; choose_k_split)
    // An operand read along K (A not transposed, B transposed) staged as its rows, 4 k's to a vec4, as it is fetched:
    // tiled_kernel's products (choose_tiled_geometry's stage_rows). Otherwise k-major, as the convolutions' implicit
    // GEMMs stage both.
    bool a_rows = false, b_rows = false;
    uint32_t threads() const { return (bm / tm) * (bn / tn); }
    uint32_t shared_bytes() const {  // rows and k-major rows both padded by one vec4
        return stages * ((a_rows ? bm * (bk + 4) : bk * (bm + 4)) + (b_rows ? bn * (bk + 4) : bk * (bn + 4))) * 4;
    }
};
// `summed` (K split, MatmulKernels::tile_counters): the product whose pieces the kernel's last piece of each tile sums
// (piece_sum_glsl); spec is then its pieces' (f32).
KernelSource tiled_kernel(const MatmulSpec& spec, const TiledGeometry& g, uint32_t k_split, uint32_t max_groups,
                          const MatmulSpec* summed = nullptr);
// What the tiled kernels share (matmul_tiled.cpp, the convolutions' implicit GEMMs): the geometry's #defines
// (BM BN BK TM TN STAGES A_ROWS B_ROWS), and after them the slices' shared arrays As and Bs (STAGES buffers of vec4
// rows padded by one vec4: BK k-major rows, or an operand's own BM or BN rows of 4 k's a vec4), the stage st, TX and TY.
std::string tiled_defines(const TiledGeometry& g);
extern const char* const kTiledSharedGlsl;

// The choices matmul_kernels makes, shared with the convolution family's implicit GEMMs: the
// workgroup count of a BM x BN tiling, the register tile for the grid on this device, and the K
// piece of split-K (K: no split; otherwise a multiple of 32 and of the kernel's K-slice `slice`).
int64_t workgroups(const MatmulSpec& spec, uint32_t bm, uint32_t bn);
// `why` (optional): the tile's name and each candidate's verdict, for KernelSource::choice. `stage_rows`: the kernel
// stages an operand read along K as its rows (TiledGeometry::a_rows, b_rows), counted in its shared memory.
TiledGeometry choose_tiled_geometry(const MatmulSpec& spec, const MatmulTuning& t, std::string* why = nullptr,
                                    bool stage_rows = false);
// Why a product is not on the cooperative kernels (the f32 kernels' KernelSource::choice).
const char* no_coop_reason(const MatmulSpec& spec, const MatmulTuning& t);
uint32_t choose_k_split(const MatmulSpec& spec, const MatmulTuning& t, int64_t groups, uint32_t slice, uint32_t resident);

// Cooperative matrix (matmul_coop.cpp): a BM x BN tile per workgroup, one WM x WN piece per
// subgroup (multiples of 16), K staged BK deep as f16 in `stages` shared buffers (1 or 2).
struct CoopGeometry {
    uint32_t bm, bn, wm, wn, bk = 32, stages = 2;
    int64_t min_work = 0;  // the smallest product (multiply-adds) the tile is chosen for
    uint32_t resident = 0;  // workgroups a compute unit holds at once (0: unknown, enough; choose_k_split)
    uint32_t subgroups() const { return (bm / wm) * (bn / wn); }
};
KernelSource coop_kernel(const MatmulSpec& spec, const CoopGeometry& g, const MatmulTuning& tuning, uint32_t k_split,
                         const MatmulSpec* summed = nullptr);
// Shared memory of the tile; a split product (MatmulTuning::coop_split) stages two parts of each operand.
uint32_t coop_shared_bytes(const CoopGeometry& g, const MatmulTuning& tuning);
// Whether a kernel of the tile may sum its own split-K pieces (MatmulTuning::pieces_summed_in_product): last_piece's
// flag takes 4 bytes more shared memory, which a tile chosen to fill the device's exactly does not have.
bool coop_pieces_sum_fits(const CoopGeometry& g, const MatmulTuning& tuning);
// The GLSL label's suffix and SCALED / SPLIT: "_coop", "_coop_scaled" or "_coop_split".
const char* coop_label_suffix(const MatmulTuning& tuning);
// Whose tile it is: a matmul's, or a convolution's implicit GEMM (whose gathers favour other tiles).
enum class CoopProduct { Matmul, ImplicitGemm };
// The tile for this GEMM on this device (tuning.forced_coop, else by the product's size and whose it is).
CoopGeometry choose_coop_geometry(const MatmulSpec& spec, const MatmulTuning& t, CoopProduct product,
                                  std::string* why = nullptr);
// What the convolution family's cooperative kernels share with the matmul's (and the attention's
// cooperative forward the first two): the extensions, the matrix types F16MAT and F32MAT with
// `uvec4 pack8(vec4 lo, vec4 hi, float s)` (8 elements times s as halves, the shared layout the
// loads read), scale_for and max_abs (the power-of-two scales of f32 values staged as f16), the geometry's #defines, its check, and the GLSL core, after the types. The core needs BM BN BK WM WN SG STAGES WG and
// A_K_INNER, B_K_INNER (each operand's shared order: k inner or k outer) defined before it, and
// definitions of `void fetch(uint k0)` (group p of this thread's slice, 8 elements as two vec4s, to
// put_a(p, lo, hi) and put_b: see the core's A_G and GA) and `float element_value(uint m, uint n, float v)` (C's
// element with the epilogue applied) and `void store_element(uint m, uint n, float v)` after it. It defines the shared stages As, Bs (uvec4: 8 halves), put_a, put_b, stash(), a_scale and b_scale (1 unless
// tuning.coop_scaled or coop_split), lid, warp, lane, wm, wn, `coop_start()`, `coop_product(k_begin, k_end)`
// (into acc) and `coop_store_elements()`.
extern const char* const kCoopExtensions;
extern const char* const kCoopTypesGlsl;
extern const char* const kCoopProductGlsl;
std::string coop_defines(const CoopGeometry& g, const MatmulTuning& tuning);
// Whether the tile splits into WM x WN pieces of 16 and its slices into whole groups of 8 per thread
// of a workgroup of subgroup_size-wide subgroups (wave64 halves the groups a tile has per thread).
bool coop_geometry_divides(const CoopGeometry& g, uint32_t subgroup_size);
void check_coop_geometry(const CoopGeometry& g, uint32_t subgroup_size);

// M == 1 or N == 1: R output elements per group of threads that split K (its choice says how many).
KernelSource gemv_kernel(const MatmulSpec& spec, const MatmulTuning& tuning);

// The half head dim of the column pairs (j, j + half) a kernel stores its parts in (parts that rotate or go into a
// cache: every part then holds whole heads of one size; no epilogue), or 0: none. A GEMV's (one row), or with `rows`
// the split sum's in a product kernel (several rows, no cache).
int64_t pair_half(const MatmulSpec& spec, bool rows = false);
// GLSL `void store_pair(uint row, uint col, float a, float b)`: columns col and col + HALF of row `row` into the part
// that holds them (rotated by the row's position, or at the cache's row, in the part's layout); binds the parts after
// `c`, then positions and inv_freq (a part rotates), then start (a cache). HALF defined before the text.
std::string store_pair_glsl(KernelSource& k, DType dtype, const std::vector<ColumnPart>& parts, const std::string& c = "c");

// Split-K: C = the sum of the `splits` partial products [splits][elements] (f32).
// The sum of `splits` f32 partial outputs, then the epilogue (the product's, where K is split), stored
// into the column parts (MatmulSpec::column_parts) if any.
// With `pair`, a second product's partials (the same count, bound last) are summed too, the epilogue's product2
// (MatmulSpec::b2 where K is split).
KernelSource split_sum_kernel(DType out_dtype, int64_t elements, uint32_t splits, uint32_t max_groups,
                              const Epilogue* epilogue = nullptr, const std::vector<ColumnPart>& column_parts = {},
                              bool pair = false, const MergedHeads& merged = {});
// The same for a product whose column parts rotate their heads (pair_half): a thread per pair of columns
// (j, j + head_dim / 2) of a head, summed in piece order as piece_sum_glsl's pairs are, and stored through store_pair
// (bindings p, c, the parts', positions and inv_freq).
KernelSource split_sum_pairs_kernel(const MatmulSpec& spec, uint32_t splits, uint32_t max_groups);
// The same for the gradient of an attention's output, which also stores its backward's delta (MatmulSpec::sum_delta):
// TPR threads a row of a head, which sum its elements, apply the epilogue and store them, then add their products with
// O's in shared memory, as attention_delta_kernel does (bindings p, c, the epilogue's, o, delta).
KernelSource split_sum_delta_kernel(const MatmulSpec& spec, uint32_t splits, uint32_t max_groups);
// The same for the f32 rows of an RMSNorm's or LayerNorm's output gradient, one workgroup a row, which then stores the
// norm's input gradient through its epilogue (MatmulSpec::sum_norm_grad): bindings p, c, the epilogue's, x, w, dx,
// dx's epilogue's, [up_xhat], [p2].
KernelSource split_sum_norm_grad_kernel(const MatmulSpec& spec, uint32_t splits, uint32_t max_groups);
// The same for f32 rows of `columns` values (a multiple of 4, at most kSumNormMaxColumns), one workgroup a row, which
// then stores the row's RMSNorm, y = c * rstd * w, or with `layer` its LayerNorm, y = (c - mean) * rstd * w + b
// (bindings p, c, the epilogue's, w, [b], y, the norm's epilogue's: y holds that epilogue's root where there is one;
// MatmulSpec::sum_norm_eps, sum_norm_epilogue).
KernelSource split_sum_norm_kernel(int64_t rows, int64_t columns, uint32_t splits, uint32_t max_groups,
                                   const Epilogue* epilogue, double eps, bool layer, const Epilogue* norm_epilogue);

// GLSL: `void store_c(uint i, float v)` and `void store_c4(uint i, vec4 v)`, which store the output's
// element i (and the 3 after it) of its row-major [rows, N] where it lives: in c, or with column parts in
// the part that holds its column, in that part's layout (ColumnPart), whose bindings (after c) and shapes
// this adds to k. Call it after c's binding and before the epilogue's; c4 (c's 16-byte view) declared before
// the text. A kernel that stores split-K partial products passes no parts. `c` names the binding (and the functions).
// With `merged` (MatmulSpec::heads_merged), rows of `row_length` stored with their heads merged (no parts).
std::string store_glsl(KernelSource& k, DType dtype, const std::vector<ColumnPart>& parts, const std::string& c = "c",
                       const MergedHeads& merged = {});

// The walk over a row's column parts that store_glsl and the GEMV's column pairs share: each part's width PART<p> as a
// spec constant (then whatever `store` adds), the parts after c bound as c_1, c_2, ... (not c4: common_glsl's 4-wide
// view of c, which a fifth part of that name redeclared: SmolVLA's 16 stacked projections did not compile), and for
// part p, `if (col < PART<p>) { <store(p, its binding's name)> return; } col -= PART<p>;`.
std::string column_part_walk(KernelSource& k, DType dtype, const std::vector<ColumnPart>& parts,
                             const std::function<std::string(size_t, const std::string&)>& store,
                             const std::string& c = "c");

// What the tiled and cooperative matmuls store (`spec`: the kernel's, f32 where K is split), before their loaders:
// store_c and the epilogue EPI (none where K is split), and C_EPI (the epilogue the kernel's own stores apply); SUMS,
// and PAIR (a pair's second product in the grid's upper half: MatmulSpec::b2). With `summed`, split-K's sum is in the
// kernel itself (MatmulKernels::tile_counters): after its a, b and c (its f32 pieces, made coherent), the bindings cnt
// (i32, a counter a tile, zero between dispatches), y (summed's C, its column parts) and the epilogue's, and a pair's
// b2 last; store_y; EPI; VEC_Y. Then kLastPieceGlsl and kPieceSumGlsl, after m0 and n0 are declared, define
// `void sum_pieces()`, which every invocation calls after storing its piece.
std::string product_store_glsl(KernelSource& k, const MatmulSpec& spec, uint32_t k_split, const MatmulSpec* summed);
extern const char* const kPieceSumGlsl;

}  // namespace mn::codegen::matmul_detail
