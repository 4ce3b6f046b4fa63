// A small MLP forward pass on the best Vulkan device, checked against the same MLP computed on the
// CPU in double precision. Builds against the installed package (examples/CMakeLists.txt):
//   find_package(meganeura CONFIG REQUIRED)  target_link_libraries(app meganeura::meganeura)
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "meganeura/meganeura.hpp"

namespace {

// y [rows, out] = x [rows, in] @ weight[out, in]^T + bias[out], as nn.Linear, in double.
std::vector<double> linear(const std::vector<double>& x, const std::vector<float>& weight, const std::vector<float>& bias,
                           size_t rows, size_t in, size_t out) {
    std::vector<double> y(rows * out);
    for (size_t r = 0; r < rows; ++r)
        for (size_t o = 0; o < out; ++o) {
            double sum = bias[o];
            for (size_t i = 0; i < in; ++i) sum += x[r * in + i] * weight[o * in + i];
            y[r * out + o] = sum;
        }
    return y;
}

}  // namespace

int main() try {
    constexpr size_t kBatch = 64, kIn = 784, kHidden = 256, kOut = 10;
    mn::Graph g;
    auto x = g.input("x", {kBatch, kIn});
    auto h = g.relu(g.linear(x, g.parameter("fc1.weight", {kHidden, kIn}, mn::Init::uniform(-0.036, 0.036)),
                             g.parameter("fc1.bias", {kHidden}, mn::Init::uniform(-0.036, 0.036))));
    g.output("logits", g.linear(h, g.parameter("fc2.weight", {kOut, kHidden}, mn::Init::uniform(-0.0625, 0.0625)),
                                g.parameter("fc2.bias", {kOut}, mn::Init::uniform(-0.0625, 0.0625))));

    auto dev = mn::Device::open();
    auto session = mn::compile(g, dev);
    std::printf("device: %s\n%zu dispatches, %zu barriers, arena %llu bytes\n", dev.name().c_str(),
                session.stats().dispatches, session.stats().barriers,
                static_cast<unsigned long long>(session.stats().physical_bytes));

    std::mt19937 rng(0);
    std::uniform_real_distribution<float> u(0, 1);
    std::vector<float> images(kBatch * kIn);
    for (auto& v : images) v = u(rng);
    session.set("x", images);
    session.run();
    const auto logits = session.get("logits");

    // The parameters were initialized on the device; read them back to compute the same MLP here.
    std::vector<double> hidden = linear({images.begin(), images.end()}, session.get("fc1.weight"),
                                        session.get("fc1.bias"), kBatch, kIn, kHidden);
    for (double& v : hidden) v = std::max(v, 0.0);
    const std::vector<double> want = linear(hidden, session.get("fc2.weight"), session.get("fc2.bias"), kBatch, kHidden, kOut);
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) num += std::pow(logits[i] - want[i], 2), den += want[i] * want[i];
    const double rel = std::sqrt(num / den);
    std::printf("logits relative L2 error against double precision on the CPU: %.2e %s\n", rel, rel < 1e-5 ? "(ok)" : "(FAIL)");
    return rel < 1e-5 ? 0 : 1;
} catch (const mn::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
}
