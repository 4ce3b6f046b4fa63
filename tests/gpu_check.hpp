#pragma once
// Test support: one shared device (validation on when MEGANEURA_VALIDATE=1), random feeds, and
// the central check — compile a graph, run it on the GPU with outputs poisoned with NaN, and
// compare every output with the float64 reference by relative L2.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "meganeura/autodiff.hpp"
#include "meganeura/meganeura.hpp"
#include "reference/reference.hpp"
#include "runtime/runtime.hpp"
#include "schedule/schedule.hpp"

namespace mn::test {

inline Device& device() {
    static Device d = Device::open();
    return d;
}

// Fails the current test when the validation layer said anything since the last call.
inline void expect_no_validation_messages() {
    for (const auto& m : device().context()->take_validation_messages()) ADD_FAILURE() << "validation: " << m;
}

// Whether precision fast runs the cooperative-matrix kernels here (the H200; never lavapipe).
inline bool coop_device() {
    return sched::tune_for(device().context()->caps(), Precision::Fast).matmul.coop_subgroup != 0;
}

// Precision fast takes the cooperative kernels only where their start-up check passed (compiler/coop_self_test.hpp),
// and a failed check falls back to the f32 kernels with a warning, on which a fast test passes without testing them.
// A forced MEGANEURA_* choice reaches the check too (MEGANEURA_MATMUL_SPLITS=3 with the cooperative kernels summing
// their own pieces failed it in session 41, and the fast tests after it ran f32). So where the device has them, a
// compile in precision fast must leave them trusted.
inline void expect_cooperative_kernels_trusted(Precision precision) {
    if (precision != Precision::Fast || !coop_device()) return;
    const auto& verdicts = device().context()->cooperative_matrices_work;
    const auto verdict = verdicts.find(sched::coop_path_name(sched::tune_for(device().context()->caps(), precision).coop.path));
    EXPECT_TRUE(verdict != verdicts.end() && verdict->second)
        << "the start-up check of the cooperative matrices failed (the warning above says how): precision fast ran "
           "on the f32 kernels";
}

class GpuTest : public ::testing::Test {
protected:
    void TearDown() override { expect_no_validation_messages(); }
};

struct FeedRange {
    double lo = -2, hi = 2;
};

// Random values for every input and parameter of the graph, rounded to their dtype.
inline ref::Feeds random_feeds(const Graph& g, uint64_t seed, FeedRange range = {}) {
    std::mt19937_64 rng(seed);
    ref::Feeds feeds;
    for (const Node& n : g.nodes()) {
        if (n.op != Op::Input && n.op != Op::Parameter) continue;
        ref::Value v{n.shape, std::vector<double>(static_cast<size_t>(numel(n.shape)))};
        std::uniform_real_distribution<double> d(range.lo, range.hi);
        for (auto& x : v.data) {
            x = d(rng);
            if (n.dtype == DType::F32) x = static_cast<float>(x);
            if (n.dtype == DType::F16) x = ref::round_to_half(x);
            if (n.dtype == DType::I32) x = std::floor(x);
        }
        feeds[n.name] = std::move(v);
    }
    return feeds;
}

inline void set_feeds(Session& s, const Graph& g, const ref::Feeds& feeds) {
    for (const auto& [name, v] : feeds) {
        if (g.node(*g.find(name)).dtype == DType::I32) {
            s.set(name, std::vector<int32_t>(v.data.begin(), v.data.end()));
        } else {
            s.set(name, std::vector<float>(v.data.begin(), v.data.end()));
        }
    }
}

inline double relative_l2(const std::vector<float>& got, const std::vector<double>& want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Runs `g` on the GPU and the reference; every output must match within `tol` relative L2 and
// be fully written (no NaN where the reference has none).
inline void expect_matches_reference(const Graph& g, const ref::Feeds& feeds, double tol = 1e-5,
                                     CompileOptions options = {}) {
    options.poison_outputs = true;
    Session s = compile(g, device(), options);
    expect_cooperative_kernels_trusted(options.precision);
    set_feeds(s, g, feeds);
    s.run();
    const auto want = ref::evaluate(g, feeds);
    for (const auto& [name, id] : g.outputs()) {
        const auto& w = want[static_cast<size_t>(id)].data;
        std::vector<float> got;
        if (g.node(id).dtype == DType::I32) {
            for (int32_t x : s.get_i32(name)) got.push_back(static_cast<float>(x));
        } else {
            got = s.get(name);
        }
        ASSERT_EQ(got.size(), w.size()) << name;
        for (size_t i = 0; i < w.size(); ++i) {
            if (!std::isnan(w[i])) ASSERT_FALSE(std::isnan(got[i])) << name << "[" << i << "] was not written";
        }
        EXPECT_LE(relative_l2(got, w), tol) << "output '" << name << "' of\n" << g.str();
    }
}

// A graph whose output "y" = relu(make(g)) reads a forward product that Tuning::split_forward splits:
// a ReLU follows it (an output, so that dead-code elimination keeps it: on the H200 a ReLU only the loss
// read was removed, and the product went f16) and the graph has gradients. Its one gradient, "grad.z" of
// a parameter apart, keeps the ReLU's gradient out of the outputs: it flips wherever the product is
// within its rounding of 0, where the ReLU's value barely moves.
inline Graph split_forward_graph(const std::function<Tensor(Graph&)>& make) {
    Graph g;
    const Tensor y = g.relu(make(g));
    const Tensor z = g.parameter("z", {4});
    g.output("y", y);
    g.output("grad.z", grad(g.add(g.sum(y), g.sum(g.mul(z, z))), {z})[0]);
    return g;
}

}  // namespace mn::test
