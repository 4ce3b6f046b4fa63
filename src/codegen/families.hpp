#pragma once
// The kernel families. Each function returns one dispatchable kernel; the GLSL text depends only
// on the family's variant (op, dtypes, tile sizes), never on shapes, which travel as
// specialization constants.
#include "codegen/kernel.hpp"

namespace mn::codegen {

struct Launch {
    uint32_t local_size = 256;      // threads per workgroup for 1-D families
    uint32_t max_groups = 65535;    // per grid dimension
};

// out[i] = op(in0[..], in1[..]) over out_shape; in_strides[k] has out rank entries, 0 where
// input k is broadcast. Unary ops take one input.
struct PointwiseSpec {
    Op op;
    std::vector<DType> in_dtypes;
    DType out_dtype;
    Shape out_shape;
    std::vector<std::vector<int64_t>> in_strides;
};
KernelSource pointwise_kernel(const PointwiseSpec& spec, const Launch& launch);

// out[out_offset + sum c_d*out_strides[d]] = in[in_offset + sum c_d*in_strides[d]] for every
// coordinate c of `dims`: permute, slice, expand and concat pieces are all this one kernel.
struct CopySpec {
    DType dtype;
    Shape dims;
    std::vector<int64_t> in_strides, out_strides;
    int64_t in_offset = 0, out_offset = 0;
};
KernelSource strided_copy_kernel(const CopySpec& spec, const Launch& launch);

// Reductions over the middle axis of a [outer, r, inner] view; one workgroup per output element.
enum class ReduceMode { Sum, Mean, Max, Softmax, LogSoftmax };
KernelSource reduce_kernel(ReduceMode mode, DType in_dtype, DType out_dtype, int64_t outer, int64_t r, int64_t inner,
                           const Launch& launch);

// Per-row loss of cross-entropy: loss[n] = logsumexp(logits[n, :]) - logits[n, labels[n]];
// a label outside [0, C) yields NaN.
KernelSource cross_entropy_rows_kernel(DType dtype, int64_t rows, int64_t classes, const Launch& launch);

// d cross_entropy / d logits: grad[n, c] = upstream * (softmax(logits[n])[c] - (c == labels[n])) / rows.
KernelSource cross_entropy_grad_kernel(DType dtype, int64_t rows, int64_t classes, const Launch& launch);

// C[b] = op(A[b]) @ op(B[b]) with broadcast batch dims (up to 4) and transposes read in place.
struct MatmulSpec {
    DType dtype;
    int64_t m, n, k;
    bool trans_a = false, trans_b = false;
    Shape batch;                          // output batch dims
    std::vector<int64_t> a_batch_strides;  // per batch dim, 0 where broadcast
    std::vector<int64_t> b_batch_strides;
};
struct MatmulTiles {
    uint32_t bm = 64, bn = 64, bk = 16;  // workgroup tile
    uint32_t tm = 4, tn = 4;             // per-thread tile
};
KernelSource matmul_kernel(const MatmulSpec& spec, const MatmulTiles& tiles, uint32_t max_groups);

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
};
struct AttentionTiles {
    uint32_t rows = 16;            // rows a workgroup owns: query rows, key rows in the dK/dV kernel
    uint32_t threads_per_row = 4;  // each owns head_dim / threads_per_row output columns
    uint32_t tile = 32;            // rows of the other operand staged in shared memory per step
    uint32_t shared_bytes = 32768;  // the device's limit; tiles shrink until they fit
};
// Bindings: q, k, v, [query_start], out, lse (f32 [B, Hq, Tq]).
KernelSource attention_forward_kernel(const AttentionSpec& spec, const AttentionTiles& tiles, uint32_t max_groups);
// delta[r] = d_out[r, :] . out[r, :] for each of `rows` rows (f32), the backward's row correction.
// Bindings: out, d_out, delta.
KernelSource attention_delta_kernel(DType dtype, int64_t rows, int64_t head_dim, const Launch& launch);
// Bindings: q, k, v, d_out, lse, delta, [query_start], d_q.
KernelSource attention_grad_q_kernel(const AttentionSpec& spec, const AttentionTiles& tiles, uint32_t max_groups);
// One workgroup per block of keys of one kv head, looping over every query row of its group, so
// dK and dV need no atomics. Bindings: q, k, v, d_out, lse, delta, [query_start], d_k, d_v.
KernelSource attention_grad_kv_kernel(const AttentionSpec& spec, const AttentionTiles& tiles, uint32_t max_groups);

}  // namespace mn::codegen
