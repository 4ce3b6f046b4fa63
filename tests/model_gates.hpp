#pragma once
// The model tests' gates against PyTorch (issues 4 and 5), in one place: given meganeura's
// `meganeura forward --backward` file and the reference script's file, the output's relative L2,
// the loss's relative difference, and for the gradients the total norm error and, per parameter,
// the norm error and the elementwise relative L2, naming the worst parameter.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "io/safetensors.hpp"

namespace mn::test {

struct GateLimits {
    double forward = 1e-4;  // relative L2 of the output
    double loss = 1e-5;     // relative difference
    double grad = 1e-3;     // total and per-parameter norm error, per-parameter relative L2
};

// A tensor as doubles (the reference scripts may write F64).
inline std::vector<double> as_doubles(const io::TensorData& t) {
    if (t.dtype == "F64") {
        std::vector<double> d(t.bytes.size() / sizeof(double));
        std::memcpy(d.data(), t.bytes.data(), t.bytes.size());
        return d;
    }
    const std::vector<float> f = t.to_f32();
    return {f.begin(), f.end()};
}

inline double l2_norm(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x * x;
    return std::sqrt(s);
}

inline double relative_l2_error(const std::vector<double>& got, const std::vector<double>& want) {
    double d = 0;
    for (size_t i = 0; i < want.size(); ++i) d += (got[i] - want[i]) * (got[i] - want[i]);
    return std::sqrt(d) / l2_norm(want);
}

inline void expect_passes_gates(const io::TensorMap& got, const io::TensorMap& want, const std::string& model,
                                const std::string& output, const GateLimits& limits = {}) {
    ASSERT_TRUE(got.count(output) && want.count(output)) << output;
    ASSERT_EQ(got.at(output).shape, want.at(output).shape) << output;
    const double forward = relative_l2_error(as_doubles(got.at(output)), as_doubles(want.at(output)));
    EXPECT_LE(forward, limits.forward) << model << " forward";
    const double loss_want = as_doubles(want.at("loss"))[0], loss_got = as_doubles(got.at("loss"))[0];
    const double loss = std::fabs(loss_got - loss_want) / std::fabs(loss_want);
    EXPECT_LE(loss, limits.loss) << model << " loss " << loss_got << " vs " << loss_want;

    double total_got = 0, total_want = 0, worst_norm = 0, worst_l2 = 0;
    std::string worst_norm_name, worst_l2_name;
    size_t grads = 0;
    for (const auto& [key, w] : want) {
        if (key.rfind("grad.", 0) != 0) continue;
        ++grads;
        ASSERT_TRUE(got.count(key)) << "meganeura wrote no " << key;
        ASSERT_EQ(got.at(key).shape, w.shape) << key;
        const std::vector<double> g = as_doubles(got.at(key)), r = as_doubles(w);
        const double ng = l2_norm(g), nr = l2_norm(r);
        ASSERT_GT(nr, 0) << key << " is zero in PyTorch: the test would not see a wrong gradient";
        total_got += ng * ng;
        total_want += nr * nr;
        const double norm_err = std::fabs(ng - nr) / nr, l2 = relative_l2_error(g, r);
        if (!(norm_err <= worst_norm)) worst_norm = norm_err, worst_norm_name = key;
        if (!(l2 <= worst_l2)) worst_l2 = l2, worst_l2_name = key;
    }
    EXPECT_GT(grads, 0u) << "the reference has no gradients";
    EXPECT_EQ(grads + 2, got.size()) << "meganeura wrote gradients PyTorch has no parameter for";
    const double total = std::fabs(std::sqrt(total_got) - std::sqrt(total_want)) / std::sqrt(total_want);
    EXPECT_LE(total, limits.grad) << model << " total gradient norm";
    EXPECT_LE(worst_norm, limits.grad) << model << " worst gradient-norm error: " << worst_norm_name;
    EXPECT_LE(worst_l2, limits.grad) << model << " worst gradient relative L2: " << worst_l2_name;
    std::printf("%s vs torch: forward rel L2 %.2e, loss rel %.2e, total grad-norm err %.2e, worst param grad-norm err "
                "%.2e (%s), worst param grad rel L2 %.2e (%s)\n",
                model.c_str(), forward, loss, total, worst_norm, worst_norm_name.c_str(), worst_l2, worst_l2_name.c_str());
}

}  // namespace mn::test
