// The benchmark harness end to end on lavapipe, as bench/README.md runs it: `meganeura bench` on the
// mlp, bench/torch_bench.py in its three modes on the files it wrote, bench/compare.py's records,
// table and gates.
// Two timed runs each: this checks the reports' schema and that the gates are evaluated (and fail
// when they should), never how fast anything is.
#include <gtest/gtest.h>

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "bench/bench.hpp"
#include "bench/floor.hpp"
#include "host_tools.hpp"
#include "meganeura/autodiff.hpp"
#include "temp_dir.hpp"

namespace mn::test {
namespace {

using nlohmann::json;

const std::string kSource = source_dir();
const char* const kWorkloads[] = {"inference", "latency", "training", "step"};

json read_json(const std::string& path) {
    std::ifstream f(path);
    EXPECT_TRUE(f.good()) << path;
    return f.good() ? json::parse(f) : json();
}

std::string python(const std::string& script) { return reference_python() + " '" + kSource + "/bench/" + script + "'"; }

void expect_summary(const json& s, int runs, const std::string& what) {
    ASSERT_TRUE(s.is_object()) << what;
    EXPECT_EQ(s["runs"], runs) << what;
    EXPECT_LE(s["min"].get<double>(), s["median"].get<double>()) << what;
    EXPECT_LE(s["median"].get<double>(), s["p90"].get<double>()) << what;
    EXPECT_GT(s["min"].get<double>(), 0.0) << what;
}

// The fields every report has, whichever framework wrote it.
void expect_common_schema(const json& r, const std::string& framework, int runs) {
    EXPECT_EQ(r["schema"], "meganeura-bench/1");
    EXPECT_EQ(r["framework"], framework);
    EXPECT_EQ(r["model"], "mlp");
    EXPECT_EQ(r["size"], "tiny");
    EXPECT_EQ(r["precision"], "strict");
    EXPECT_EQ(r["repeat"], runs);
    EXPECT_TRUE(r["device"].is_string());
    EXPECT_TRUE(r.contains("compile") && r.contains("peak_device_bytes") && r.contains("binary_bytes"));
    for (const char* w : kWorkloads) {
        const json& wl = r["workloads"][w];
        expect_summary(wl["wall_ms"], runs, framework + " " + w);
        EXPECT_TRUE(wl.contains("gpu_ms") && wl.contains("dispatches") && wl.contains("peak_device_bytes")) << w;
        EXPECT_EQ(wl["input_shapes"]["images"][0], std::string(w) == "latency" ? 1 : 64) << w;
    }
}

TEST(Bench, MlpEndToEndWithGates) {
    MN_REQUIRE_TORCH();
    const TempDir dir("bench-test");
    const std::string cell = dir.path("mlp-strict");
    const int runs = 2;
    ASSERT_EQ(exit_status(cli_binary() + " bench --model mlp --size tiny --precision strict --repeat " +
                          std::to_string(runs) + " --warmup 1 --out-dir '" + cell + "' --json '" + cell +
                          "/meganeura.json' > '" + dir.path("bench.log") + "' 2>&1"),
              0)
        << std::ifstream(dir.path("bench.log")).rdbuf();

    const json mn = read_json(cell + "/meganeura.json");
    expect_common_schema(mn, "meganeura", runs);
    EXPECT_GT(mn["binary_bytes"].get<uint64_t>(), 0u);
    EXPECT_GT(mn["peak_device_bytes"].get<uint64_t>(), 0u);
    EXPECT_TRUE(mn["validation_messages"].empty()) << mn["validation_messages"];
    EXPECT_EQ(mn["non_finite_outputs"], json::array());
    for (const char* c : {"inference", "step"}) {
        const json& t = mn["compile"][c];
        EXPECT_GT(t["cold_ms"].get<double>(), 0.0) << c;
        EXPECT_GT(t["warm_ms"].get<double>(), 0.0) << c;
        // Cold: every shader through glslang; warm: every one from the disk cache the cold compile left.
        EXPECT_GT(t["cold_shaders"]["compiled"].get<int>(), 0) << c;
        EXPECT_EQ(t["cold_shaders"]["disk_hits"], 0) << c;
        EXPECT_EQ(t["warm_shaders"]["compiled"], 0) << c;
        EXPECT_EQ(t["warm_shaders"]["disk_hits"], t["cold_shaders"]["compiled"]) << c;
    }
    for (const char* w : kWorkloads) {
        const json& wl = mn["workloads"][w];
        EXPECT_GT(wl["dispatches"].get<int>(), 0) << w;
        EXPECT_GE(wl["logical_bytes"].get<uint64_t>(), wl["physical_bytes"].get<uint64_t>()) << w;
        EXPECT_GT(wl["peak_device_bytes"].get<uint64_t>(), 0u) << w;
        EXPECT_GT(wl["floor"]["product_flops"].get<double>(), 0.0) << w;
        EXPECT_GT(wl["floor"]["bytes"].get<uint64_t>(), wl["floor"]["weight_bytes"].get<uint64_t>()) << w;
        if (wl["gpu_ms"].is_null()) continue;  // a device without timestamp queries
        expect_summary(wl["gpu_ms"], runs, std::string("gpu ") + w);
        EXPECT_FALSE(wl["top_kernels"].empty()) << w;
        // The trace: one complete event per dispatch, end to end, named by kernel.
        EXPECT_EQ(wl["trace"], std::string("trace-") + w + ".json");
        const json trace = read_json(cell + "/" + wl["trace"].get<std::string>());
        ASSERT_EQ(trace["traceEvents"].size(), wl["dispatches"].get<size_t>()) << w;
        double end = 0;
        for (const json& e : trace["traceEvents"]) {
            EXPECT_EQ(e["ph"], "X");
            EXPECT_DOUBLE_EQ(e["ts"].get<double>(), end);
            EXPECT_GE(e["dur"].get<double>(), 0.0);
            end += e["dur"].get<double>();
        }
        const json& slowest = wl["top_dispatches"][0];
        EXPECT_EQ(trace["traceEvents"][slowest["index"].get<size_t>()]["name"], slowest["label"]) << w;
    }
    // Training has more dispatches than inference, and a step more than training (the update).
    EXPECT_LT(mn["workloads"]["inference"]["dispatches"], mn["workloads"]["training"]["dispatches"]);
    EXPECT_LT(mn["workloads"]["training"]["dispatches"], mn["workloads"]["step"]["dispatches"]);

    for (const std::string mode : {"eager", "compile", "cudagraphs"}) {
        ASSERT_EQ(exit_status(python("torch_bench.py") + " --mode " + mode + " --repeat 2 --warmup 1 '" + cell +
                              "' > '" + dir.path("torch.log") + "' 2>&1"),
                  0)
            << std::ifstream(dir.path("torch.log")).rdbuf();
        expect_common_schema(read_json(cell + "/torch-" + mode + ".json"), "pytorch-" + mode, runs);
    }

    // The gates pass on the real outputs, and compare.py names each parameter's error.
    ASSERT_EQ(exit_status(python("compare.py") + " '" + cell + "' --check --json '" + dir.path("gates.json") + "' > '" +
                          dir.path("table.md") + "' 2>&1"),
              0)
        << std::ifstream(dir.path("table.md")).rdbuf();
    const json gates = read_json(dir.path("gates.json"));
    ASSERT_EQ(gates["cells"].size(), 1u);
    const json& g = gates["cells"][0]["gates"];
    EXPECT_TRUE(gates["all_gates_pass"]);
    EXPECT_TRUE(g["problems"].empty()) << g["problems"];
    EXPECT_LT(g["values"]["forward"].get<double>(), 1e-5);  // strict f32 on both sides
    EXPECT_LT(g["values"]["grad"].get<double>(), 1e-5);
    EXPECT_EQ(g["per_parameter"].size(), 6u);  // fc1..fc3, weight and bias
    // One record per workload, against the fastest of the three PyTorch configurations, with a floor.
    ASSERT_EQ(gates["records"].size(), 4u);
    for (const json& r : gates["records"]) {
        const std::string w = r["workload"];
        EXPECT_TRUE(r["notes"].empty()) << w << r["notes"];
        double fastest = r["eager_ms"];
        for (const char* mode : {"compile_ms", "cudagraphs_ms"}) fastest = std::min(fastest, r[mode].get<double>());
        EXPECT_EQ(r["best_torch_ms"].get<double>(), fastest) << w;
        EXPECT_EQ(r["best_torch_ms"], r[r["best_torch"].get<std::string>() + "_ms"]) << w;
        EXPECT_GT(r["floor_ms"].get<double>(), 0.0) << w;
        EXPECT_EQ(r["dispatches"], mn["workloads"][w]["dispatches"]) << w;
        EXPECT_TRUE(r["gates_pass"]) << w;
    }
    std::stringstream table;
    table << std::ifstream(dir.path("table.md")).rdbuf();
    EXPECT_NE(table.str().find("| mlp | strict | step |"), std::string::npos) << table.str();
    // The markdown is the JSON's: rendered again from the file, it is the same.
    ASSERT_EQ(exit_status(python("compare.py") + " --render '" + dir.path("gates.json") + "' > '" +
                          dir.path("rendered.md") + "' 2>&1"),
              0);
    std::stringstream rendered;
    rendered << std::ifstream(dir.path("rendered.md")).rdbuf();
    EXPECT_EQ(rendered.str(), table.str());

    // A PyTorch report of an earlier meganeura run of the folder is not used: its times are null, with a note.
    json stale = read_json(cell + "/torch-cudagraphs.json");
    stale["cell_started_at"] = "2000-01-01T00:00:00Z";
    std::ofstream(cell + "/torch-cudagraphs.json") << stale.dump();
    ASSERT_EQ(exit_status(python("compare.py") + " '" + cell + "' --json '" + dir.path("stale.json") + "' > /dev/null 2>&1"),
              0);
    const json stale_record = read_json(dir.path("stale.json"))["records"][0];
    EXPECT_TRUE(stale_record["cudagraphs_ms"].is_null());
    EXPECT_NE(stale_record["notes"].dump().find("earlier run"), std::string::npos) << stale_record["notes"];
    // Without CUDA graphs (PyTorch's fastest configuration) the cell's workloads are not counted.
    ASSERT_EQ(exit_status(python("compare.py") + " --render '" + dir.path("stale.json") + "' > '" +
                          dir.path("stale.md") + "' 2>&1"),
              0);
    std::stringstream stale_table;
    stale_table << std::ifstream(dir.path("stale.md")).rdbuf();
    EXPECT_NE(stale_table.str().find("in 0 of 0 workloads"), std::string::npos) << stale_table.str();
    EXPECT_NE(stale_table.str().find("Not counted: 4 workloads where a side did not run (mlp strict"),
              std::string::npos)
        << stale_table.str();
    // Two runs merged (a model's cells rerun in a second call): each cell from the last run that has it.
    ASSERT_EQ(exit_status(python("compare.py") + " --render '" + dir.path("stale.json") + "' '" +
                          dir.path("gates.json") + "' --json '" + dir.path("merged.json") + "' > /dev/null 2>&1"),
              0);
    const json merged = read_json(dir.path("merged.json"));
    EXPECT_EQ(merged["records"], gates["records"]);
    EXPECT_EQ(merged["meta"]["runs"].size(), 2u);

    // A gradient 20% off must fail the gate and be named as the worst parameter.
    ASSERT_EQ(exit_status("cd '" + kSource + "/tests/torch' && " + reference_python() + " -c \"from safetensors_io import *; "
                          "p='" + cell + "/outputs.safetensors'; d=read_safetensors(p); "
                          "d['grad.fc2.weight']=d['grad.fc2.weight']*1.2; write_safetensors(p, d)\""),
              0);
    EXPECT_EQ(exit_status(python("compare.py") + " '" + cell + "' --check --json '" + dir.path("gates.json") +
                          "' > /dev/null 2>&1"),
              1);
    const json bad = read_json(dir.path("gates.json"))["cells"][0]["gates"];
    EXPECT_FALSE(bad["pass"]);
    EXPECT_EQ(bad["worst_parameter"], "fc2.weight");
    EXPECT_FALSE(bad["passed"]["worst"]);
    EXPECT_TRUE(bad["passed"]["forward"]);
}

// bench/finetune_bench.py reads what `meganeura finetune` and `generate` print (the plan, the held-out
// loss, the progress lines, the closing timing line): on their real output, here on lavapipe, each
// number it reports is there and the table renders. Not how fast anything is: the training rate may
// be too coarse to time on lavapipe, which the report says.
TEST(Bench, FinetuneBenchReadsTheCommandsOutput) {
    TempDir dir("finetune-bench");
    const std::string work = dir.path("work"), binary = cli_binary();
    ASSERT_EQ(exit_status(python("finetune_bench.py") + " prepare '" + work + "' --size tiny --text-kb 8"), 0);
    const std::string model = " -m '" + work + "/model'";
    ASSERT_EQ(exit_status(binary + " finetune" + model + " --data '" + work + "/data.txt' --out '" + work + "/mn-lora' " +
                          "--lora-rank 4 --steps 12 --batch 2 --seq 16 > '" + work + "/mn-lora.log' 2>&1"), 0);
    ASSERT_EQ(exit_status(binary + " generate" + model + " --adapter '" + work + "/mn-lora' --prompt \"$(cat '" + work +
                          "/prompt.txt')\" --max-new 8 --ignore-eos > '" + work + "/mn-generate-adapter-1.log' 2>&1"), 0);
    ASSERT_EQ(exit_status(python("finetune_bench.py") + " report '" + work + "' --out '" + work + "/out' --warmup 2 " +
                          "--meta lora_rank=4 > /dev/null"), 0);
    const json r = read_json(work + "/out/finetune.json");
    const json& lora = r["meganeura"]["lora"];
    EXPECT_EQ(lora["steps"], 12) << lora;
    EXPECT_EQ(lora["batch"], 2) << lora;
    EXPECT_EQ(lora["seq"], 16) << lora;
    EXPECT_GT(lora["trainable_parameters"].get<int64_t>(), 0) << lora;
    EXPECT_LT(lora["trainable_parameters"].get<int64_t>(), lora["parameters"].get<int64_t>()) << lora;
    EXPECT_GT(lora["held_out_loss_step0"].get<double>(), 0) << lora;
    if (lora.contains("tokens_per_s")) EXPECT_GT(lora["tokens_per_s"].get<double>(), 0) << lora;
    else EXPECT_NE(lora["error"].get<std::string>().find("too slow to time"), std::string::npos) << lora;
    const json& gen = r["meganeura"]["generate"]["adapter"];
    EXPECT_EQ(gen["generated"], 8) << gen;
    EXPECT_GT(gen["prompt_tokens"].get<int64_t>(), 0) << gen;
    EXPECT_GT(gen["decode_tokens_per_s"].get<double>(), 0) << gen;
    EXPECT_EQ(r["meganeura"]["generate"]["base"]["error"], "not run");
    std::ifstream md(work + "/out/finetune.md");
    EXPECT_TRUE(md.good());
}

// The outputs a report names as holding NaN or infinity (non_finite_outputs; `meganeura bench` exits 5 on them): each
// f32 tensor with a NaN, +inf or -inf, with its count, in name order; finite ones and integer tensors are not named.
TEST(Bench, NamesTheOutputsHoldingNanOrInfinity) {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    io::TensorMap outputs;
    outputs["loss"] = io::TensorData::from_f32({}, {2.5f});
    outputs["grad.b"] = io::TensorData::from_f32({2, 2}, {1, inf, -inf, 0});
    outputs["grad.a"] = io::TensorData::from_f32({3}, {nan, 1e30f, -0.0f});
    outputs["ids"] = io::TensorData::from_i32({2}, {-1, 7});
    EXPECT_EQ(bench::non_finite_tensors(outputs), (std::vector<std::string>{"grad.a: 1 of 3", "grad.b: 2 of 4"}));
    outputs.erase("grad.a");
    outputs.erase("grad.b");
    EXPECT_TRUE(bench::non_finite_tensors(outputs).empty());
}

// The floor's counts on graphs small enough to count by hand (bench/floor.hpp).
TEST(Bench, FloorCountsProductsAndBytes) {
    Graph g;
    const Tensor x = g.input("x", {4, 8});
    const Tensor w = g.parameter("w", {16, 8});
    const Tensor loss = g.mean(g.relu(g.linear(x, w)));
    g.output("loss", loss);
    const bench::Floor forward = bench::count_floor(g, false, false);
    EXPECT_EQ(forward.product_flops, 2.0 * 4 * 16 * 8);
    EXPECT_EQ(forward.weight_bytes, 16u * 8 * 4);
    EXPECT_EQ(forward.input_bytes, 4u * 8 * 4);
    EXPECT_EQ(forward.output_bytes, 4u);
    EXPECT_EQ(forward.activation_bytes, 0u);

    (void)grad(loss, {w});  // d w = d yᵀ · x (no d x: x is an input); relu's gradient reads y
    const bench::Floor step = bench::count_floor(g, true, true);
    EXPECT_EQ(step.product_flops, 2 * forward.product_flops);
    EXPECT_EQ(step.output_bytes, 4u + step.weight_bytes);       // the loss and d w
    EXPECT_EQ(step.activation_bytes, 2u * 4 * 16 * 4);            // y [4, 16], written and read again
    EXPECT_EQ(step.optimizer_bytes, 6 * step.weight_bytes);

    // Causal attention over 4 keys: the query rows see 1, 2, 3 and 4 of them; 2 heads of dim 8.
    Graph a;
    const Tensor q = a.input("q", {1, 2, 4, 8});
    a.output("out", a.attention(q, q, q, {.causal = true}));
    EXPECT_EQ(bench::count_floor(a, false, false).product_flops, 4.0 * (2 * 10) * 8);
}

TEST(Bench, BadOptionsAreOneLineErrors) {
    const TempDir dir("bench-errors");
    const std::string log = dir.path("log");
    auto run = [&](const std::string& args) {
        return exit_status(cli_binary() + " bench " + args + " --out-dir '" + dir.path("out") + "' > '" +
                           log + "' 2>&1");
    };
    auto output = [&] {
        std::stringstream s;
        s << std::ifstream(log).rdbuf();
        return s.str();
    };
    EXPECT_EQ(run("--model nosuch --size tiny"), 1);
    EXPECT_NE(output().find("unknown model 'nosuch'; known: "), std::string::npos) << output();
    EXPECT_EQ(run("--model mlp --precision medium"), 1);
    EXPECT_NE(output().find("option --precision is 'medium', expected one of strict, fast"), std::string::npos) << output();
    EXPECT_EQ(run("--model mlp --size huge"), 1);
    EXPECT_NE(output().find("option --size is 'huge', expected one of full, tiny"), std::string::npos) << output();
    EXPECT_EQ(run("--model mlp --repeat 0"), 1);
    EXPECT_NE(output().find("option --repeat is 0, expected from 1 to 2147483647"), std::string::npos) << output();
}

}  // namespace
}  // namespace mn::test
