/* The MLP of mlp_forward.cpp through the C API: built, compiled and run on the best Vulkan device,
 * checked against the same MLP computed here in double precision. Every call returns an mn_status;
 * on failure mn_last_error() says what went wrong. Build with pkg-config:
 *   cc mlp_forward.c $(pkg-config --cflags --libs meganeura) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "meganeura/meganeura.h"

enum { kBatch = 8, kIn = 784, kHidden = 256, kOut = 10 };

#define CHECK(call)                                                             \
    do {                                                                        \
        if ((call) != MN_OK) {                                                  \
            fprintf(stderr, "%s failed: %s\n", #call, mn_last_error());          \
            return 1;                                                           \
        }                                                                       \
    } while (0)

/* y [rows, out] = x [rows, in] @ w [out, in]^T + b [out], as nn.Linear; relu when asked. */
static void linear(const double* x, const float* w, const float* b, double* y, int rows, int in, int out, int relu) {
    for (int r = 0; r < rows; ++r)
        for (int o = 0; o < out; ++o) {
            double sum = b[o];
            for (int i = 0; i < in; ++i) sum += x[r * in + i] * w[o * in + i];
            y[r * out + o] = relu && sum < 0 ? 0 : sum;
        }
}

int main(void) {
    static float images[kBatch * kIn], w1[kHidden * kIn], b1[kHidden], w2[kOut * kHidden], b2[kOut], logits[kBatch * kOut];
    static double x[kBatch * kIn], hidden[kBatch * kHidden], want[kBatch * kOut];
    const int64_t x_shape[] = {kBatch, kIn}, w1_shape[] = {kHidden, kIn}, b1_shape[] = {kHidden};
    const int64_t w2_shape[] = {kOut, kHidden}, b2_shape[] = {kOut};
    mn_graph* g = NULL;
    mn_tensor in, fc1_w, fc1_b, fc2_w, fc2_b, h, relu, y;
    CHECK(mn_graph_new(&g));
    CHECK(mn_graph_input(g, "x", 2, x_shape, MN_F32, &in));
    CHECK(mn_graph_parameter(g, "fc1.weight", 2, w1_shape, MN_INIT_UNIFORM, -0.036, 0.036, &fc1_w));
    CHECK(mn_graph_parameter(g, "fc1.bias", 1, b1_shape, MN_INIT_UNIFORM, -0.036, 0.036, &fc1_b));
    CHECK(mn_graph_parameter(g, "fc2.weight", 2, w2_shape, MN_INIT_UNIFORM, -0.0625, 0.0625, &fc2_w));
    CHECK(mn_graph_parameter(g, "fc2.bias", 1, b2_shape, MN_INIT_UNIFORM, -0.0625, 0.0625, &fc2_b));
    CHECK(mn_graph_linear(g, in, fc1_w, fc1_b, &h));
    CHECK(mn_graph_unary(g, "relu", h, &relu));
    CHECK(mn_graph_linear(g, relu, fc2_w, fc2_b, &y));
    CHECK(mn_graph_output(g, "logits", y));

    mn_device* device = NULL;
    mn_session* session = NULL;
    CHECK(mn_device_open(NULL, &device));
    CHECK(mn_compile(g, device, NULL, &session));
    mn_graph_free(g); /* the session no longer needs it */
    printf("meganeura %s on %s\n", mn_version(), mn_device_name(device));

    srand(1);
    for (int i = 0; i < kBatch * kIn; ++i) x[i] = images[i] = (float)rand() / (float)RAND_MAX;
    CHECK(mn_session_set_f32(session, "x", images, kBatch * kIn));
    CHECK(mn_session_run(session));
    CHECK(mn_session_get_f32(session, "logits", logits, kBatch * kOut));

    /* The parameters were initialized on the device; read them back to compute the same MLP here. */
    CHECK(mn_session_get_f32(session, "fc1.weight", w1, kHidden * kIn));
    CHECK(mn_session_get_f32(session, "fc1.bias", b1, kHidden));
    CHECK(mn_session_get_f32(session, "fc2.weight", w2, kOut * kHidden));
    CHECK(mn_session_get_f32(session, "fc2.bias", b2, kOut));
    linear(x, w1, b1, hidden, kBatch, kIn, kHidden, 1);
    linear(hidden, w2, b2, want, kBatch, kHidden, kOut, 0);
    double num = 0, den = 0;
    for (int i = 0; i < kBatch * kOut; ++i) num += pow(logits[i] - want[i], 2), den += want[i] * want[i];
    const double rel = sqrt(num / den);
    printf("logits relative L2 error against double precision on the CPU: %.2e %s\n", rel, rel < 1e-5 ? "(ok)" : "(FAIL)");
    mn_session_free(session);
    mn_device_free(device);
    return rel < 1e-5 ? 0 : 1;
}
