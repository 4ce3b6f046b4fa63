// `meganeura bench`: one model's workloads timed, with the weights, inputs and outputs written for
// the PyTorch side (bench/torch_bench.py) and the correctness gates (bench/compare.py).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "bench/bench.hpp"
#include "cli/flags.hpp"
#include "io/atomic_file.hpp"

namespace mn::cli {

int cmd_bench(const Args& args) {
    const Flags f(args, {{"model", ""}, {"precision", "strict"}, {"size", "full"}, {"json", ""}, {"repeat", "20"},
                         {"warmup", "3"}, {"out-dir", ""}, {"seed", "0"}});
    if (f.str("model").empty()) throw Error("--model is required");
    bench::BenchOptions o{.model = f.str("model"), .size = f.str("size"),
                          .precision = parse_precision(f.str("precision")), .out_dir = f.str("out-dir"),
                          .repeat = static_cast<int>(f.integer("repeat", 1, INT32_MAX)),
                          .warmup = static_cast<int>(f.integer("warmup", 0, INT32_MAX)),
                          .seed = static_cast<uint64_t>(f.integer("seed", 0))};
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
    std::printf("weights, inputs and outputs in %s\n", o.out_dir.c_str());
    return report["validation_messages"].empty() ? 0 : 4;
}

}  // namespace mn::cli
