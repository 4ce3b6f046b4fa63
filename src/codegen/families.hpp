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
// What the matmul family may specialize on, read from DeviceCaps by schedule/ (tune_for).
struct MatmulTuning {
    uint32_t max_groups = 65535;         // per grid dimension
    uint32_t max_invocations = 256;      // per workgroup
    uint32_t max_shared_memory = 32768;  // bytes per workgroup
    uint32_t compute_units = 0;          // multiprocessors; 0: unknown
    bool cpu = false;                    // a CPU driver: one big register tile, few threads
    // > 0: precision Fast on a device with NV cooperative matrices f16*f16+f32 at 16x16x16; the
    // subgroup size the coop kernel is built for (required at pipeline creation).
    uint32_t coop_subgroup = 0;
    uint32_t forced_bm = 0;  // > 0: the tile of this height (MEGANEURA_MATMUL_TILE; tests, tuning)
};

// Chooses the kernel for one matmul: a GEMV (K-split dot products) when M or N is 1, the
// cooperative-matrix kernel (f16 tiles, f32 accumulation) when tuning.coop_subgroup is set and
// the dtype is f32, otherwise the register-tiled f32 kernel with a tile chosen for the grid size.
KernelSource matmul_kernel(const MatmulSpec& spec, const MatmulTuning& tuning);

// conv2d (NCHW) and its derivatives as implicit GEMMs over the matmul tiles; see conv.cpp.
// Bindings: Forward (x, weight, y), GradInput (gy, weight, gx), GradWeight (x, gy, gw).
enum class ConvMode { Forward, GradInput, GradWeight };
struct ConvSpec {
    ConvMode mode;
    DType dtype;
    Shape x, weight, y;          // [N, C, H, W], [O, C / groups, KH, KW], [N, O, OH, OW]
    std::vector<int64_t> attrs;  // the Conv2d node's ints (ops.def)
};
// The weight gradient splits its long K over `splits` workgroups per tile when its tiles alone
// would not fill the device; conv2d_weight_splits picks the count (1: no split). With splits > 1
// the kernel writes [splits, weight] f32 partials and conv2d_split_sum_kernel adds them up.
int64_t conv2d_weight_splits(const ConvSpec& spec, const MatmulTuning& tuning);
KernelSource conv2d_kernel(const ConvSpec& spec, const MatmulTuning& tuning, int64_t splits = 1);
KernelSource conv2d_split_sum_kernel(DType dtype, int64_t count, int64_t splits, const Launch& launch);

// max_pool2d over x [N, C, H, W] -> [N, C, out_h, out_w]; the backward reads (x, gy), writes gx.
struct PoolSpec {
    DType dtype;
    Shape x;
    int64_t out_h, out_w, kernel, stride, padding;
};
KernelSource max_pool2d_kernel(const PoolSpec& spec, bool backward, const Launch& launch);

}  // namespace mn::codegen
