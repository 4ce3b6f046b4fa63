// Precision fast reads a product's operands that depend on parameters alone as f16 copies, cast once by a
// step that a program that does not train hoists (Tuning::f16_weights). It is on where the cooperative
// kernels run; MEGANEURA_F16_WEIGHTS=1 turns it on here, on lavapipe, so the GEMV, the tiled matmul, the
// implicit-GEMM convolution and the 1x1 convolution's matmul are checked reading f16 weights: against the
// float64 reference of the same graph with those weights rounded to f16 first, to 1e-5, so each weight is read
// exactly as it was cast and nothing else (the activations) was rounded. On a cooperative device the kernels
// round the activations too, so there the limit is the fast kernels' 2e-3.
#include <gtest/gtest.h>

#include "gpu_check.hpp"
#include "temp_dir.hpp"

namespace mn::test {
namespace {

// Products over weights: a linear layer (tiled), the same weight in a GEMV (cast once for both), a 3x3
// convolution over weights folded from a scale (derived from parameters, as ResNet-50's batch norms), a 1x1
// convolution, a strided one over 8 channels, and a product of two activations, which stays f32. With `rounded`, every weight operand is
// cast to f16 and back in the graph itself: the reference's view of what the session computes.
struct Products {
    Graph g;
    Tensor loss;
    explicit Products(bool rounded) {
        auto weight = [&](Tensor w) { return rounded ? g.cast(g.cast(w, DType::F16), DType::F32) : w; };
        Tensor x = g.input("x", {37, 41});
        Tensor row = g.input("row", {1, 41});
        Tensor w1 = g.parameter("w1", {29, 41});
        Tensor y1 = g.relu(g.linear(x, weight(w1), g.parameter("b1", {29})));
        g.output("linear", y1);
        g.output("gemv", g.matmul(row, weight(w1), false, true));
        Tensor img = g.input("img", {2, 3, 9, 9});
        Tensor folded = g.parameter("w2", {5, 3, 3, 3}) * g.exp(g.parameter("scale", {5, 1, 1, 1}));
        g.output("conv3x3", g.conv2d(img, weight(folded), std::nullopt, {.padding = 1}));
        g.output("conv1x1", g.conv2d(img, weight(g.parameter("w3", {4, 3, 1, 1}))));
        // 8 channels x 9 taps: rows of whole 16-byte groups, which the cooperative convolution loads 8 at a time.
        g.output("conv8", g.conv2d(g.input("img8", {2, 8, 7, 7}), weight(g.parameter("w4", {6, 8, 3, 3})), std::nullopt,
                                   {.stride = 2, .padding = 1}));
        g.output("activations", g.matmul(x, y1, true, false));
        loss = g.mean(y1 * y1);
    }
};

ref::Feeds feeds_for(const Graph& g) {
    ref::Feeds f = random_feeds(g, 31);
    for (double& v : f.at("scale").data) v *= 0.25;
    return f;
}

SessionStats run_and_check(Precision precision, const char* f16_weights, double tol) {
    ScopedEnv env("MEGANEURA_F16_WEIGHTS", f16_weights);
    Products plain(false), rounded(true);
    const ref::Feeds feeds = feeds_for(plain.g);
    Session s = compile(plain.g, device(), {.precision = precision, .poison_outputs = true});
    set_feeds(s, plain.g, feeds);
    s.run();
    const auto want = ref::evaluate(rounded.g, feeds);
    for (const auto& [name, id] : rounded.g.outputs())
        EXPECT_LE(relative_l2(s.get(name), want[static_cast<size_t>(id)].data), tol) << name;
    expect_no_validation_messages();
    return s.stats();
}

TEST(F16WeightsTest, ProductsReadTheirWeightsCastOnceToF16) {
    const SessionStats on = run_and_check(Precision::Fast, "1", coop_device() ? 2e-3 : 1e-5);
    ScopedEnv off_env("MEGANEURA_F16_WEIGHTS", "0");
    Products plain(false);
    Session off = compile(plain.g, device(), {.precision = Precision::Fast});
    // Four casts, all hoisted (w1 once for its two products, the folded weights, w3, w4); on the cooperative
    // kernels w4's cast is stored again in their order of K (ConvSpec::weight_octets): one more, hoisted too. The
    // run is as long.
    EXPECT_EQ(on.hoisted_dispatches, off.stats().hoisted_dispatches + (coop_device() ? 5 : 4));
    EXPECT_EQ(on.dispatches, off.stats().dispatches);
}

TEST(F16WeightsTest, StrictKeepsF32Weights) {
    // Against the unrounded graph to 1e-5: weights rounded to f16 (a relative error up to 2^-11 each) would miss it.
    ScopedEnv env("MEGANEURA_F16_WEIGHTS", "1");
    Products plain(false);
    const ref::Feeds feeds = feeds_for(plain.g);
    Session s = compile(plain.g, device(), {.precision = Precision::Strict});
    set_feeds(s, plain.g, feeds);
    s.run();
    const auto want = ref::evaluate(plain.g, feeds);
    for (const auto& [name, id] : plain.g.outputs())
        EXPECT_LE(relative_l2(s.get(name), want[static_cast<size_t>(id)].data), 1e-5) << name;
}

TEST(F16WeightsTest, TrainingKeepsF32Weights) {
    // Weights that change every step would be cast every step: a training step reads them as they are.
    auto step_dispatches = [](const char* f16_weights) {
        ScopedEnv env("MEGANEURA_F16_WEIGHTS", f16_weights);
        Products plain(false);
        return compile(plain.g, device(), {.loss = plain.loss, .precision = Precision::Fast}).stats().dispatches;
    };
    EXPECT_EQ(step_dispatches("1"), step_dispatches("0"));
}

TEST(F16WeightsTest, TheVariableTakesZeroOrOne) {
    ScopedEnv env("MEGANEURA_F16_WEIGHTS", "yes");
    Products plain(false);
    try {
        compile(plain.g, device(), {.precision = Precision::Fast});
        FAIL() << "compiled with MEGANEURA_F16_WEIGHTS=yes";
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "MEGANEURA_F16_WEIGHTS must be 0 or 1, got 'yes'");
    }
}

}  // namespace
}  // namespace mn::test
