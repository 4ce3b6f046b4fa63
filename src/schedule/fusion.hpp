#pragma once
// Pointwise fusion: which nodes become one kernel, decided before lowering.
//
// A pointwise node is inlined into its consumer when it is that consumer's only use, the consumer is pointwise too, and
// the node is not a root (an output or an assignment). A node the consumer broadcasts (a smaller shape) is then
// computed once per element of the consumer: see inlinable(). What remains is a set of fused roots, each one kernel
// that reads its leaves through broadcast strides and evaluates the tree in registers.
//
// A fused root that a later kernel of the same shape reads element for element, an assignment of it aside, is computed
// in the first such kernel and written as one more of its outputs, when every other reader runs after that kernel: an
// optimizer's moments, which the parameter's update reads, cost no kernels of their own, nor does a training step's
// activation that the backward reads too (a GELU's pre-activation, stored by the GELU's kernel; a SwiGLU's SiLU of the
// gate, stored by the up product's epilogue).
//
// A fused root that no later kernel reads element for element is computed and stored by the kernel of another root of
// its shape, a co-root, where that root is one of its leaves or reads one of them, everything it reads is computed by
// then and every reader runs after (the earliest such kernel): a SwiGLU's backward, whose gate's and up's gradients
// both read the down product's input gradient, one kernel, that product's epilogue, which no longer stores it; a
// loss's seed, a function of the output it reads, stored by that output's kernel.
//
// A matmul, convolution (forward or input gradient), norm or norm's gradient whose one reader is a fused
// root's tree, reading it element for element (directly, or through a reshape that only that tree reads), is
// computed in that root's place and stores the root's value through the tree (its epilogue: eval batch norm,
// bias, activation, residual add; a GroupNorm's SiLU; a ReLU's gradient mask): the pointwise kernel, and the
// product's round trip through memory, go. Of several such products, the deepest (fusion.cpp's try_epilogue), so that
// the others run as early as their inputs allow. A norm's one workgroup per row finishes its statistics before it
// stores anything, so its epilogue sees the row's final values as a product's does. A norm or matmul that
// later kernels read too stores its own value there as well (training's GroupNorm + SiLU, whose backward
// reads the norm; a SwiGLU's up product, which stores the product of the two, both read by the backward).
//
// An attention whose one reader merges its heads back (permute {0, 2, 1, 3}; in training its gradients read it
// too, through the delta kernel, which reads either layout) stores its output in that layout itself, and the
// permute is its value: a copy kernel and its barrier go. So do the gradients dQ, and dK with dV, of a model's
// split of the heads (the backward merges them back before the products' gradients). Likewise a RoPE whose
// input is a split of the heads, read by it alone, reads the unsplit tensor itself, and one read only
// by such a permute (the backward's) stores in its layout.
//
// A matmul whose readers are all slices of its columns that tile them (optimize/'s sibling fusion: q, k
// and v of one product) stores each slice as a tensor of its own: its kernel writes column j to the slice
// that holds it, so the slices are no copies, and what reads them reads contiguous tensors as before. So does a
// matmul that stores a fused root through its epilogue, where the root's readers are such slices (biased siblings:
// the stacked biases added, then sliced).
//
// An assignment whose value is a fused root writes that kernel's result straight into the target
// (a parameter or optimizer state) instead of copying it afterwards, when that is safe: every other
// reader of the target's old contents runs in an earlier kernel or reads it element-for-element
// inside this one.
//
// Two products of one f32 row of the same A whose only reader is one fused tree, as a SwiGLU's
// silu(x W_gate^T) * (x W_up^T) in a decode step, are one GEMV over both weights that stores the tree
// (codegen::MatmulSpec::b2): x read once, and one dispatch and one level where the gate's product came before the up
// product's epilogue. Two such products of several rows where K is split (`ProductSplit::splits_k`; alike, they split
// alike), a prefill's SwiGLU, are one product kernel over both weights whose last piece of a tile adds both products'
// pieces and stores the tree (codegen::MatmulKernels::tile_counters; with the split sum a dispatch of its own,
// MEGANEURA_SPLIT_SUM=dispatch, the two product dispatches and one sum of both): the gate's own product and its level
// go. Either product that later kernels read too (a training step's gate and up, which the backward reads) is stored
// as well (epilogue_keeps). Two products of several rows of different A's, alike in shapes, pair the same way where K is
// split (codegen::MatmulSpec::a2: the second product's loads read its own A): a SwiGLU's backward's input gradient
// dU Wu + dG Wg is one product kernel, and one level, where the up's product came before the gate's and its add.
//
// An RMSNorm of one f32 row whose every reader (directly or through reshapes) is a product of one row reading it
// as A, a decode step's norm before q, k, v and before gate and up, is computed by those products' GEMVs
// themselves (codegen::MatmulSpec::a_rms_eps: each workgroup sums the row's squares, K is a few hundred): the
// norm's dispatch and its level go, two per layer of a decode step.
//
// An RMSNorm or LayerNorm of f32 rows whose input is the value a matmul stores (its own, or its epilogue's), when that
// matmul splits K (`ProductSplit::splits_k`, the lowering's choice) and its rows are the norm's: the split's sum
// kernel, which adds the pieces anyway, takes one workgroup per row and stores the norm after the row
// (codegen::MatmulSpec::sum_norm_eps; a dispatch of its own, as a row spans the product's tiles): the norm's dispatch
// and its level go, two per layer of a pre-norm transformer's forward where its residual products split K (SmolVLA's
// and SmolLM2's prefill, Whisper's encoder).
//
// The backward of an RMSNorm or LayerNorm of f32 rows whose output gradient `up` is the value a matmul stores (its own,
// or its epilogue's: a SwiGLU's or q, k and v's input gradients summed), when that matmul splits K and a sum kernel of
// its own adds the pieces: that sum takes one workgroup per row, stores `up` as before and then the norm's input
// gradient through the norm's epilogue (a residual's gradient added; codegen::MatmulSpec::sum_norm_grad), where the
// norm's input, weight and its epilogue's other inputs come before the product: the norm backward's dispatch and its
// level go, two per layer of a pre-norm transformer's training step.
//
// The gradient of an attention's output (d_out of its backward) that a matmul stores split into heads as its own f32
// value (heads_split_stored), where the matmul splits K and a sum kernel of its own adds the pieces
// (`ProductSplit::summed_tile_columns` 0): that sum, which holds each element of d_out once, also stores the backward's
// delta = rowsum(d_out * out) per head row (codegen::MatmulSpec::sum_delta), reading the attention's output: the
// delta's dispatch and its level go, one per attention layer of a training step (SmolLM2's, SmolVLA's and Whisper's
// output projections' input gradients).
//
// An assignment of a tensor to a slice_scatter of itself, assign(x, slice_scatter(x, src, axis, start)) (a
// KV cache's new rows at the run-time position), writes src's rows into x's bytes and nothing else: one kernel
// of src's size, where the slice_scatter copied all of x with the rows in it and the assignment copied that
// back (two kernels over the whole cache per token). When that is safe: the assignment alone reads the
// slice_scatter (it is no output), and every other reader of x's old contents runs in an earlier kernel (the
// level order puts the write after them; those that read the assignment read x after it). Where src is a
// RoPE that nothing else reads (a model's rotated keys) and x's old contents are read before it too, the RoPE's
// kernel stores its rows into x itself and the slice_write goes: a dispatch and a level per layer of a decode step.
//
// A one-row f32 product whose column slices are a decode step's q, k and v (optimize/'s sibling fusion), each viewed
// as [1, heads, 1, head_dim] by reshapes that it alone reads, computes what their RoPEs and cache writes would: a
// slice read by a RoPE alone is stored rotated (the RoPE's value), one whose RoPE or itself a cache's write in place
// alone reads is stored into the cache at the start (the write's value). The GEMV computes each head's pairs of
// columns (j, j + head_dim / 2) together (codegen::ColumnPart::rope, cache_rows): two RoPE kernels, the
// slice_write and their level go, per layer of a decode step. When every other reader of a cache's old contents
// runs before the product (the rows are written there now), and the RoPEs' positions and frequencies and the
// writes' start are lowered before it.
//
// A product of several f32 rows, without an epilogue, whose heads RoPEs rotate (a prefill's q and k: its column
// slices', or its own value's), each through reshapes to [batch, seq, heads, head_dim] and the split of the heads its
// RoPE alone reads (heads_split_by; for one head, the view [batch, 1, seq, head_dim] the RoPE reads itself), with
// positions of seq elements, stores them rotated (the RoPE's value) where it splits K and the sum can: a sum dispatch of
// its own, or its last piece of a tile where its tiles hold whole heads (`ProductSplit::sum_rotates_heads_of`): the sum
// computes each head's pairs of columns together as the GEMV does. Two RoPE kernels and their level go, per layer of a prefill (rope_in_gemv and in_gemv say
// so too).
//
// An attention's gradient dQ or dK that a RoPE alone reads (the gradient of the forward's RoPE of q or k) is stored
// rotated by the attention gradient's kernel, the RoPE's value (in its permute's layout where that merges the heads),
// where the workgroup that stores a block's last chunk adds the chunks (codegen::AttentionGradKernels::rotated); where
// the kernel cannot, the lowering stores the gradient and lowers the RoPE after it. A RoPE kernel and its level go, per
// layer of a training step of a model with rotary positions (SmolLM2's).
//
// An RMSNorm or LayerNorm of f32 rows whose input is a fused root of a plain pointwise kernel (nothing else in it), read
// by later kernels too, evaluates that root's tree as it reads its row (codegen::NormSpec::prologue) and stores the
// root's value for the others: Whisper's positional add before its first LayerNorm, one kernel and level fewer.
//
// A norm's weight gradient sums up * xhat over the rows, where xhat is the norm of x with unit weight (mn::grad's): that
// product, a unit norm's epilogue, is stored by the kernel of the norm's input gradient of the same x and up (its own,
// or the split sum that computes it), which holds the normalized row already: the unit norm's kernel goes, one a norm
// of every training step.
//
// A fused root whose one reader is a sum, mean or max over it (a reduction's prologue: the BN fold's scale gradient,
// sum(dW * w) over each filter), and whose kernel stores nothing else, is evaluated by the reduction where it would
// read the root's element (codegen::reduce_kernels' prologue): its kernel, and its round trip through memory, go.
// Where the lowering finds the reduction needs its input copied first (axes it permutes), it stores the root then.
//
// A fused root whose leaves are all graph leaves (parameters, constants, state, inputs), and whose kernel is a pointwise
// one of its own (ResNet-50's per-channel batch-norm scale and shift, one a norm; an optimizer's step-size scalars), runs
// with the others like it in one dispatch (codegen::pointwise_batch_kernel) where the first of them would run: they
// read nothing any kernel computes, so running them earlier changes no value. A root whose leaves are graph leaves and
// such batches' roots runs in a batch of the next depth, after them (ResNet-50's 53 convolution weights scaled by their
// batch norms' scales in training: one dispatch, where they were 53). Two batches a depth: those that read only
// parameters, constants and state no assignment writes (which a program that does not train hoists), and the others.
//
// A permute or expand whose every reader is a pointwise node, in a kernel that is no batch of updates, is no copy: the
// fused trees read its input through its strides (Whisper's convolutions' [batch, channels, frames] as
// [batch, frames, channels], into the positions' add; in the backward, the gradient's way back, into the GELU's; a
// loss's seed, its scalar expanded to the output's shape). A dispatch and its level go where it was one. So too an
// expand that a concatenation alone reads, itself or through a reshape (the U-Net's nearest upsampling before each
// skip connection's concatenation): the concatenation's kernel reads the expand's input through its strides.
//
// A sum that only batched updates read (below; a bias's gradient, read by its optimizer's update) is not summed by a
// dispatch of its own where the reduction cuts its rows into pieces: the update reads the pieces and adds them
// (codegen::PointwiseSpec::in_pieces), where a one-workgroup dispatch added them for it (39 of Whisper's training step).
// So too a convolution's weight gradient without an epilogue, split in K.
//
// A parameter's named assignment (an optimizer's update: compiler/training.cpp names it after the
// optimizer) whose value is a fused root of its own kernel, one that reads its leaves element for element
// or as scalars and whose values (the parameter's, and the moments it stores) nothing outside it reads,
// runs with the others of its name in one dispatch, after every other kernel (codegen::
// pointwise_batch_kernel): what it reads is computed by then, and what it writes no later kernel reads, so
// moving it there changes no value. Such an update is a product's epilogue only where `takes_update(product)`
// (the lowering's Tuning::updates_in_products), asked only of the products an update would fit.
#include <cstdint>
#include <functional>
#include <vector>

#include "meganeura/graph.hpp"

namespace mn::sched {

// The norms (one kernel each, norm_kernel) that store a pointwise epilogue as the products do.
inline bool is_norm(Op op) { return op == Op::RmsNorm || op == Op::LayerNorm || op == Op::GroupNorm; }
// Their input gradients (norm_grad_kernel), which store one too: a pre-norm block's residual gradient, added to the
// norm's, in the norm's gradient kernel (a dispatch and a level per norm of a transformer's backward).
inline bool is_norm_grad(Op op) { return op == Op::RmsNormGrad || op == Op::LayerNormGrad || op == Op::GroupNormGrad; }
// Whether a concatenation of `pieces` is one kernel (codegen::concat_kernel: the pieces and the output within the
// storage buffers a fused kernel may bind), not a copy a piece: the planner reads an expand through its strides only
// there (see above).
inline bool concat_in_one_kernel(size_t pieces, uint32_t max_fused_inputs) { return pieces + 1 <= max_fused_inputs; }

// FusionPlan::leaf_batch's numbers: per depth (0: graph leaves alone; d: up to batches of depth d - 1), one batch of
// what a program that does not train hoists, and one of the others.
constexpr int kMaxLeafBatchDepth = 3;
constexpr uint8_t leaf_batch_of(int depth, bool hoistable) { return static_cast<uint8_t>(2 * depth + (hoistable ? 1 : 2)); }
constexpr int leaf_batch_depth(uint8_t batch) { return (batch - 1) / 2; }
constexpr bool leaf_batch_hoistable(uint8_t batch) { return batch % 2 == 1; }

struct FusionPlan {
    std::vector<bool> inlined;          // per node: evaluated inside its consumer's kernel
    // per node: the target node it is written into (a pointwise root's whole value; a SliceScatter's rows), or -1
    std::vector<int32_t> in_place_of;
    std::vector<bool> assign_elided;    // per Assign node: no copy needed
    std::vector<int32_t> stored_in;     // per node: the fused root whose kernel computes and stores it, or -1
    // per fused root: the roots its kernel computes and stores that its tree does not read (see above; their stored_in)
    std::vector<std::vector<int32_t>> co_roots;
    std::vector<int32_t> epilogue_of;   // per matmul / conv2d / norm node: the fused root it stores through, or -1
    // per fused root: the product that stores it through its epilogue (of a pair, the first), or -1; epilogue_of's
    // inverse, for the planner's later steps and the lowering
    std::vector<int32_t> epilogue_product;
    std::vector<bool> epilogue_keeps;   // per node with an epilogue: its own value is stored too (others read it)
    // per product with an epilogue: the second product of the same row its GEMV computes for the epilogue (whose
    // epilogue_of is the same root), or -1
    std::vector<int32_t> epilogue_pair;
    // per Attention, Rope or attention gradient node: the Permute {0, 2, 1, 3} that is its one reader (a model's
    // merge of the heads; in a backward, the gradient of its split; an attention's gradients aside), whose layout
    // the kernel stores directly, so the permute is no copy; or -1. Not an attention lowered after its logsumexp.
    std::vector<int32_t> heads_merged_into;
    // per Permute {0, 2, 1, 3} node (a model's split of the heads): the Rope that is its one reader and
    // reads the permute's input in place (rope_kernel's split_heads), so the permute is never lowered; or -1.
    std::vector<int32_t> heads_split_by;
    // per MatMul node, and per fused root that a matmul stores alone through its epilogue: the slices of its columns,
    // in column order, that the matmul stores (see above); else empty.
    std::vector<std::vector<int32_t>> column_slices;
    // per Slice node of column_slices, per MatMul node of two dims without them, and per fused root that such a
    // matmul alone stores through its epilogue (a bias, a scale): the Permute {0, 2, 1, 3} that reads it through
    // one reader each of a chain of Reshapes, the last to [batch, seq, heads, head_dim] (a model's split of the
    // heads after its q, k or v product); the product stores it in the permute's layout (codegen::ColumnPart), so
    // that neither the reshapes nor the permute is a copy or a view; the same per Reshape of the chain; else -1.
    // Not a permute that a Rope reads in place (heads_split_by).
    std::vector<int32_t> heads_split_stored;
    // per RmsNorm node: computed by each product that reads it (see above), so never lowered itself.
    std::vector<bool> norm_in_products;
    // per RmsNorm or LayerNorm node: the matmul whose split-K sum kernel stores it (see above), so never lowered
    // itself; or -1.
    // sum_norm is its inverse, per such matmul.
    std::vector<int32_t> norm_in_sum, sum_norm;
    // per RmsNormGrad or LayerNormGrad node: the matmul whose split-K sum kernel computes it (see above), so never
    // lowered itself (nor its epilogue's root); or -1. sum_norm_grad is its inverse, per such matmul.
    std::vector<int32_t> norm_grad_in_sum, sum_norm_grad;
    // per MatMul node: an attention backward node (AttentionGradQ, K or V; its siblings share the delta) whose delta
    // the matmul's split-K sum kernel stores (see above); or -1.
    std::vector<int32_t> sum_delta;
    // per Rope node: the SliceScatter written in place (in_place_of) whose rows it is and whose cache it stores
    // them into, so that the SliceScatter is no kernel; or -1.
    std::vector<int32_t> rope_into_cache;
    // per Slice node of column_slices (see above): the RoPE whose value its product stores, rotated, and the in-place
    // SliceScatter whose rows (the RoPE's or its own) the product stores into the cache; or -1, -1.
    std::vector<int32_t> rope_in_gemv, cache_in_gemv;
    // per Reshape, Rope and SliceScatter node that such a product computes for a slice: the product; else -1.
    std::vector<int32_t> in_gemv;
    // per fused pointwise root: the named Assign of a parameter whose value it is, when its kernel runs in
    // that name's batch; or -1.
    std::vector<int32_t> batched_update;
    // per fused pointwise root: the Sum, Mean or Max node that evaluates its tree as its prologue (see above), so it is
    // never stored; or -1.
    std::vector<int32_t> reduced_in;
    // per RmsNorm or LayerNorm node: the fused root that is its input and that its kernel computes and stores (see
    // above), or -1; prologue_of_norm is its inverse, per such root.
    std::vector<int32_t> norm_prologue, prologue_of_norm;
    // per RmsNormGrad or LayerNormGrad node: the root up * norm(x, unit weight) that its kernel stores too (see above),
    // or -1; up_xhat_by is its inverse, per such root.
    std::vector<int32_t> up_xhat_of, up_xhat_by;
    // per fused pointwise root of graph leaves and earlier batches' roots (see above): its batch (leaf_batch_of), 0: none.
    std::vector<uint8_t> leaf_batch;
    // per Permute or Expand node: its readers' fused trees, or its concatenation, read its input through its strides
    // (see above), so it is never stored; per Reshape of such an expand that a concatenation alone reads: no view of it.
    std::vector<bool> read_strided;
    // per Sum and Conv2dGradWeight node: its pieces, where it has several, are summed by the batched updates that alone
    // read it (see above).
    std::vector<bool> summed_as_read;
    // per AttentionGradQ or AttentionGradK node: the Rope that alone reads it, whose value its kernel stores (see
    // above); or -1.
    std::vector<int32_t> rope_of_gradient;
};

// How a matmul's K is split, as the lowering will choose it: whether it is, and the width of its tiles where its last
// piece of a tile sums the pieces (0: a sum dispatch of its own sums them, or K is whole).
struct ProductSplit {
    bool splits_k = false;
    uint32_t summed_tile_columns = 0;
    // Whether the split's sum can store heads of head_dim columns rotated, in pairs of columns: a sum dispatch of its
    // own always; the product's last pieces where its tiles hold whole heads.
    bool sum_rotates_heads_of(int64_t head_dim) const {
        return splits_k && (summed_tile_columns == 0 || summed_tile_columns % head_dim == 0);
    }
};
FusionPlan plan_fusion(const Graph& g, const std::vector<bool>& live, const std::vector<int32_t>& roots,
                       uint32_t max_inputs, const std::function<bool(int32_t product)>& takes_update,
                       const std::function<ProductSplit(int32_t product)>& split_of);

}  // namespace mn::sched
