// `meganeura bench`: one model's workloads timed, with the weights, inputs and outputs written for
// the PyTorch side (bench/torch_bench.py) and the correctness gates (bench/compare.py).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "bench/bench.hpp"
#include "cli/commands.hpp"
#include "io/atomic_file.hpp"

namespace mn::cli {

namespace {

int run_bench(const Flags& f) {
    bench::BenchOptions o{.model = f.required("model"), .size = f.choice("size", {"full", "tiny"}),
                          .precision = parse_precision(f), .out_dir = f.str("out-dir"),
                          .repeat = static_cast<int>(f.integer("repeat", 1, INT32_MAX)),
                          .warmup = static_cast<int>(f.integer("warmup", 0, INT32_MAX)),
                          .seed = static_cast<uint64_t>(f.integer("seed", 0)),
                          .compile_only = f.on("compile-only")};
    if (o.out_dir.empty()) o.out_dir = "bench-out/" + o.model + "-" + o.size + "-" + f.str("precision");
    // Both outputs are checked before the benchmark runs (minutes); the report may go into the folder.
    if (std::error_code e; !std::filesystem::create_directories(o.out_dir, e) && e)
        throw Error("--out-dir " + o.out_dir + ": cannot create it: " + e.message());
    if (!f.str("json").empty()) io::check_can_write(f.str("json"), "--json");
    const nlohmann::json report = bench::run_benchmark(o);
    std::fputs(bench::summarize(report).c_str(), stdout);
    if (!f.str("json").empty()) {
        std::ofstream out(f.str("json"));
        out << report.dump(2) << "\n";
        if (!out) throw Error("cannot write " + f.str("json"));
    }
    if (!o.compile_only) std::printf("weights, inputs and outputs in %s\n", o.out_dir.c_str());
    if (!report["validation_messages"].empty()) return 4;
    if (const auto& bad = report.value("non_finite_outputs", nlohmann::json::array()); !bad.empty()) {
        std::fflush(stdout);  // the reason last, where a script's `tail -n 1` of the log finds it (bench/run_gpu.sh)
        std::fprintf(stderr, "meganeura bench: NaN or infinity in %zu outputs, first %s\n", bad.size(),
                     bad[0].get<std::string>().c_str());
        return 5;
    }
    return 0;
}

}  // namespace

const Command bench_command = {
    .name = "bench",
    .summary = "time a model's workloads (compile, inference, latency, training) and write them for PyTorch",
    .description =
        "Times one model's workloads: compile (cold and warm), inference, single-item latency, training\n"
        "step and full step, in wall time and GPU timestamps, with the top kernels, a Perfetto trace per\n"
        "workload, dispatches, memory and each workload's floor. The weights, inputs and outputs go to\n"
        "--out-dir for bench/torch_bench.py and bench/compare.py (bench/README.md). Exit status 4 when the\n"
        "validation layer reported a message, 5 when an output or gradient holds NaN or infinity.",
    .options = {{"model", "", "NAME", "the model (required; meganeura models lists them)"},
                precision_option(),
                {"size", "full", "SIZE", "full (the benchmark configuration) or tiny"},
                {"json", "", "FILE", "also write the report as JSON"},
                {"repeat", "20", "N", "timed runs per workload"},
                {"warmup", "3", "N", "untimed runs before them"},
                {"out-dir", "", "DIR", "where the weights, inputs and outputs go (default: bench-out/MODEL-SIZE-PRECISION)"},
                {"seed", "0", "N", "seed of the initialization and the example inputs"},
                {"compile-only", "false", "", "time the compiles (cold, warm, per pass) and nothing else"}},
    .run = run_bench,
};

}  // namespace mn::cli
