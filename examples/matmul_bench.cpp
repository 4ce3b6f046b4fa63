// Times the matmul shapes of the target workloads in precision strict and fast with Vulkan
// timestamps. Each run is one submit holding R copies of the matmul, one after another, as in a
// model step: the GPU stays busy, so its clocks are up, and the readback is small. The time of
// one matmul is its dispatches' timestamp intervals (product, plus the split-K sum where there is
// one; each interval starts at the previous timestamp, so it includes the barrier before it),
// averaged over the R copies of a run; the table gives the median over runs, after warm-up. Operands are parameters filled
// once with uniform random values, so no upload is timed. The first copy reads a + (z - z), z a
// one-element input: a program that does not train runs its parameter-only dispatches once, not
// every run (hoisting), and without z every copy would be one.
//
//   matmul_bench [--runs N] [--tiles] [--coop-tiles T;T;...] [--only NAME,NAME,...] [--f16]
//
// --tiles also times other tile geometries and split-K off (MEGANEURA_MATMUL_TILE,
// MEGANEURA_MATMUL_SPLITS), to check the heuristic's choice. --coop-tiles times precision fast at
// each given cooperative tile (MEGANEURA_COOP_TILE's bm,bn,wm,wn,bk,stages). --only keeps the
// workloads whose names contain one of the given words. --f16 gives precision fast f16 operands and
// output (cast once from the f32 parameters, outside the timed dispatches), as cuBLAS's f16 GEMM reads. "fast vs strict" is the relative L2
// difference of the two results (the f16 rounding of the operands where fast uses cooperative
// matrices).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "meganeura/meganeura.hpp"

namespace {

struct Workload {
    const char* name;
    int64_t m, k, n;
    bool ta, tb;
    int64_t batch = 1;  // products of the same shape, one batched matmul
};

// Linear layers are x[M,K] @ W[N,K]^T; their backward is dx = dy @ W (plain) and
// dW = dy^T @ x (A transposed).
const std::vector<Workload> kWorkloads = {
    {"SmolLM2 attn proj", 128, 576, 576, false, true},
    {"SmolLM2 k/v proj", 128, 576, 192, false, true},
    {"SmolLM2 mlp up", 128, 576, 1536, false, true},
    {"SmolLM2 mlp down", 128, 1536, 576, false, true},
    {"SmolLM2 lm head", 128, 576, 49152, false, true},
    {"SmolLM2 decode proj", 1, 576, 576, false, true},
    {"SmolLM2 decode mlp up", 1, 576, 1536, false, true},
    {"SmolLM2 decode lm head", 1, 576, 49152, false, true},
    {"SmolVLA expert", 50, 720, 2048, false, true},
    {"Whisper mlp", 1500, 384, 1536, false, true},
    {"Whisper mlp down", 1500, 1536, 384, false, true},
    {"Whisper attn proj", 1500, 384, 384, false, true},
    {"SmolVLA expert down", 50, 2048, 720, false, true},
    {"bwd dx mlp up", 128, 1536, 576, false, false},
    {"bwd dW mlp up", 1536, 128, 576, true, false},
    {"bwd dx lm head", 128, 49152, 576, false, false},
    {"bwd dW lm head", 49152, 128, 576, true, false},
    {"bwd dW Whisper mlp", 1536, 1500, 384, true, false},
    {"bwd dx Whisper mlp", 1500, 1536, 384, false, false},
    {"square 4096", 4096, 4096, 4096, false, false},
    {"layout probe nn", 2048, 2048, 2048, false, false},
    {"layout probe nt", 2048, 2048, 2048, false, true},
    {"layout probe tn", 2048, 2048, 2048, true, false},
    {"layout probe tt", 2048, 2048, 2048, true, true},
    {"Whisper mlp as nn", 1500, 384, 1536, false, false},
    {"Whisper attn dQ", 1500, 1500, 64, false, false, 6},  // dS K per head, strict (grad_q_from_scores)
    {"Whisper attn dQ from dS^T", 1500, 1500, 64, true, false, 6},  // the same with dS stored keys-major
    // A LoRA adapter of rank 8 on SmolLM2's q projection, a fine-tuning batch of 8 x 256 tokens: h = x A^T, y += h B^T;
    // backward dh = dy B, dx += dh A, dA = dh^T x, dB = dy^T h (the gradient products stay f32 in precision fast).
    {"LoRA down", 2048, 576, 8, false, true},
    {"LoRA up", 2048, 8, 576, false, true},
    {"bwd LoRA dh", 2048, 576, 8, false, false},
    {"bwd LoRA dx", 2048, 8, 576, false, false},
    {"bwd LoRA dA", 8, 2048, 576, true, false},
    {"bwd LoRA dB", 576, 2048, 8, true, false},
};

struct Timed {
    double ms = 0;
    std::string label;  // the product kernel, "+sum" when K was split
    std::vector<float> out;
};

constexpr int kCopies = 10;
constexpr int kWarmupMs = 200;
constexpr int kSessions = 2;  // each configuration is compiled and timed twice, to show the spread
bool f16_operands = false;   // --f16

// `env` is a list of (variable, value) tuning overrides for this session.
Timed time_matmul(const mn::Device& dev, const Workload& w, mn::Precision precision,
                  const std::vector<std::pair<const char*, const char*>>& env, int runs, bool keep_output) {
    for (const auto& [name, value] : env) setenv(name, value, 1);
    mn::Graph g;
    mn::Shape sa = w.ta ? mn::Shape{w.k, w.m} : mn::Shape{w.m, w.k};
    mn::Shape sb = w.tb ? mn::Shape{w.n, w.k} : mn::Shape{w.k, w.n};
    if (w.batch > 1) sa.insert(sa.begin(), w.batch), sb.insert(sb.begin(), w.batch);
    auto a = g.parameter("a", sa, mn::Init::uniform(-1, 1));
    auto b = g.parameter("b", sb, mn::Init::uniform(-1, 1));
    const mn::DType dtype = f16_operands && precision == mn::Precision::Fast ? mn::DType::F16 : mn::DType::F32;
    if (dtype == mn::DType::F16) {  // casts of parameters alone: hoisted, run once
        a = g.cast(a, dtype);
        b = g.cast(b, dtype);
    }
    auto z = g.input("z", {1, 1}, dtype);
    a = g.add(a, g.sub(z, z));
    // Copy i + 1 reads a + (x - x) with x one element of copy i's result: exactly a, but only
    // after copy i, so the copies run one after another (independent ones would share a level
    // and overlap, and their timestamps would say nothing).
    auto lhs = a;
    for (int i = 0; i < kCopies; ++i) {
        auto c = g.matmul(lhs, b, w.ta, w.tb);
        if (i == 0 && keep_output) g.output("c", c);
        auto x = g.slice(g.slice(c, c.shape().size() - 2, 0, 1), c.shape().size() - 1, 0, 1);
        if (w.batch > 1) x = g.slice(x, 0, 0, 1);
        if (i + 1 == kCopies) g.output("last", x);
        lhs = g.add(a, g.sub(x, x));
    }
    mn::CompileOptions options;
    options.precision = precision;
    options.profile = true;
    options.seed = 7;  // the same operands in both precisions
    mn::Session s = mn::compile(g, dev, options);
    for (const auto& [name, value] : env) unsetenv(name);
    s.set("z", std::vector<float>{0.0f});
    // Warm up for a fixed wall time, not a count: the GPU's clocks rise only under sustained load.
    const auto warm_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWarmupMs);
    while (std::chrono::steady_clock::now() < warm_until) s.run();
    std::vector<double> ms;
    Timed t;
    for (int i = 0; i < runs; ++i) {
        s.run();
        double total = 0;
        int products = 0;
        for (const auto& [label, dispatch_ms] : s.profile()) {
            if (label.rfind("matmul", 0) != 0) continue;
            total += dispatch_ms;
            if (label == "matmul_split_sum") t.label += t.label.find("+sum") == std::string::npos ? "+sum" : "";
            else if (products++ == 0 && t.label.empty()) t.label = label;
        }
        ms.push_back(total / kCopies);
    }
    std::sort(ms.begin(), ms.end());
    t.ms = ms[ms.size() / 2];
    if (keep_output) t.out = s.get("c");
    return t;
}

double relative_l2(const std::vector<float>& x, const std::vector<float>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        num += (double(x[i]) - ref[i]) * (double(x[i]) - ref[i]);
        den += double(ref[i]) * ref[i];
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

double tflops(const Workload& w, double ms) { return 2.0 * w.batch * w.m * w.n * w.k / (ms * 1e-3) / 1e12; }

}  // namespace

int main(int argc, char** argv) try {
    int runs = 20;
    bool tiles = false;
    std::vector<std::string> coop_tiles, only;
    auto split = [](const std::string& s, char sep) {
        std::vector<std::string> parts;
        for (size_t at = 0; at <= s.size();) {
            const size_t end = std::min(s.find(sep, at), s.size());
            if (end > at) parts.push_back(s.substr(at, end - at));
            at = end + 1;
        }
        return parts;
    };
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) runs = std::atoi(argv[++i]);
        else if (!std::strcmp(argv[i], "--tiles")) tiles = true;
        else if (!std::strcmp(argv[i], "--coop-tiles") && i + 1 < argc) coop_tiles = split(argv[++i], ';');
        else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = split(argv[++i], ',');
        else if (!std::strcmp(argv[i], "--f16")) f16_operands = true;
        else throw mn::Error(std::string("unknown argument ") + argv[i] +
                             " (matmul_bench [--runs N] [--tiles] [--coop-tiles T;T;...] [--only NAME,...] [--f16])");
    }
    auto chosen = [&](const Workload& w) {
        if (only.empty()) return true;
        for (const auto& o : only)
            if (std::strstr(w.name, o.c_str())) return true;
        return false;
    };
    auto dev = mn::Device::open();
    std::printf("%s", dev.describe().c_str());
    std::printf("%d copies of the matmul per submit; median over %d runs after %d ms of warm-up runs; GPU time from "
                "Vulkan timestamps. Each configuration timed in %d sessions: ms is the lower session median, "
                "'other' the other one.\n\n", kCopies, runs, kWarmupMs, kSessions);
    std::printf("| workload | M x K x N | strict kernel | strict ms | other | strict TFLOP/s | fast kernel | fast ms "
                "| other | fast TFLOP/s | fast vs strict |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    std::vector<std::string> sweep, coop_sweep;
    auto sessions = [&](const Workload& w, mn::Precision p, std::pair<Timed, double>& out) {
        out.first = time_matmul(dev, w, p, {}, runs, true);
        out.second = out.first.ms;
        for (int i = 1; i < kSessions; ++i) {
            Timed t = time_matmul(dev, w, p, {}, runs, false);
            if (t.ms < out.first.ms) std::swap(t.ms, out.first.ms);
            out.second = t.ms;
        }
    };
    for (const auto& w : kWorkloads) {
        if (!chosen(w)) continue;
        std::pair<Timed, double> strict, fast;
        sessions(w, mn::Precision::Strict, strict);
        sessions(w, mn::Precision::Fast, fast);
        char shape[64];
        std::snprintf(shape, sizeof shape, "%lldx%lldx%lld%s%s%s", (long long)w.m, (long long)w.k, (long long)w.n,
                      w.ta ? " A^T" : "", w.tb ? " B^T" : "", w.batch > 1 ? (" x" + std::to_string(w.batch)).c_str() : "");
        std::printf("| %s | %s | %s | %.4f | %.4f | %.2f | %s | %.4f | %.4f | %.2f | %.1e |\n", w.name, shape,
                    strict.first.label.c_str(), strict.first.ms, strict.second, tflops(w, strict.first.ms),
                    fast.first.label.c_str(), fast.first.ms, fast.second, tflops(w, fast.first.ms),
                    relative_l2(fast.first.out, strict.first.out));
        std::fflush(stdout);
        if (!coop_tiles.empty() && w.m > 1) {
            std::string row = std::string("| ") + w.name + " | " + shape + " |";
            for (const auto& tile : coop_tiles) {
                char v[48];
                const double ms = time_matmul(dev, w, mn::Precision::Fast, {{"MEGANEURA_COOP_TILE", tile.c_str()}}, runs, false).ms;
                std::snprintf(v, sizeof v, " %.4f / %.1f |", ms, tflops(w, ms));
                row += v;
            }
            coop_sweep.push_back(row);
        }
        if (!tiles || w.m == 1) continue;
        std::string row = std::string("| ") + w.name + " | " + shape + " |";
        for (mn::Precision p : {mn::Precision::Strict, mn::Precision::Fast}) {
            const bool f = p == mn::Precision::Fast;
            for (const char* tile : f ? std::vector<const char*>{"128", "64", "32"}
                                      : std::vector<const char*>{"128", "128/32", "128x64", "64", "64/32", "32", "32/32"}) {
                char v[32];
                std::snprintf(v, sizeof v, " %.4f |", time_matmul(dev, w, p, {{"MEGANEURA_MATMUL_TILE", tile}}, runs, false).ms);
                row += v;
            }
            char v[32];
            std::snprintf(v, sizeof v, " %.4f |", time_matmul(dev, w, p, {{"MEGANEURA_MATMUL_SPLITS", "1"}}, runs, false).ms);
            row += v;
        }
        sweep.push_back(row);
    }
    if (tiles) {
        std::printf("\nms by forced tile (height/K-slice; tiled kernel K-slice 16 unless given) and with split-K off\n\n"
                    "| workload | M x K x N | strict 128 | 128/32 | 128x64 | 64 | 64/32 | 32 | 32/32 | strict no split "
                    "| fast 128 | 64 | 32 | fast no split |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (const auto& r : sweep) std::printf("%s\n", r.c_str());
    }
    if (!coop_tiles.empty()) {
        std::printf("\nprecision fast by forced cooperative tile (bm,bn,wm,wn,bk,stages): ms / TFLOP/s\n\n| workload | M x K x N |");
        for (const auto& t : coop_tiles) std::printf(" %s |", t.c_str());
        std::printf("\n|---|---|");
        for (size_t i = 0; i < coop_tiles.size(); ++i) std::printf("---|");
        std::printf("\n");
        for (const auto& r : coop_sweep) std::printf("%s\n", r.c_str());
    }
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "matmul_bench: %s\n", e.what());
    return 1;
}
