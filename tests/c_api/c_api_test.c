/* The C API from C (issue 18): errors come back as status codes with a message, never as a crash;
 * one SGD step of a linear regression matches the update computed here in double precision; a
 * checkpoint saved and loaded restores the parameters and the step count. Exit status 0 when every
 * check holds; each failed check prints one line. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "meganeura/meganeura.h"

static int failures = 0;

#define EXPECT(condition)                                                         \
    do {                                                                          \
        if (!(condition)) {                                                       \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #condition); \
            ++failures;                                                           \
        }                                                                         \
    } while (0)
/* A call that must succeed; on failure the test cannot go on. */
#define REQUIRE_OK(call)                                                               \
    do {                                                                               \
        if ((call) != MN_OK) {                                                         \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, mn_last_error()); \
            return 1;                                                                  \
        }                                                                              \
    } while (0)
/* A call that must fail with MN_ERROR and a message containing `part`. */
#define EXPECT_ERROR(call, part)                                                                         \
    do {                                                                                                 \
        const mn_status status_ = (call);                                                                \
        if (status_ != MN_ERROR || !strstr(mn_last_error(), part)) {                                     \
            fprintf(stderr, "%s:%d: %s gave status %d, \"%s\"; expected MN_ERROR with \"%s\"\n", __FILE__, \
                    __LINE__, #call, (int)status_, mn_last_error(), part);                               \
            ++failures;                                                                                  \
        }                                                                                                \
    } while (0)

enum { N = 5, IN = 7, OUT = 3 };

static double relative_l2(const float* got, const double* want, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; ++i) num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
    return sqrt(num / den);
}

static int errors_are_status_codes(void) {
    mn_graph* g = NULL;
    mn_tensor x, w, y;
    const int64_t x_shape[] = {3, 4}, w_shape[] = {4, 3};
    REQUIRE_OK(mn_graph_new(&g));
    REQUIRE_OK(mn_graph_input(g, "x", 2, x_shape, MN_F32, &x));
    REQUIRE_OK(mn_graph_parameter(g, "w", 2, w_shape, MN_INIT_ZEROS, 0, 0, &w));
    EXPECT_ERROR(mn_graph_linear(g, x, w, MN_NO_TENSOR, &y), "[linear] x is (3,4), weight is (4,3)");
    EXPECT(y == MN_NO_TENSOR);
    EXPECT_ERROR(mn_graph_unary(g, "rleu", x, &y), "unknown unary op 'rleu'; known: abs exp gelu");
    EXPECT_ERROR(mn_graph_unary(g, "relu", 99, &y), "x is 99, not a tensor of this graph");
    EXPECT_ERROR(mn_graph_input(g, "x", 2, x_shape, MN_F32, &y), "x");  /* a second input named x */
    EXPECT_ERROR(mn_graph_input(g, NULL, 2, x_shape, MN_F32, &y), "name is NULL");
    EXPECT_ERROR(mn_graph_input(g, "z", 2, x_shape, (mn_dtype)7, &y), "unknown dtype 7");
    EXPECT(mn_graph_unary(g, "relu", x, &y) == MN_OK && strcmp(mn_last_error(), "") == 0);
    int64_t dims[4];
    int ndim = 0;
    EXPECT(mn_graph_shape(g, y, dims, 4, &ndim) == MN_OK && ndim == 2 && dims[0] == 3 && dims[1] == 4);
    EXPECT_ERROR(mn_graph_shape(g, y, dims, 1, &ndim), "capacity is 1");

    mn_device* device = NULL;
    mn_session* session = NULL;
    EXPECT_ERROR(mn_device_open("no such device", &device), "no such device");
    EXPECT(device == NULL);
    REQUIRE_OK(mn_device_open(NULL, &device));
    REQUIRE_OK(mn_graph_output(g, "y", y));
    REQUIRE_OK(mn_compile(g, device, NULL, &session));
    float values[12] = {0};
    EXPECT_ERROR(mn_session_set_f32(session, "nope", values, 12), "nope");
    EXPECT_ERROR(mn_session_set_f32(session, "x", values, 11), "'x' has 12 elements (3,4), the buffer 11");
    EXPECT_ERROR(mn_session_get_f32(session, "y", values, 13), "'y' has 12 elements");
    EXPECT_ERROR(mn_session_step(session, NULL), "");  /* not a training session */
    EXPECT_ERROR(mn_session_load(session, "/nonexistent/c.safetensors"), "/nonexistent/c.safetensors");
    mn_session_free(session);
    mn_device_free(device);
    mn_graph_free(g);
    return 0;
}

/* pred = x w^T + b, loss = mean((pred - t)^2); one SGD step with learning rate lr, in double. */
static double sgd_step(const float* x, const float* t, const float* w, const float* b, double lr, double* w_next,
                       double* b_next) {
    double pred[N * OUT], loss = 0;
    for (int n = 0; n < N; ++n)
        for (int o = 0; o < OUT; ++o) {
            double sum = b[o];
            for (int i = 0; i < IN; ++i) sum += (double)x[n * IN + i] * w[o * IN + i];
            pred[n * OUT + o] = sum;
            loss += (sum - t[n * OUT + o]) * (sum - t[n * OUT + o]) / (N * OUT);
        }
    for (int o = 0; o < OUT; ++o) {
        double gb = 0;
        for (int i = 0; i < IN; ++i) {
            double gw = 0;
            for (int n = 0; n < N; ++n) gw += 2 * (pred[n * OUT + o] - t[n * OUT + o]) / (N * OUT) * x[n * IN + i];
            w_next[o * IN + i] = w[o * IN + i] - lr * gw;
        }
        for (int n = 0; n < N; ++n) gb += 2 * (pred[n * OUT + o] - t[n * OUT + o]) / (N * OUT);
        b_next[o] = b[o] - lr * gb;
    }
    return loss;
}

static int training_step_and_checkpoint(const char* checkpoint) {
    mn_graph* g = NULL;
    mn_tensor x, t, w, b, pred, loss;
    const int64_t x_shape[] = {N, IN}, t_shape[] = {N, OUT}, w_shape[] = {OUT, IN}, b_shape[] = {OUT};
    REQUIRE_OK(mn_graph_new(&g));
    REQUIRE_OK(mn_graph_input(g, "x", 2, x_shape, MN_F32, &x));
    REQUIRE_OK(mn_graph_input(g, "target", 2, t_shape, MN_F32, &t));
    REQUIRE_OK(mn_graph_parameter(g, "weight", 2, w_shape, MN_INIT_UNIFORM, -0.5, 0.5, &w));
    REQUIRE_OK(mn_graph_parameter(g, "bias", 1, b_shape, MN_INIT_UNIFORM, -0.5, 0.5, &b));
    REQUIRE_OK(mn_graph_linear(g, x, w, b, &pred));
    REQUIRE_OK(mn_graph_mse_loss(g, pred, t, &loss));

    mn_compile_options options = mn_compile_options_default();
    options.loss = loss;
    options.optimizer = MN_SGD;
    options.lr = 0.1;
    options.weight_decay = 0;
    options.seed = 3;
    mn_device* device = NULL;
    mn_session* s = NULL;
    REQUIRE_OK(mn_device_open(NULL, &device));
    REQUIRE_OK(mn_compile(g, device, &options, &s));
    mn_graph_free(g); /* a compiled session does not need its graph */

    float xs[N * IN], ts[N * OUT], w0[OUT * IN], b0[OUT], w1[OUT * IN], b1[OUT];
    for (int i = 0; i < N * IN; ++i) xs[i] = (float)((i * 37 % 11) - 5) / 5.0f;
    for (int i = 0; i < N * OUT; ++i) ts[i] = (float)((i * 13 % 7) - 3) / 3.0f;
    /* Several tensors in one transfer each way; a wrong count in one of them writes none. */
    const char* params[] = {"weight", "bias"};
    float* params_out[] = {w0, b0};
    const size_t params_counts[] = {OUT * IN, OUT};
    REQUIRE_OK(mn_session_get_f32_many(s, 2, params, params_out, params_counts));
    double w_want[OUT * IN], b_want[OUT];
    const double loss_want = sgd_step(xs, ts, w0, b0, 0.1, w_want, b_want);

    const char* data_names[] = {"x", "target", "weight"};
    const float no_weight[OUT * IN] = {0};
    const float* data[] = {xs, ts, no_weight};
    const size_t bad_counts[] = {N * IN, N * OUT, OUT * IN - 1};
    EXPECT_ERROR(mn_session_set_f32_many(s, 3, data_names, data, bad_counts), "'weight' has");
    float w_kept[OUT * IN];
    REQUIRE_OK(mn_session_get_f32(s, "weight", w_kept, OUT * IN));
    EXPECT(memcmp(w_kept, w0, sizeof w0) == 0);
    const size_t data_counts[] = {N * IN, N * OUT};
    REQUIRE_OK(mn_session_set_f32_many(s, 2, data_names, data, data_counts));
    float loss_got = 0;
    int64_t steps = 0;
    REQUIRE_OK(mn_session_step(s, &loss_got));
    REQUIRE_OK(mn_session_step_count(s, &steps));
    EXPECT(steps == 1);
    EXPECT(fabs(loss_got - loss_want) <= 1e-5 * loss_want);
    REQUIRE_OK(mn_session_get_f32(s, "weight", w1, OUT * IN));
    REQUIRE_OK(mn_session_get_f32(s, "bias", b1, OUT));
    EXPECT(relative_l2(w1, w_want, OUT * IN) < 1e-5);
    EXPECT(relative_l2(b1, b_want, OUT) < 1e-5);

    /* Saved, overwritten, loaded: the parameters and the step count come back exactly. */
    REQUIRE_OK(mn_session_save(s, checkpoint));
    const float zeros[OUT * IN] = {0};
    REQUIRE_OK(mn_session_set_f32(s, "weight", zeros, OUT * IN));
    REQUIRE_OK(mn_session_step(s, NULL));
    REQUIRE_OK(mn_session_load(s, checkpoint));
    float w_loaded[OUT * IN];
    REQUIRE_OK(mn_session_get_f32(s, "weight", w_loaded, OUT * IN));
    EXPECT(memcmp(w_loaded, w1, sizeof w1) == 0);
    REQUIRE_OK(mn_session_step_count(s, &steps));
    EXPECT(steps == 1);
    mn_session_free(s);
    mn_device_free(device);
    return 0;
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: c_api_test CHECKPOINT_PATH\n");
        return 2;
    }
    EXPECT(strcmp(mn_version(), MEGANEURA_VERSION) == 0);
    if (errors_are_status_codes() || training_step_and_checkpoint(argv[1])) return 1;
    if (failures) fprintf(stderr, "%d checks failed\n", failures);
    else printf("C API: every check passed\n");
    return failures ? 1 : 0;
}
