// The check is one program at odd sizes (edge tiles, operands read transposed in place, the implicit
// GEMM's gathers) with every kind of cooperative kernel precision fast trains with: a linear layer before
// a ReLU (split, Tuning::split_forward), one after it, a padded 3x3 convolution (f16) and a causal attention
// of two query heads a kv head, and the gradients of all, the convolution's input and weight gradients on
// the scaled kernels (the linear layers' too where MEGANEURA_FAST_GRADIENTS=f16 puts them there). f16
// operands carry ~7e-4 relative L2 error here (the matmul tests say why); a wrong driver is off by far
// more, so the limit is 1e-2. One program, not one per kind: the check is part of a device's first fast
// compile (0.4-0.6 s of it on the H200 with two programs).
#include "compiler/coop_self_test.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "common/cache_dir.hpp"
#include "compiler/program_kernels.hpp"
#include "meganeura/autodiff.hpp"
#include "reference/reference.hpp"
#include "runtime/runtime.hpp"

extern char** environ;  // POSIX: the process's environment, which no standard header need declare

namespace mn::compiler {

Graph cooperative_check_graph() {
    Graph g;
    Tensor x = g.parameter("x", {70, 200});
    Tensor w = g.parameter("w", {72, 200});
    Tensor v = g.parameter("v", {40, 72});
    Tensor image = g.parameter("image", {2, 3, 9, 11});
    Tensor filter = g.parameter("filter", {5, 3, 3, 3});
    ConvOptions padded;
    padded.padding = 1;
    Tensor y = g.linear(x, w);
    Tensor z = g.linear(g.relu(y), v);
    Tensor conv = g.conv2d(image, filter, std::nullopt, padded);
    Tensor q = g.parameter("q", {1, 2, 40, 32}), k = g.parameter("k", {1, 1, 40, 32});
    Tensor values = g.parameter("values", {1, 1, 40, 32});
    AttentionOptions causal;
    causal.causal = true;
    Tensor att = g.attention(q, k, values, causal);
    g.output("y", y);
    g.output("z", z);
    g.output("conv", conv);
    g.output("attention", att);
    Tensor loss = g.add(g.add(g.sum(g.mul(z, g.input("t", {70, 40}))), g.sum(g.mul(conv, g.input("u", {2, 5, 9, 11})))),
                        g.sum(g.mul(att, g.input("a", {1, 2, 40, 32}))));
    const std::vector<Tensor> grads = grad(loss, {x, w, v, image, filter, q, k, values});
    const char* names[] = {"dx", "dw", "dv", "dimage", "dfilter", "dq", "dk", "dvalues"};
    for (size_t i = 0; i < grads.size(); ++i) g.output(names[i], grads[i]);
    return g;
}

namespace {

constexpr double kLimit = 1e-2;

// The worst relative L2 error of `g`'s outputs in precision fast against float64; throws mn::Error
// when the device cannot even build or run them.
double check_error(const Device& device, const Graph& g) {
    ref::Feeds feeds;
    uint32_t state = 12345;
    for (const Node& n : g.nodes()) {
        if (n.op != Op::Input && n.op != Op::Parameter) continue;
        ref::Value v{n.shape, std::vector<double>(static_cast<size_t>(numel(n.shape)))};
        for (double& e : v.data) {
            state = state * 1664525u + 1013904223u;  // a fixed pseudo-random pattern in [-1, 1)
            e = static_cast<float>(static_cast<double>(state >> 8) / (1 << 23) - 1.0);
        }
        feeds[n.name] = std::move(v);
    }
    CompileOptions fast;
    fast.precision = Precision::Fast;
    Session s = compile(g, device, fast);
    for (const auto& [name, v] : feeds) s.set(name, std::vector<float>(v.data.begin(), v.data.end()));
    s.run();
    const std::vector<ref::Value> want = ref::evaluate(g, feeds);
    double worst = 0;
    for (const auto& [name, id] : g.outputs()) {
        const std::vector<float> got = s.get(name);
        const std::vector<double>& expected = want[static_cast<size_t>(id)].data;
        double num = 0, den = 0;
        for (size_t i = 0; i < expected.size(); ++i) {
            num += (got[i] - expected[i]) * (got[i] - expected[i]);
            den += expected[i] * expected[i];
        }
        const double e = std::sqrt(num / den);
        worst = std::isnan(e) ? INFINITY : std::max(worst, e);
    }
    return worst;
}

// Where the check's verdict is kept (empty: no disk cache): named by what it depends on, the driver's build
// for this device (its pipelineCacheUUID), the path and the check's kernels (their GLSL), so that a driver
// update or another version's kernels check again.
std::string verdict_file(const Device& device, sched::CoopPath path) {
    const std::string dir = cache_folder();
    if (dir.empty()) return "";
    std::string kernels;
    for (const auto& k : program_kernels(cooperative_check_graph(), device.context()->caps(), {.precision = Precision::Fast}))
        kernels += k.glsl;
    std::ostringstream name;
    name << device.context()->pipeline_cache_uuid() << "-" << sched::coop_path_name(path) << "-" << std::hex
         << std::hash<std::string>{}(kernels);
    return dir + "/coop-check/" + name.str();
}

// The MEGANEURA_* variables set, as " (with NAME=value, ...)": the check compiles its kernels as the process does, so a
// forced choice (MEGANEURA_MATMUL_SPLITS, MEGANEURA_COOP_TILE, ...) can be what fails it, not the driver.
std::string meganeura_settings() {
    std::string settings;
    for (char** e = environ; *e; ++e) {
        if (std::strncmp(*e, "MEGANEURA_", 10) == 0) settings += (settings.empty() ? " (with " : ", ") + std::string(*e);
    }
    return settings.empty() ? settings : settings + ")";
}

// The verdict's consequence for this context: recorded, and where it failed, said once.
bool record_verdict(rt::Context& ctx, const std::string& name, const std::string& problem) {
    ctx.cooperative_matrices_work[name] = problem.empty();
    if (!problem.empty()) {
        std::fprintf(stderr, "meganeura: warning: the %s cooperative matrices of %s %s; precision fast uses the f32 kernels%s\n",
                     name.c_str(), ctx.caps().name.c_str(), problem.c_str(), meganeura_settings().c_str());
    }
    return problem.empty();
}

// known_cooperative_verdict, with the verdict's file (empty: none, or the context knew it).
std::optional<bool> known_verdict(const Device& device, sched::CoopPath path, std::string& file) {
    rt::Context& ctx = *device.context();
    const std::string name = sched::coop_path_name(path);
    if (const auto known = ctx.cooperative_matrices_work.find(name); known != ctx.cooperative_matrices_work.end())
        return known->second;
    file = verdict_file(device, path);
    const std::optional<std::string> problem = file.empty() ? std::nullopt : read_check_verdict(file);
    if (!problem) return std::nullopt;
    return record_verdict(ctx, name, *problem);
}

}  // namespace

std::optional<std::string> read_check_verdict(const std::string& file) {
    std::ifstream in(file);
    std::string verdict;
    if (!in || !std::getline(in, verdict)) return std::nullopt;
    if (verdict == "ok") return "";
    if (verdict.rfind("problem: ", 0) == 0 && verdict.size() > 9) return verdict.substr(9);
    return std::nullopt;  // torn by a concurrent write, or not ours: check again
}

void write_check_verdict(const std::string& file, const std::string& problem) {
    std::error_code error;
    std::filesystem::create_directories(std::filesystem::path(file).parent_path(), error);
    std::ofstream(file, std::ios::trunc) << (problem.empty() ? "ok" : "problem: " + problem) << "\n";
}

std::optional<bool> known_cooperative_verdict(const Device& device, sched::CoopPath path) {
    std::string file;
    return known_verdict(device, path, file);
}

bool cooperative_matrices_work(const Device& device, sched::CoopPath path) {
    std::string file;
    if (const std::optional<bool> known = known_verdict(device, path, file)) return *known;
    rt::Context& ctx = *device.context();
    const std::string name = sched::coop_path_name(path);
    ctx.cooperative_matrices_work[name] = true;  // the check's own compile uses them
    std::string problem;
    try {
        const double e = check_error(device, cooperative_check_graph());
        if (!(e <= kLimit)) {
            char text[96];
            std::snprintf(text, sizeof text, "computed a test product %.2g off (limit %.0e)", e, kLimit);
            problem = text;
        }
    } catch (const Error& e) {
        problem = std::string("failed a test product: ") + e.what();
    }
    if (!file.empty()) write_check_verdict(file, problem);
    return record_verdict(ctx, name, problem);
}

}  // namespace mn::compiler
