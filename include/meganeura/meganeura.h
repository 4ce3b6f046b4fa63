/* meganeura's C API: build a graph, compile it for a Vulkan device, set inputs, run or train, read
 * outputs, save and load checkpoints, from C or any language with a C FFI. Link libmeganeura
 * (CMake: find_package(meganeura CONFIG REQUIRED) and meganeura::meganeura; or pkg-config meganeura).
 *
 *   mn_graph* g; mn_graph_new(&g);
 *   int64_t xs[] = {64, 784}; mn_tensor x; mn_graph_input(g, "x", 2, xs, MN_F32, &x);
 *   ...; mn_graph_output(g, "logits", y);
 *   mn_device* d; mn_device_open(NULL, &d);
 *   mn_session* s; mn_compile(g, d, NULL, &s);
 *   mn_session_set_f32(s, "x", images, 64 * 784); mn_session_run(s);
 *   mn_session_get_f32(s, "logits", logits, 64 * 10);
 *
 * Every function returns an mn_status; on anything but MN_OK, mn_last_error() says what was wrong
 * (the same message the C++ API's mn::Error carries: "[linear] x is (3,4), weight is (4,3): ...").
 * No exception crosses this boundary. Objects are freed with their mn_*_free (NULL is accepted); a
 * session keeps its device alive, and neither needs the graph once compiled. The names and
 * semantics are the C++ API's (meganeura/graph.hpp), which follow PyTorch's.
 */
#ifndef MEGANEURA_H
#define MEGANEURA_H

#include <stddef.h>
#include <stdint.h>

#include "meganeura/version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mn_status {
    MN_OK = 0,
    MN_ERROR = 1,          /* bad input, a missing file, a Vulkan failure: mn_last_error() says which */
    MN_OUT_OF_MEMORY = 2,  /* host memory */
    MN_INTERNAL = 3        /* a bug in meganeura: please report mn_last_error() */
} mn_status;

typedef enum mn_dtype { MN_F32 = 0, MN_F16 = 1, MN_I32 = 2 } mn_dtype;
typedef enum mn_init { MN_INIT_ZEROS = 0, MN_INIT_ONES = 1, MN_INIT_UNIFORM = 2, MN_INIT_NORMAL = 3 } mn_init;
typedef enum mn_optimizer { MN_ADAMW = 0, MN_ADAM = 1, MN_SGD = 2 } mn_optimizer;
typedef enum mn_precision { MN_STRICT = 0, MN_FAST = 1 } mn_precision;

typedef struct mn_graph mn_graph;
typedef struct mn_device mn_device;
typedef struct mn_session mn_session;
/* A node of one graph; MN_NO_TENSOR where an operand is optional (a linear layer without bias). */
typedef int32_t mn_tensor;
#define MN_NO_TENSOR ((mn_tensor)-1)

/* The library's version, "MAJOR.MINOR.PATCH" (compare with the headers' MEGANEURA_VERSION). */
const char* mn_version(void);
/* The message of this thread's last failed call; "" when none failed. Valid until the next call. */
const char* mn_last_error(void);

/* ---- devices ---- */
/* The best device, or the one `selector` names (an index, or part of the name as `meganeura devices`
 * lists it); NULL or "" reads the MEGANEURA_DEVICE environment variable, then takes the best. */
mn_status mn_device_open(const char* selector, mn_device** device);
/* The device's name; valid while the device lives. */
const char* mn_device_name(const mn_device* device);
void mn_device_free(mn_device* device);

/* ---- graphs ---- */
mn_status mn_graph_new(mn_graph** graph);
void mn_graph_free(mn_graph* graph);
/* The shape of a tensor: its rank in *ndim and up to `capacity` dims in `dims` (NULL to ask the rank). */
mn_status mn_graph_shape(const mn_graph* graph, mn_tensor t, int64_t* dims, int capacity, int* ndim);
mn_status mn_graph_dtype(const mn_graph* graph, mn_tensor t, mn_dtype* dtype);

/* leaves. A parameter's init: MN_INIT_UNIFORM draws from [a, b), MN_INIT_NORMAL has mean a, std b. */
mn_status mn_graph_input(mn_graph* g, const char* name, int ndim, const int64_t* shape, mn_dtype dtype, mn_tensor* out);
mn_status mn_graph_parameter(mn_graph* g, const char* name, int ndim, const int64_t* shape, mn_init init, double a,
                             double b, mn_tensor* out);
mn_status mn_graph_scalar(mn_graph* g, double value, mn_tensor* out);
/* Names a value the session can read back with mn_session_get_*. */
mn_status mn_graph_output(mn_graph* g, const char* name, mn_tensor t);

/* pointwise, by PyTorch's name. unary: neg exp log sqrt rsqrt abs relu sigmoid tanh silu gelu
 * gelu_tanh sign; binary (NumPy broadcasting): add sub mul div maximum minimum pow greater equal. */
mn_status mn_graph_unary(mn_graph* g, const char* op, mn_tensor x, mn_tensor* out);
mn_status mn_graph_binary(mn_graph* g, const char* op, mn_tensor a, mn_tensor b, mn_tensor* out);

/* products. linear: x [..., in] @ weight [out, in]^T + bias [out] (bias may be MN_NO_TENSOR). */
mn_status mn_graph_matmul(mn_graph* g, mn_tensor a, mn_tensor b, int trans_a, int trans_b, mn_tensor* out);
mn_status mn_graph_linear(mn_graph* g, mn_tensor x, mn_tensor weight, mn_tensor bias, mn_tensor* out);
mn_status mn_graph_conv2d(mn_graph* g, mn_tensor x, mn_tensor weight, mn_tensor bias, int64_t stride, int64_t padding,
                          int64_t dilation, int64_t groups, mn_tensor* out);
/* q [B, H, Tq, D], k and v [B, Hkv, Tk, D]; scale 0: 1/sqrt(D). */
mn_status mn_graph_attention(mn_graph* g, mn_tensor q, mn_tensor k, mn_tensor v, int causal, double scale,
                             mn_tensor* out);

/* reductions and norms. op: sum mean max; naxes 0 reduces every axis; negative axes count from the end. */
mn_status mn_graph_reduce(mn_graph* g, const char* op, mn_tensor x, int naxes, const int64_t* axes, int keepdim,
                          mn_tensor* out);
mn_status mn_graph_softmax(mn_graph* g, mn_tensor x, int64_t axis, mn_tensor* out);
mn_status mn_graph_log_softmax(mn_graph* g, mn_tensor x, int64_t axis, mn_tensor* out);
mn_status mn_graph_layer_norm(mn_graph* g, mn_tensor x, mn_tensor weight, mn_tensor bias, double eps, mn_tensor* out);
mn_status mn_graph_rms_norm(mn_graph* g, mn_tensor x, mn_tensor weight, double eps, mn_tensor* out);
mn_status mn_graph_max_pool2d(mn_graph* g, mn_tensor x, int64_t kernel, int64_t stride, int64_t padding, mn_tensor* out);
mn_status mn_graph_avg_pool2d(mn_graph* g, mn_tensor x, int64_t kernel, int64_t stride, int64_t padding, mn_tensor* out);

/* data movement. reshape: one dim may be -1. */
mn_status mn_graph_reshape(mn_graph* g, mn_tensor x, int ndim, const int64_t* shape, mn_tensor* out);
mn_status mn_graph_permute(mn_graph* g, mn_tensor x, int ndim, const int64_t* perm, mn_tensor* out);
mn_status mn_graph_transpose(mn_graph* g, mn_tensor x, int64_t dim0, int64_t dim1, mn_tensor* out);
mn_status mn_graph_flatten(mn_graph* g, mn_tensor x, int64_t start_dim, mn_tensor* out);
mn_status mn_graph_slice(mn_graph* g, mn_tensor x, int64_t axis, int64_t start, int64_t end, int64_t step,
                         mn_tensor* out);
mn_status mn_graph_concat(mn_graph* g, int count, const mn_tensor* xs, int64_t axis, mn_tensor* out);
mn_status mn_graph_embedding(mn_graph* g, mn_tensor ids, mn_tensor weight, mn_tensor* out);

/* losses, mean over the batch: logits [N, C] with i32 labels [N]; mse over every element. */
mn_status mn_graph_cross_entropy(mn_graph* g, mn_tensor logits, mn_tensor labels, mn_tensor* out);
mn_status mn_graph_mse_loss(mn_graph* g, mn_tensor prediction, mn_tensor target, mn_tensor* out);

/* ---- compiling ---- */
typedef struct mn_compile_options {
    /* Training: with a loss, the backward graph and the optimizer's updates are compiled in, and
     * mn_session_step runs forward + backward + update in one submit. MN_NO_TENSOR: inference. */
    mn_tensor loss;
    mn_optimizer optimizer;
    double lr, beta1, beta2, eps, weight_decay, momentum; /* momentum: SGD only; betas, eps: Adam(W) */
    mn_precision precision;
    uint64_t seed; /* parameter initialization */
} mn_compile_options;

/* Inference in strict precision; for training, AdamW's defaults as torch.optim.AdamW's. */
mn_compile_options mn_compile_options_default(void);
/* options NULL: mn_compile_options_default(). */
mn_status mn_compile(const mn_graph* graph, const mn_device* device, const mn_compile_options* options,
                     mn_session** session);
void mn_session_free(mn_session* session);

/* ---- sessions ---- */
/* Inputs and parameters by name; `count` must be the tensor's element count. */
mn_status mn_session_set_f32(mn_session* s, const char* name, const float* data, size_t count);
mn_status mn_session_set_i32(mn_session* s, const char* name, const int32_t* data, size_t count);
/* Several f32 tensors at once, in one transfer (mn_session_set_f32 one at a time waits for the device each): tensor
 * names[i] from data[i], counts[i] elements; every one is checked before any is written. */
mn_status mn_session_set_f32_many(mn_session* s, size_t n, const char* const* names, const float* const* data,
                                  const size_t* counts);
/* Runs the recorded program once (one submit). */
mn_status mn_session_run(mn_session* s);
/* Training sessions: one optimizer step; the loss in *loss (may be NULL). */
mn_status mn_session_step(mn_session* s, float* loss);
mn_status mn_session_step_count(const mn_session* s, int64_t* steps);
/* Outputs, inputs and parameters by name into `out`, which holds `count` elements: the tensor's
 * element count (mn_session_shape gives it). */
mn_status mn_session_get_f32(const mn_session* s, const char* name, float* out, size_t count);
mn_status mn_session_get_i32(const mn_session* s, const char* name, int32_t* out, size_t count);
/* Several f32 tensors at once, in one transfer from the device: tensor names[i] into out[i], counts[i] elements. */
mn_status mn_session_get_f32_many(const mn_session* s, size_t n, const char* const* names, float* const* out,
                                  const size_t* counts);
mn_status mn_session_shape(const mn_session* s, const char* name, int64_t* dims, int capacity, int* ndim);
/* Checkpoints: every parameter and optimizer state in safetensors, written atomically. */
mn_status mn_session_save(const mn_session* s, const char* path);
mn_status mn_session_load(mn_session* s, const char* path);

#ifdef __cplusplus
}
#endif

#endif
