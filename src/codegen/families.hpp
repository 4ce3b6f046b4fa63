#pragma once
// The kernel families. Each function returns one dispatchable kernel; the GLSL text depends only
// on the family's variant (op, dtypes, tile sizes), never on shapes, which travel as
// specialization constants.
#include <map>
#include <optional>

#include "codegen/kernel.hpp"

namespace mn::codegen {

struct Launch {
    uint32_t local_size = 256;      // threads per workgroup for 1-D families
    uint32_t max_groups = 65535;    // per grid dimension
};

// A fused pointwise kernel: out[i] = the program's last value at element i of out_shape. The
// program is a list of steps in evaluation order; a step either loads input `a` (op == Op::Input,
// read through in_strides[a], which has out rank entries, 0 where the input is broadcast) or
// applies a pointwise op to earlier steps `a` (and `b`). A single op is the one-step program.
struct PointwiseSpec {
    struct Step {
        Op op;
        int32_t a = -1, b = -1;
        DType dtype;  // of the step's result
    };
    std::vector<Step> program;
    std::vector<DType> in_dtypes;
    DType out_dtype;
    Shape out_shape;
    std::vector<std::vector<int64_t>> in_strides;
    // Steps whose values are stored too (bindings out1, out2, ... after out0, the result), each in
    // its own dtype.
    std::vector<std::pair<int32_t, DType>> extra_outputs;
    int32_t result = -1;  // the step stored as out0 (an epilogue's value): -1, the last
    int32_t result_step() const { return result >= 0 ? result : static_cast<int32_t>(program.size()) - 1; }
    // Inputs bound as the f32 pieces of a split sum that nothing added (sched::FusionPlan::summed_as_read): per such
    // input, how many pieces, each `stride` elements after the last; the input reads as their sum, in piece order
    // from 0 as split_sum_kernel adds them, so the value is the sum kernel's bit for bit. Only a batch's member
    // (pointwise_batch_kernel) reads pieces.
    struct Pieces {
        uint32_t count;
        int64_t stride;
    };
    std::map<int32_t, Pieces> in_pieces;
};
KernelSource pointwise_kernel(const PointwiseSpec& spec, const Launch& launch);

// Several pointwise kernels as one dispatch (issue 15's multi-tensor optimizer step: the parameter
// updates no product stores). The workgroups are dealt out to the members in order, each member as
// many as its own pointwise_kernel would take, and each thread evaluates its member's tree as that
// kernel does, so the values are the separate kernels' bit for bit. A member reads each input through
// its strides over out_shape (element for element, a scalar, a broadcast). Inputs and outputs name their
// bindings by key: one key is one binding, which a scalar every member reads shares, and an update in
// place reads and writes (binding_keys[b] is binding b's key).
struct PointwiseBatch {
    struct Member {
        PointwiseSpec spec;
        std::vector<int32_t> in_keys;   // per input
        std::vector<int32_t> out_keys;  // out0, then the extra outputs
    };
    std::vector<Member> members;
};
KernelSource pointwise_batch_kernel(const PointwiseBatch& batch, const Launch& launch, std::vector<int32_t>& binding_keys);
// What a member weighs against a batch's limit (Tuning::max_batch_members): 4 where it runs by quads, four elements a
// thread (its tree on vec4s is four times the instructions of a scalar ISA's, and so is the driver's compile), else 1.
uint32_t batch_member_weight(const PointwiseBatch::Member& member);

// A pointwise tree a matmul or convolution applies to each element of its result before storing it
// (eval batch norm, bias, activation, residual add, an optimizer's update): `tree` over the product's
// output shape, whose input `product` is the product's value and whose other inputs, then its extra
// outputs, are bound after the product kernel's own bindings (or, where K is split, the split sum's).
struct Epilogue {
    PointwiseSpec tree;
    int32_t product = 0;
    int32_t product2 = -1;  // the input that is a second product's value (MatmulSpec::b2's), or -1
};
// GLSL defining EPI(i, v), the value stored at output element i for product value v: v itself
// without an epilogue; and with one, EPI2(i, v, v2) where the second product's value is v2. Adds the epilogue's bindings and constants to k: call it before k's preamble.
// `prefix` starts every name it declares (macros, functions, constants, bindings), for a second epilogue in one kernel.
std::string epilogue_glsl(const Epilogue* e, KernelSource& k, const std::string& prefix = "");
// GLSL `X_AT(i)`, element i of the kernel's input, binding 0 named x: x's; or, with a prologue (a fused pointwise tree the
// kernel evaluates where it would read x's element, Epilogue::product -1: schedule/fusion.hpp), the tree's at i, whose
// leaves' bindings replace x's, first. Call it after k's other bindings and constants are set, before its preamble.
std::string input_glsl(KernelSource& k, const Epilogue* prologue);

// out[out_offset + sum c_d*out_strides[d]] = in[in_offset + sum c_d*in_strides[d]] for every
// coordinate c of `dims`: permute, slice, expand and concat pieces are all this one kernel.
struct CopySpec {
    DType dtype;
    Shape dims;
    std::vector<int64_t> in_strides, out_strides;
    int64_t in_offset = 0, out_offset = 0;
};
KernelSource strided_copy_kernel(const CopySpec& spec, const Launch& launch);
// A piece of a concatenation: its length along the axis; and where it is read through strides (an expand no kernel
// stores: a nearest upsampling's), its elements in the row-major order of `dims`, each at the sum of its indices times
// `strides` (empty dims: contiguous).
struct ConcatPiece {
    int64_t length;
    Shape dims;
    std::vector<int64_t> strides;
};
// A concatenation along `axis` of `shape` (the output's) of `pieces`: one thread an output element, which reads its
// piece's element (bindings: the pieces in order, then the output).
KernelSource concat_kernel(DType dtype, const Shape& shape, size_t axis, const std::vector<ConcatPiece>& pieces,
                           const Launch& launch);

// Reductions over the middle axis of a [outer, r, inner] view. Sum, mean and max reduce a
// [lead, outer, r, inner] view over lead and r (per-channel sums of NCHW).
enum class ReduceMode { Sum, Mean, Max, Softmax, LogSoftmax };
// A reduction's kernels: `partial`, then, where it is cut into pieces, `sum` (the matmul family's split
// sum), which adds the pieces' f32 partial sums in piece order into the output. reduce_kernels picks
// the walk:
// - one workgroup per output element, threads striding over r (max, softmax, and what fills the device);
// - where inner is wide (a bias's or a norm weight's gradient over the rows of [rows, features]): a
//   workgroup reads 32 columns, coalesced along the rows, with the rows cut into pieces that fill the
//   device (sum and mean);
// - where few outputs each reduce a long row (a loss's mean over a whole tensor, a per-channel sum over
//   images and pixels): each row cut into pieces of thousands of elements, a workgroup a piece (sum and mean).
// With last_piece_sums, the partial kernel's workgroup that stores the last piece of an output (a block of 32
// columns, or one output of long rows) adds the pieces in piece order and stores it, the sum kernel's additions in its
// order (the same bits): no sum kernel, and tile_counters, its i32 counters (codegen::kLastPieceGlsl), bound after the
// partials and before the output.
struct Reduction {
    KernelSource partial;
    std::optional<KernelSource> sum;
    int64_t partial_elements = 0;  // f32 scratch between the two, where there is a sum or a last piece sums
    int64_t tile_counters = 0;
};
// With a prologue, the reduced tensor is that fused pointwise tree (Epilogue::product -1), evaluated
// where its element would be read; its leaves are the first bindings, in place of the input's.
Reduction reduce_kernels(ReduceMode mode, DType in_dtype, DType out_dtype, int64_t outer, int64_t r, int64_t inner,
                         const Launch& launch, int64_t lead, bool last_piece_sums, const Epilogue* prologue = nullptr);
// The pieces the column walk cuts a sum of this shape into (reduce_kernels' kernel for wide rows), 0 where it does not
// take the sum.
int64_t column_sum_pieces(int64_t outer, int64_t r, int64_t inner, const Launch& launch, int64_t lead);
// `members` sums of one shape that the column walk cuts into pieces, as one dispatch that stores each one's pieces
// (bindings: the inputs x0.., then the pieces y0..; `sum` none: their readers add them, sched::FusionPlan::
// summed_as_read); empty where a sum of that shape is no column walk in pieces. Member m runs the m-th run of the
// workgroups one sum's kernel would.
std::optional<Reduction> column_sums_batch(DType in_dtype, int64_t outer, int64_t r, int64_t inner, const Launch& launch,
                                           int64_t lead, uint32_t members);

// Cross-entropy with an ignore index, one workgroup a row. The loss: each stores its row's
// logsumexp(logits[n, :]) - logits[n, labels[n]] (0 in an ignored row) in row_loss, and the last to finish
// (cnt, the kernel's one counter: codegen::kLastPieceGlsl) their mean over the rows whose label is not
// ignore_index. (Four dispatches before, three of them one after another: ResNet-50's inference at batch 1 spent
// 13 us in them after its 1,000 logits on the H100.) Its gradient, grad[n, c] = upstream * (softmax(logits[n])[c] -
// (c == labels[n])) / count, 0 in an ignored row, reads count[0], the rows not ignored, which the count kernel
// (one workgroup) counts once: every row's workgroup counting them would read rows^2 labels. A label outside [0, C)
// that is not ignored yields NaN.
KernelSource cross_entropy_kernel(DType dtype, int64_t rows, int64_t classes, int64_t ignore_index, const Launch& launch);
KernelSource cross_entropy_count_kernel(int64_t rows, int64_t ignore_index, const Launch& launch);
KernelSource cross_entropy_grad_kernel(DType dtype, int64_t rows, int64_t classes, int64_t ignore_index,
                                       const Launch& launch);

// One part of a product's columns (MatmulSpec::column_parts): `width` columns stored row-major, [rows, width];
// or, with head_dim > 0, as the split of attention heads that a model's reshape to [rows / seq, seq, width /
// head_dim, head_dim] and permute {0, 2, 1, 3} would copy it into: [rows / seq, width / head_dim, seq, head_dim].
// A GEMV's parts may also be a decode step's q, k or v of one position ([1, width / head_dim, 1, head_dim]; MatmulSpec
// binds positions, inv_freq and start after the parts, where some part rotates or is stored in a cache): `rope`, its
// heads rotated by RoPE at positions[0] (rope_kernel's arithmetic; rope_inverse the other way), and with cache_rows > 0,
// stored as row `start` (clamped) of a cache [width / head_dim, cache_rows, head_dim] (a slice_write in place).
struct ColumnPart {
    int64_t width = 0;
    int64_t head_dim = 0, seq = 0;
    bool rope = false, rope_inverse = false;
    int64_t cache_rows = 0;
};

// C[b] = op(A[b]) @ op(B[b]) with broadcast batch dims (up to 4) and transposes read in place.
struct MatmulSpec {
    DType dtype;
    int64_t m, n, k;
    bool trans_a = false, trans_b = false;
    Shape batch;                          // output batch dims
    std::vector<int64_t> a_batch_strides;  // per batch dim, 0 where broadcast
    std::vector<int64_t> b_batch_strides;
    const Epilogue* epilogue = nullptr;  // applied by the product, or by the split sum where K is split
    // The output's columns as separate tensors, these parts in order (batch-free products only): column j
    // of a row goes to the part that holds it, bound after the first (c) in order. Empty: one tensor.
    std::vector<ColumnPart> column_parts;
    // An operand stored as f16 in an f32 product (precision fast: a weight cast once, schedule/lower_products.cpp), so the
    // product reads half the bytes; it multiplies as the f32 operand rounded to f16 would.
    bool a_f16 = false, b_f16 = false;
    // > 0: A is the RMSNorm of the row it binds, with this epsilon and a weight of K elements bound last: the
    // GEMV (M == 1, unbatched, f32) computes the row's statistic itself and reads a[k] * rstd * w[k], as the
    // norm's kernel would store it (schedule/fusion.hpp), so the norm is no dispatch of its own.
    double a_rms_eps = 0;
    // A second B of the same shape and layout, bound last (after the norm's weight): a GEMV of one row computes
    // both products for each output and stores the epilogue of the two (Epilogue::product2), as a SwiGLU's
    // silu(x W_gate^T) * (x W_up^T) in one dispatch and one level (schedule/fusion.hpp). A product of several rows
    // takes it only where K is split: its kernel runs over each B into its own partials (schedule/lower_products.cpp),
    // and the split sum, summing both (the second's partials bound last), stores the epilogue of the two.
    bool b2 = false;
    // With b2, where K is split: the second product reads an A of its own too, of A's shape and layout, bound after the
    // second W, so the epilogue of the two can be their sum (a SwiGLU's backward: dU Wu + dG Wg, in one level).
    bool a2 = false;
    // > 0: C's rows (of N values, after the epilogue) are a norm's input (an RMSNorm's; with sum_layer_norm, a
    // LayerNorm's), with this epsilon. Where K is split, the sum kernel stores the norm too (a workgroup per row: the
    // row, then its statistics, then the norm), its weight (and bias) and output bound after the epilogue's inputs, so
    // the norm is no dispatch of its own (schedule/fusion.hpp); MatmulKernels::sum_stores_norm says whether it does (an
    // f32 C of whole 16-byte rows, no column parts, rows of at most kSumNormMaxColumns).
    double sum_norm_eps = 0;
    bool sum_layer_norm = false;
    // The norm's own epilogue (its product input the norm's value), whose root the sum stores in the norm's place, its
    // inputs and outputs bound after the norm's output (Whisper's final LayerNorm and what its reader computes of it).
    const Epilogue* sum_norm_epilogue = nullptr;
    // heads > 0: C is the gradient of an attention's output, [batch * seq, heads * head_dim] stored split into its
    // heads (its one column part), and O that output. Where K is split and a sum kernel adds the pieces, that kernel
    // stores the attention backward's delta = rowsum(C * O) too, [batch, heads, seq] f32, O (f32; o_merged: its heads
    // merged, [batch, seq, heads, head_dim]) and delta bound after the epilogue's inputs, so the delta is no dispatch
    // of its own (schedule/fusion.hpp); MatmulKernels::sum_stores_delta says whether it does.
    struct SumDelta {
        int64_t heads = 0, seq = 0, head_dim = 0;
        bool o_merged = false;
    } sum_delta;
    // on: C's rows (after the epilogue) are the gradient of an RMSNorm's output (a LayerNorm's with `layer`) over
    // rows x of N values. Where K is split and a sum kernel adds the pieces, that kernel stores the norm's input gradient
    // dx too, through its own epilogue (a residual's gradient added), a workgroup per row: x, w and dx bound after the
    // product's epilogue's inputs, then dx's epilogue's, then a pair's second partials (MatmulSpec::b2), so the norm's
    // backward is no dispatch of its own (schedule/fusion.hpp); MatmulKernels::sum_stores_norm_grad says whether it
    // does (f32 rows of whole 16-byte vectors, at most kSumNormMaxColumns, no column parts).
    struct SumNormGrad {
        bool on = false, layer = false;
        double eps = 0;
        const Epilogue* epilogue = nullptr;
        bool stores_up_xhat = false;  // NormSpec::stores_up_xhat's, bound after dx's epilogue's (before p2)
    } sum_norm_grad;
    // > 0: C's rows, (b * heads_merged + h) * heads_seq + t (a product batched over heads; no column parts), are
    // stored at row (b * heads_seq + t) * heads_merged + h: an attention's dQ stored with its heads merged back
    // (the model's permute {0, 2, 1, 3}), no copy.
    int64_t heads_merged = 0, heads_seq = 0;
};
inline constexpr int64_t kSumNormMaxColumns = 8192;
// The dtype operand x ('a' or 'b') is stored in.
DType operand_dtype(const MatmulSpec& spec, char x);
// What the matmul family may specialize on, read from DeviceCaps by schedule/ (tune_for).
struct MatmulTuning {
    uint32_t max_groups = 65535;         // per grid dimension
    uint32_t max_invocations = 256;      // per workgroup
    uint32_t max_shared_memory = 32768;  // bytes per workgroup
    uint32_t compute_units = 0;          // multiprocessors; 0: unknown
    bool cpu = false;                    // a CPU driver: one big register tile, few threads
    // > 0: precision Fast on a device with NV or KHR cooperative matrices f16*f16+f32 at 16x16x16
    // (sched::choose_coop); the subgroup size the coop kernel is built for (required at pipeline creation).
    uint32_t coop_subgroup = 0;
    uint32_t max_subgroups = 0;  // per workgroup at that size (DeviceCaps::max_workgroup_subgroups); 0: unknown
    // The cooperative kernels scale each operand's K slices into f16's range (gradient products: see
    // matmul_coop.cpp's take_scales).
    bool coop_scaled = false;
    // The cooperative kernels stage each f32 operand as two f16 parts, hi + lo, and multiply hi*hi + hi*lo
    // + lo*hi, scaled as coop_scaled does: about 21 significant bits (forward products before piecewise
    // gradients: sched::Tuning::split_forward; matmul_coop.cpp's SPLIT).
    bool coop_split = false;
    const char* coop_declined = "precision strict";  // why coop_subgroup is 0 (MEGANEURA_DEBUG's explanation)
    uint32_t forced_bm = 0;      // > 0: the tile of this height (MEGANEURA_MATMUL_TILE; tests, tuning)
    uint32_t forced_bk = 0;      // > 0: the tiled kernel's K-slice (MEGANEURA_MATMUL_TILE=bm/bk)
    uint32_t forced_bn = 0;      // > 0: the tiled kernel's width too (MEGANEURA_MATMUL_TILE=bmxbn[/bk])
    uint32_t forced_stages = 0;  // > 0: the tiled kernel's shared stages (MEGANEURA_MATMUL_TILE=...:2)
    uint32_t forced_tm = 0, forced_tn = 0;  // > 0: a thread's rows and columns of the tile (MEGANEURA_MATMUL_TILE=...@16x8)
    uint32_t forced_splits = 0;  // > 0: split K into this many pieces, 1: never (MEGANEURA_MATMUL_SPLITS)
    // bm, bn, wm, wn, bk, stages of the cooperative tile, all 0: chosen (MEGANEURA_COOP_TILE; tuning)
    std::array<uint32_t, 6> forced_coop{};
    uint32_t max_loop_iterations = 0;  // DeviceCaps::max_loop_iterations: K is split to stay under it
    // Where K is split, a dispatch of its own sums the pieces (the default, sched::Tuning's too, and always a
    // convolution's weight gradient summing its images); true: the last piece of each tile does
    // (MatmulKernels::tile_counters; MEGANEURA_SPLIT_SUM=product or matmul).
    bool pieces_summed_in_product = false;
    // > 0: a subgroup size the device runs subgroup arithmetic at, required at pipeline creation; the GEMV then adds an
    // output's neighbouring k-slices in subgroups (matmul_gemv.cpp). 0: its shared-memory tree alone
    // (MEGANEURA_GEMV_SUM=tree; a device without subgroup arithmetic or size control).
    uint32_t sum_subgroup = 0;
};

// The dispatches of one matmul: a GEMV (K-split dot products) when M or N is 1, the
// cooperative-matrix kernel (f16 tiles, f32 accumulation) when tuning.coop_subgroup is set and the
// dtype is f32, otherwise the register-tiled f32 kernel, with a tile chosen for the grid size.
// When even the smallest tile leaves the device underfilled, K is split: `product` writes
// `partial_elements` f32 partial products into a scratch buffer (its binding c) and `sum` adds
// them into C; or, with tile_counters, the product's last piece of each tile does (binding cnt:
// tile_counters i32 that are zero before the dispatch, and are again after it).
struct MatmulKernels {
    KernelSource product;
    std::optional<KernelSource> sum;
    int64_t partial_elements = 0;
    int64_t tile_counters = 0;
    uint32_t tile_columns = 0;     // where the product sums its pieces: its tiles' width (BN)
    bool sum_stores_norm = false;  // MatmulSpec::sum_norm_eps
    bool sum_stores_delta = false;  // MatmulSpec::sum_delta
    bool sum_stores_norm_grad = false;  // MatmulSpec::sum_norm_grad
};
MatmulKernels matmul_kernels(const MatmulSpec& spec, const MatmulTuning& tuning);

// conv2d (NCHW) and its derivatives as implicit GEMMs over the matmul tiles; see conv.cpp.
// Bindings: Forward (x, weight, y), GradInput (gy, weight, gx), GradWeight (x, gy, gw).
enum class ConvMode { Forward, GradInput, GradWeight };
struct ConvSpec {
    ConvMode mode;
    DType dtype;
    Shape x, weight, y;          // [N, C, H, W], [O, C / groups, KH, KW], [N, O, OH, OW]
    std::vector<int64_t> attrs;  // the Conv2d node's ints (ops.def)
    const Epilogue* epilogue = nullptr;  // Forward only
    bool weight_f16 = false;  // Forward only: the weight stored as f16 (MatmulSpec::a_f16's reason)
    // Forward only, where conv_weight_in_octets: the weight stored in the kernel's order of K,
    // [O][C / groups / 8][KH][KW][8], so that the cooperative kernel reads a group of 8 k as one 16-byte load.
    bool weight_octets = false;
};
// Whether the cooperative kernel of this convolution orders its K in octets of channels, k = ((c / 8) * taps +
// tap) * 8 + c % 8, not c * taps + tap: where the channels summed over come in whole groups of 8. A thread's 8
// consecutive k are then 8 channels at one tap, whose window position and bounds it computes once, not for each
// element; and a slice's groups are neighbouring taps of the same channels, which read the same stretch of the
// weight ([O][C][KH][KW]: 8 channels' taps are 8 * KH * KW consecutive elements).
bool conv_k_octets(const ConvSpec& spec, const MatmulTuning& tuning);
// Whether the cooperative kernel reads this convolution's f16 weight 16 bytes at a time only from a copy stored
// in octets (ConvSpec::weight_octets): K in octets over more than one tap.
bool conv_weight_in_octets(const ConvSpec& spec, const MatmulTuning& tuning);
// `kernels` as the matmul family's: the product, and where K is split (or a 1x1 weight gradient
// sums over images) an f32 scratch of partial_elements it writes and `sum` reduces into the output.
// operands_swapped: the product binds the node's two inputs in reverse order (a 1x1 convolution
// lowered to a matmul, weight first).
struct ConvKernels {
    MatmulKernels kernels;
    bool operands_swapped = false;
};
ConvKernels conv2d_kernels(const ConvSpec& spec, const MatmulTuning& tuning);
// A 1x1 convolution with stride 1, no padding and one group: conv2d_kernels lowers it (all three
// modes; the weight gradient when f32 or of one image) to the matmul family.
bool conv_is_pointwise(const Shape& weight, const std::vector<int64_t>& attrs);

// max_pool2d over x [N, C, H, W] -> [N, C, out_h, out_w]; the backward reads (x, gy), writes gx.
struct PoolSpec {
    DType dtype;
    Shape x;
    int64_t out_h, out_w, kernel, stride, padding;
};
KernelSource max_pool2d_kernel(const PoolSpec& spec, bool backward, const Launch& launch);

// Fused attention (flash-style online softmax; scores live only in shared memory), see
// Graph::attention for the semantics. Query heads of one kv head are processed together: q viewed
// as [B, Hkv, G * Tq, D] (G = Hq / Hkv) shares each staged K/V tile among the group.
struct AttentionSpec {
    DType dtype;
    int64_t batch, q_heads, kv_heads, q_len, kv_len, head_dim;
    bool causal = false;
    int64_t window = 0;
    double scale = 1;
    bool dynamic_start = false;  // query_start read from a bound i32 scalar, else query_start below
    int64_t query_start = 0;
    // The forward stores out as [batch, q_len, q_heads, head_dim], the heads merged back next to each
    // other (what a model's merge of the heads, permute {0, 2, 1, 3}, would copy it into); lse stays
    // [batch, q_heads, q_len]. So do the dQ kernel its dq and the dK/dV kernel its dk ([batch, kv_len,
    // kv_heads, head_dim]); merged_dv: the dK/dV kernel its dv (each as the gradient's reader takes it).
    bool merged_out = false, merged_dv = false;
    // A backward kernel whose dq (or dk) a RoPE alone reads (the gradient of the forward's RoPE: rotate_sign -1) stores
    // it rotated, the RoPE's value, where its sweep is split: the workgroup that stores a block's last chunk, or the
    // sum kernel, adds the chunks and rotates (AttentionGradKernels::rotated), reading the RoPE's positions (i32, [TQ]
    // or [TK]) and frequencies (rotate_freq_dtype, [D / 2]) bound after the outputs; 0: not rotated.
    float rotate_sign = 0;
    DType rotate_freq_dtype = DType::F32;
};
struct AttentionTiles {
    uint32_t rows = 16;            // rows a workgroup owns: query rows, key rows in the dK/dV kernel
    uint32_t threads_per_row = 4;  // each owns head_dim / threads_per_row output columns
    uint32_t tile = 32;            // rows of the other operand staged in shared memory per step
    uint32_t shared_bytes = 32768;  // the device's limit; tiles shrink until they fit
    uint32_t max_invocations = 1024;  // the device's workgroup size limit
    // Problems with many rows take the register-blocked kernels: there `rows` are taken in groups
    // of 4 and threads_per_row threads share a group (attention_blocked.cpp).
    bool blocked = true;
    // The subgroup sizes the device can require, where it runs subgroup shuffles (0: none). The blocked forward then
    // takes its rows' maxima and sums across a group's threads in registers (no shared memory, one barrier a key
    // tile fewer) at the smallest of them that holds a group; else through shared memory.
    uint32_t shuffle_min_subgroup = 0, shuffle_max_subgroup = 0;
    // DeviceCaps::max_loop_iterations: the row-wise kernels' loops over a long sweep can pass it, so
    // such sweeps are split into chunks (forward) or take the blocked kernels, whose loops run once per tile.
    uint32_t max_loop_iterations = 0;
    uint32_t compute_units = 0;  // DeviceCaps::compute_units (0: unknown): how many workgroups fill the device
    uint32_t forced_splits = 0;  // > 0: the forward's keys in this many chunks, 1: never split (MEGANEURA_ATTENTION_SPLITS)
    // > 0: the subgroup size of the cooperative kernels (attention_coop.cpp, attention_coop_backward.cpp),
    // where the matmuls run on cooperative matrices (MatmulTuning::coop_subgroup); 0: coop_declined says why not.
    uint32_t coop_subgroup = 0;
    const char* coop_declined = "precision strict";
    // dQ as a matmul of the dS the dK/dV kernel stores, where grad_q_from_scores allows (MEGANEURA_ATTENTION_GRAD_Q).
    bool grad_q_from_scores = true;
    // A forward whose keys are split merges the chunks in the workgroup that stores a block's last one, a thread per
    // output looping over them (AttentionForwardKernels::tile_counters), and a backward kernel whose sweep is split
    // adds its chunks so (AttentionGradKernels::tile_counters); false: the combine's and the sum's own dispatches
    // (MEGANEURA_SPLIT_SUM=dispatch, as split-K's sum).
    bool last_chunk_merges = true;
};
// The forward: one kernel writing out and lse (f32 [B, Hq, Tq]), bindings q, k, v, [query_start],
// out, lse; on cooperative matrices where tiles.coop_subgroup is set and the problem suits them
// (attention_coop.cpp). When few rows leave the device underfilled (decode), flash-decoding instead:
// `forward` splits the keys across workgroups and writes each chunk's unnormalized output, max and
// sum into an f32 scratch of partial_elements (its last binding), and `combine` (bindings: scratch,
// out, lse) merges the chunks exactly, in a fixed order (attention_decode.cpp); or with tile_counters
// (AttentionTiles::last_chunk_merges), `forward` merges them itself, binding after the scratch cnt (i32, a
// counter a block of rows, zero before and after the dispatch), out and lse.
struct AttentionForwardKernels {
    KernelSource forward;
    std::optional<KernelSource> combine;
    int64_t partial_elements = 0;
    int64_t tile_counters = 0;
};
AttentionForwardKernels attention_forward_kernels(const AttentionSpec& spec, const AttentionTiles& tiles, const Launch& launch);
// delta[r] = d_out[r, :] . out[r, :] for each row r of [batch, q_heads, q_len] (f32), the backward's row
// correction; out read with its heads merged where spec.merged_out (the forward stored it so). Bindings: out, d_out, delta.
KernelSource attention_delta_kernel(const AttentionSpec& spec, const Launch& launch);
// The backward kernels run on cooperative matrices where tiles.coop_subgroup is set and the problem
// suits them (attention_coop_backward.cpp); their choice names the variant and why that one declined.
// Where their workgroups would leave the device idle (few heads), each splits its sweep as the forward
// splits its keys: `product` then stores each chunk's f32 partial sums (its last binding, in place of
// its outputs: partial_elements) and `sum` (bindings: the partials, then the outputs) adds them.
struct AttentionGradKernels {
    KernelSource product;
    std::optional<KernelSource> sum;
    int64_t partial_elements = 0;
    int64_t tile_counters = 0;  // > 0: `product` adds its chunks itself (AttentionForwardKernels::tile_counters)
    bool rotated = false;       // they store dq (dk) rotated (AttentionSpec::rotate_sign): the kernel that stores it binds
                                // positions and frequencies after its outputs
};
// Bindings: q, k, v, d_out, lse, delta, [query_start], d_q.
AttentionGradKernels attention_grad_q_kernels(const AttentionSpec& spec, const AttentionTiles& tiles, uint32_t max_groups);
// One workgroup per block of keys of one kv head, looping over every query row of its group, so
// dK and dV need no atomics. Bindings: q, k, v, d_out, lse, delta, [scores], [query_start], d_k, d_v.
// store_scores (only where grad_q_from_scores): it also stores dS times the scale into `scores`, f32
// [B * Hkv, G * Tq, Tk] (the query rows of a kv head as the forward stacks them), so that
// dQ = scores @ k, as [B * Hkv, G * Tq, D] = [B, Hq, Tq, D], is a batched matmul (sched::lower).
AttentionGradKernels attention_grad_kv_kernels(const AttentionSpec& spec, const AttentionTiles& tiles, uint32_t max_groups,
                                               bool store_scores = false);
// Whether dQ is that matmul: non-causal f32 problems on the blocked dK/dV kernel whose dS fits 256 MiB, unless
// tiles.grad_q_from_scores is off (attention.cpp says why).
bool grad_q_from_scores(const AttentionSpec& spec, const AttentionTiles& tiles);

}  // namespace mn::codegen

namespace mn::codegen {

// Transformer family (codegen/transformer.cpp). Rows are the last dim of a [rows, dim] view.
// embedding: out[n, j] = weight[ids[n], j], NaN for an id outside [0, vocab).
KernelSource embedding_kernel(DType dtype, int64_t positions, int64_t vocab, int64_t dim, const Launch& launch);
// d embedding / d weight, deterministic without atomics: out is zeroed by fill_zero_kernel, then
// one workgroup per position that holds the first occurrence of its id sums the rows of every
// position with that id, in position order, into out[id]. Ids out of range are skipped.
KernelSource fill_zero_kernel(DType dtype, int64_t count, const Launch& launch);
// An f32 parameter's Init::Uniform or Init::Normal values (compiler/initial_values.hpp defines them) drawn on the
// device, which has 64-bit integers and floats (DeviceCaps::shader_int64, shader_float64): one pipeline for every
// parameter, what it draws in push constants (initial_values_push: the value's key, kind, a, b and element count;
// the caller sizes each dispatch's grid, a thread an element).
KernelSource initial_values_kernel(const Launch& launch);
extern const uint32_t kInitialValuesPushBytes;
std::vector<uint8_t> initial_values_push(uint64_t key, bool normal, double a, double b, int64_t count);
KernelSource embedding_grad_kernel(DType dtype, int64_t positions, int64_t vocab, int64_t dim, const Launch& launch);
// RMSNorm / LayerNorm / GroupNorm over rows and their d / d x, one workgroup per row, two passes
// (mean, then centered variance) so large means lose no precision. The affine weight (and bias) is
// per channel: element j of row r has channel (r % groups) * (dim / spatial) + j / spatial. A row
// norm's channel is j (1 group, spatial 1); GroupNorm's rows are (image, group) pairs, each
// dim / spatial channels of `spatial` pixels. Mean-centered (LayerNorm, GroupNorm) or not (RMSNorm).
enum class NormMode { Rms, Layer };
struct NormSpec {
    NormMode mode;
    DType dtype;
    int64_t rows, dim;
    int64_t groups = 1, spatial = 1;
    double eps;
    // The pointwise tree stored instead of the normalized value (GroupNorm + SiLU) or of the input gradient
    // (plus a residual's gradient); its other inputs, then its extra outputs, are bound after y (dx).
    const Epilogue* epilogue = nullptr;
    // x is this fused pointwise tree (Epilogue::product -1), evaluated where x's element is read: its leaves are the
    // first bindings, in place of x's, and its value is stored into the last binding, for x's other readers (an RMS or
    // Layer norm: Whisper's positional add before its first LayerNorm).
    const Epilogue* prologue = nullptr;
    // A gradient (RMS or Layer) also stores up * xhat, the normalized row times the output's gradient (what the weight's
    // gradient sums over the rows), bound last: the row is in registers, where a kernel of its own would normalize it
    // again (schedule/fusion.hpp).
    bool stores_up_xhat = false;
};
// Bindings: x (or the prologue's), w, [b (Layer)], y, then the epilogue's, then x's value (with a prologue).
KernelSource norm_kernel(const NormSpec& spec, const Launch& launch);
// Bindings: x, w, up, dx, then the epilogue's, then up * xhat's (stores_up_xhat).
KernelSource norm_grad_kernel(const NormSpec& spec, const Launch& launch);
// Where RoPE's rows [batch, heads, seq] are in memory: reads_split reads x as [batch, seq, heads, dim]
// (before a model's split of the heads, permute {0, 2, 1, 3}, which is then no copy); writes_merged
// stores y so (the merge back, in a backward). cache_rows > 0 stores y's rows into a KV cache y of
// [batch, heads, cache_rows, dim] at the row a start buffer holds, clamped as slice_write clamps it (the
// rotated keys written in place, schedule/fusion.hpp): one more binding, start, after y.
struct RopeLayout {
    int64_t heads = 0;  // needed by reads_split or writes_merged
    bool reads_split = false, writes_merged = false;
    int64_t cache_rows = 0;
};
// RoPE on x [rows, dim] whose row r has position positions[r % seq]; one thread per pair.
KernelSource rope_kernel(DType dtype, int64_t rows, int64_t seq, int64_t dim, bool inverse, const Launch& launch,
                         const RopeLayout& layout = {});
// out = x [outer, dim, inner] with src [outer, len, inner] written at rows [start, start + len),
// start read from a buffer and clamped into [0, dim - len).
KernelSource slice_scatter_kernel(DType dtype, int64_t outer, int64_t dim, int64_t len, int64_t inner,
                                  const Launch& launch);
// The same rows written in place into y, the rest of which it leaves as it is: one thread per element
// of src (schedule/fusion.hpp's cache write in place). Bindings: src, start, y.
KernelSource slice_write_kernel(DType dtype, int64_t outer, int64_t dim, int64_t len, int64_t inner, const Launch& launch);

}  // namespace mn::codegen
