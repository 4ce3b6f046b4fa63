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

// conv2d (NCHW) and its derivatives as implicit GEMMs over the matmul tiles; see conv.cpp.
// Bindings: Forward (x, weight, y), GradInput (gy, weight, gx), GradWeight (x, gy, gw).
enum class ConvMode { Forward, GradInput, GradWeight };
struct ConvSpec {
    ConvMode mode;
    DType dtype;
    Shape x, weight, y;          // [N, C, H, W], [O, C / groups, KH, KW], [N, O, OH, OW]
    std::vector<int64_t> attrs;  // the Conv2d node's ints (ops.def)
};
// The weight gradient splits its long K over `splits` workgroups per tile when it would launch
// fewer than `target_groups` otherwise; conv2d_weight_splits picks the count (1: no split). With
// splits > 1 the kernel writes [splits, weight] f32 partials and conv2d_split_sum_kernel adds them.
int64_t conv2d_weight_splits(const ConvSpec& spec, const MatmulTiles& tiles, int64_t target_groups);
KernelSource conv2d_kernel(const ConvSpec& spec, const MatmulTiles& tiles, uint32_t max_groups, int64_t splits = 1);
KernelSource conv2d_split_sum_kernel(DType dtype, int64_t count, int64_t splits, const Launch& launch);

// max_pool2d over x [N, C, H, W] -> [N, C, out_h, out_w]; the backward reads (x, gy), writes gx.
struct PoolSpec {
    DType dtype;
    Shape x;
    int64_t out_h, out_w, kernel, stride, padding;
};
KernelSource max_pool2d_kernel(const PoolSpec& spec, bool backward, const Launch& launch);

}  // namespace mn::codegen
