// A small MLP forward pass on the best Vulkan device, checked against the float64 reference.
#include <cmath>
#include <cstdio>
#include <random>

#include "meganeura/meganeura.hpp"
#include "reference/reference.hpp"

int main() try {
    mn::Graph g;
    auto x = g.input("x", {64, 784});
    auto h = g.relu(g.linear(x, g.parameter("fc1.weight", {256, 784}, mn::Init::uniform(-0.036, 0.036)),
                             g.parameter("fc1.bias", {256}, mn::Init::uniform(-0.036, 0.036))));
    g.output("logits", g.linear(h, g.parameter("fc2.weight", {10, 256}, mn::Init::uniform(-0.0625, 0.0625)),
                                g.parameter("fc2.bias", {10})));

    auto dev = mn::Device::open();
    auto session = mn::compile(g, dev);
    std::printf("device: %s\n%zu dispatches, %zu barriers, arena %llu bytes\n", dev.name().c_str(),
                session.stats().dispatches, session.stats().barriers,
                static_cast<unsigned long long>(session.stats().physical_bytes));

    std::mt19937 rng(0);
    std::uniform_real_distribution<float> u(0, 1);
    std::vector<float> images(64 * 784);
    for (auto& v : images) v = u(rng);
    session.set("x", images);
    session.run();
    const auto logits = session.get("logits");

    mn::ref::Feeds feeds;
    feeds["x"] = {{64, 784}, {images.begin(), images.end()}};
    for (const char* name : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}) {
        const auto v = session.get(name);
        feeds[name] = {session.shape(name), {v.begin(), v.end()}};
    }
    const auto want = mn::ref::evaluate(g, feeds)[static_cast<size_t>(g.find("logits")->id)].data;
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) num += std::pow(logits[i] - want[i], 2), den += want[i] * want[i];
    const double rel = std::sqrt(num / den);
    std::printf("logits relative L2 error against the float64 reference: %.2e %s\n", rel, rel < 1e-5 ? "(ok)" : "(FAIL)");
    return rel < 1e-5 ? 0 : 1;
} catch (const mn::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
}
