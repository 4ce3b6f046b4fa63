#include "bench/bench.hpp"

#include <stdlib.h>  // mkdtemp, setenv, unsetenv

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "bench/floor.hpp"
#include "codegen/shader_compiler.hpp"
#include "meganeura/autodiff.hpp"
#include "meganeura/session.hpp"
#include "models/runner.hpp"
#include "runtime/runtime.hpp"

namespace mn::bench {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kSchema = "meganeura-bench/1";
constexpr size_t kTopKernels = 10;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median, minimum and 90th percentile (nearest rank) of the timed runs.
json summary(const std::vector<double>& v) {
    std::vector<double> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    const size_t p90 = std::min(sorted.size() - 1, static_cast<size_t>(std::ceil(0.9 * double(sorted.size()))) - 1);
    return {{"median", median_of(v)}, {"min", sorted.front()}, {"p90", sorted[p90]}, {"runs", v.size()}};
}

enum class Mode { Inference, Training, Step };

struct Workload {
    const char* name;
    Mode mode;
    bool latency;  // the minimal input instead of the full one
};

constexpr Workload kWorkloads[] = {{"inference", Mode::Inference, false},
                                   {"latency", Mode::Inference, true},
                                   {"training", Mode::Training, false},
                                   {"step", Mode::Step, false}};

const char* precision_name(Precision p) { return p == Precision::Strict ? "strict" : "fast"; }

// Builds and compiles the model for one mode. Outputs stay on the device (a training step reads back
// only its loss), so timed runs copy nothing to the host. `loads_weights`: every parameter is loaded next
// (CompileOptions::skip_init); the compile times are of a compile that initializes them.
models::PreparedModel prepare(const Device& device, const BenchOptions& o, const models::ModelRequest& r, Mode mode,
                              bool profile, bool loads_weights = false) {
    CompileOptions c{.precision = o.precision, .profile = profile, .read_back = std::vector<std::string>{},
                     .seed = o.seed};
    if (loads_weights) c.skip_init = CompileOptions::every_parameter;
    if (mode != Mode::Step) return models::prepare_model(device, o.model, r, mode == Mode::Training, c);
    models::BuiltModel m = models::find_model(o.model).build(r);
    c.loss = m.loss;
    c.optimizer = AdamW{};
    c.read_back = std::vector<std::string>{"loss"};  // Session::step returns it
    Session s = compile(*m.graph, device, c);
    return {std::move(m), {}, std::move(s)};
}

// One run: a submit and a wait (a step also writes its scalars and reads the loss, as a training loop does).
void run_once(Session& s, Mode mode) {
    if (mode == Mode::Step) {
        (void)s.step();
    } else {
        s.run();
    }
}

// At least o.warmup runs and kWarmupSeconds of them: an idle GPU runs at a low clock for a while (an
// H200 measured up to 4x slower on small kernels after three warm-up runs).
constexpr double kWarmupSeconds = 0.3;
void warm_up(Session& s, Mode mode, const BenchOptions& o) {
    const auto t0 = Clock::now();
    for (int i = 0; i < o.warmup || ms_since(t0) < kWarmupSeconds * 1e3; ++i) run_once(s, mode);
}

// Validation-layer messages of a context about to close, kept for the report.
void collect_validation(rt::Context& ctx, json& messages) {
    for (std::string& m : ctx.take_validation_messages()) messages.push_back(std::move(m));
}

// MEGANEURA_CACHE_DIR pointed at a new empty folder while this object lives; the folder is removed after.
class FreshCacheFolder {
public:
    FreshCacheFolder() {
        std::string dir = (fs::temp_directory_path() / "meganeura-bench-XXXXXX").string();
        if (!mkdtemp(dir.data())) throw Error("bench: cannot create a temporary cache folder under " +
                                              fs::temp_directory_path().string());
        dir_ = dir;
        if (const char* old = std::getenv("MEGANEURA_CACHE_DIR")) old_ = old;
        setenv("MEGANEURA_CACHE_DIR", dir_.c_str(), 1);
    }
    ~FreshCacheFolder() {
        if (old_) {
            setenv("MEGANEURA_CACHE_DIR", old_->c_str(), 1);
        } else {
            unsetenv("MEGANEURA_CACHE_DIR");
        }
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    FreshCacheFolder(const FreshCacheFolder&) = delete;
    FreshCacheFolder& operator=(const FreshCacheFolder&) = delete;

private:
    std::string dir_;
    std::optional<std::string> old_;
};

// Compile time (build + autodiff + compile) cold, then warm. Cold: an empty cache folder, no SPIR-V in
// memory and a new device, so every shader goes through glslang and every pipeline through the
// driver. Warm: what the next process sees, the SPIR-V and pipeline caches the cold compile left on
// disk (a device saves its pipeline cache when it closes), again with nothing in memory.
// Each also says where its shaders came from (glslang, the disk cache, memory), so a warm compile
// that recompiled anything shows.
json compile_times(const BenchOptions& o, const models::ModelRequest& r, Mode mode, json& messages) {
    FreshCacheFolder cache;
    json result;
    for (const char* kind : {"cold", "warm"}) {
        codegen::clear_shader_memory_cache();
        const codegen::ShaderCacheStats before = codegen::shader_cache_stats();
        const Device device = Device::open();
        {
            const auto t0 = Clock::now();
            const models::PreparedModel p = prepare(device, o, r, mode, false);
            result[std::string(kind) + "_ms"] = ms_since(t0);
            json passes = json::array();
            for (const auto& [pass, ms] : p.session.stats().pass_ms) passes.push_back({pass, ms});
            result[std::string(kind) + "_passes"] = std::move(passes);
            result["pipelines"] = p.session.stats().pipelines;
            result["dispatches"] = p.session.stats().dispatches;  // what --compile-only can say of the program
            result["barriers"] = p.session.stats().barriers;
        }
        const codegen::ShaderCacheStats after = codegen::shader_cache_stats();
        result[std::string(kind) + "_shaders"] = {{"compiled", after.compiled - before.compiled},
                                                  {"disk_hits", after.disk_hits - before.disk_hits},
                                                  {"memory_hits", after.memory_hits - before.memory_hits}};
        collect_validation(*device.context(), messages);
    }
    return result;
}

void load_and_feed(models::PreparedModel& p, const std::string& weights, const io::TensorMap& inputs) {
    p.session.load(weights);
    models::set_inputs(p.session, p.model, inputs);
}

// A Chrome / Perfetto trace (the JSON trace event format; ui.perfetto.dev or chrome://tracing open
// it) of one run's dispatches, each with its median time, laid end to end in dispatch order. A
// dispatch's time runs from the previous timestamp to its own, so the barrier before it is included
// and dispatches that overlapped on the GPU are shown one after the other.
json chrome_trace(const std::vector<std::string>& labels, const std::vector<double>& ms) {
    json events = json::array();
    double at_us = 0;
    for (size_t d = 0; d < labels.size(); ++d) {
        events.push_back({{"name", labels[d]}, {"cat", "dispatch"}, {"ph", "X"}, {"ts", at_us}, {"dur", ms[d] * 1e3},
                          {"pid", 1}, {"tid", 1}, {"args", {{"index", d}}}});
        at_us += ms[d] * 1e3;
    }
    return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

// GPU time per run (the sum of the per-dispatch timestamps) and the kernels that take it: by label
// (summed medians, dispatch count) and the single dispatches (index in dispatch order, as
// MEGANEURA_DEBUG=1 lists them). The median run's dispatches also go to `trace_path` (chrome_trace).
json gpu_times(Session& s, Mode mode, const BenchOptions& o, const fs::path& trace_path) {
    warm_up(s, mode, o);
    std::vector<double> totals;
    std::vector<std::string> labels;
    std::vector<std::vector<double>> per_dispatch;  // [dispatch][run]
    for (int i = 0; i < o.repeat; ++i) {
        run_once(s, mode);
        const auto times = s.profile();
        if (labels.empty()) {
            for (const auto& [label, ms] : times) labels.push_back(label);
            per_dispatch.resize(times.size());
        }
        double total = 0;
        for (size_t d = 0; d < times.size(); ++d) {
            total += times[d].second;
            per_dispatch[d].push_back(times[d].second);
        }
        totals.push_back(total);
    }
    std::map<std::string, std::pair<double, int>> by_label;
    std::vector<std::pair<double, size_t>> dispatches;
    std::vector<double> medians;
    for (size_t d = 0; d < labels.size(); ++d) {
        const double ms = median_of(per_dispatch[d]);
        medians.push_back(ms);
        by_label[labels[d]].first += ms;
        by_label[labels[d]].second += 1;
        dispatches.emplace_back(ms, d);
    }
    std::vector<std::pair<double, std::string>> kernels;
    for (const auto& [label, total] : by_label) kernels.emplace_back(total.first, label);
    std::sort(kernels.rbegin(), kernels.rend());
    std::sort(dispatches.begin(), dispatches.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    json top_kernels = json::array(), top_dispatches = json::array();
    for (size_t i = 0; i < std::min(kTopKernels, kernels.size()); ++i) {
        top_kernels.push_back({{"label", kernels[i].second}, {"ms", kernels[i].first},
                               {"dispatches", by_label[kernels[i].second].second}});
    }
    for (size_t i = 0; i < std::min(kTopKernels, dispatches.size()); ++i) {
        const size_t d = dispatches[i].second;
        top_dispatches.push_back({{"index", d}, {"label", labels[d]}, {"ms", dispatches[i].first}});
    }
    std::ofstream trace(trace_path);
    trace << chrome_trace(labels, medians).dump() << "\n";
    if (!trace) throw Error("bench: cannot write " + trace_path.string());
    return {{"gpu_ms", summary(totals)}, {"top_kernels", top_kernels}, {"top_dispatches", top_dispatches},
            {"trace", trace_path.filename().string()}};
}

// The workload's floor (bench/floor.hpp), counted on the model built for it, gradients appended for
// training and the step.
json floor_of(const BenchOptions& o, const models::ModelRequest& r, Mode mode) {
    models::BuiltModel m = models::find_model(o.model).build(r);
    const bool backward = mode != Mode::Inference;
    if (backward) {
        std::vector<Tensor> params;
        for (int32_t id = 0; id < static_cast<int32_t>(m.graph->nodes().size()); ++id) {
            if (m.graph->node(id).op == Op::Parameter) params.push_back(m.graph->handle(id));
        }
        (void)grad(m.loss, params);
    }
    return to_json(count_floor(*m.graph, backward, mode == Mode::Step));
}

// When the report was started, UTC (ISO 8601): the PyTorch reports name it, so compare.py can tell a
// report of this run from one an earlier run left in the same folder.
std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char s[32];
    std::strftime(s, sizeof s, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return s;
}

// One workload: wall time and session statistics from an unprofiled compile, then GPU time from a
// profiled one. Keeps the inference output and the training loss and gradients in `outputs`.
json measure(const Device& device, const BenchOptions& o, const Workload& w, const io::TensorMap& inputs,
             const std::string& weights, io::TensorMap& outputs) {
    rt::Context& ctx = *device.context();
    const models::ModelRequest r{.size = o.size, .input_shapes = models::shapes_of(inputs)};
    json result;
    {
        ctx.reset_peak_memory();
        models::PreparedModel p = prepare(device, o, r, w.mode, false, true);
        load_and_feed(p, weights, inputs);
        warm_up(p.session, w.mode, o);
        std::vector<double> wall;
        for (int i = 0; i < o.repeat; ++i) {
            const auto t0 = Clock::now();
            run_once(p.session, w.mode);
            wall.push_back(ms_since(t0));
        }
        const SessionStats& st = p.session.stats();
        result = {{"wall_ms", summary(wall)},
                  {"dispatches", st.dispatches},
                  {"hoisted_dispatches", st.hoisted_dispatches},
                  {"barriers", st.barriers},
                  {"pipelines", st.pipelines},
                  {"logical_bytes", st.logical_bytes},
                  {"physical_bytes", st.physical_bytes},
                  {"pinned_bytes", st.pinned_bytes},
                  {"peak_device_bytes", ctx.device_memory().peak},
                  {"input_shapes", json::object()},
                  {"floor", floor_of(o, r, w.mode)}};
        for (const auto& [name, t] : inputs) result["input_shapes"][name] = t.shape;
        if (w.mode == Mode::Inference && !w.latency) {
            outputs["output"] = io::TensorData::from_f32(p.session.shape(p.model.output_name),
                                                         p.session.get(p.model.output_name));
        }
        if (w.mode == Mode::Training) {
            for (auto& [name, t] : models::read_outputs(p)) {
                if (name != p.model.output_name) outputs[name] = std::move(t);
            }
        }
    }
    if (ctx.caps().timestamps) {
        models::PreparedModel p = prepare(device, o, r, w.mode, true, true);
        load_and_feed(p, weights, inputs);
        result.update(gpu_times(p.session, w.mode, o, fs::path(o.out_dir) / ("trace-" + std::string(w.name) + ".json")));
    } else {
        result["gpu_ms"] = nullptr;
    }
    return result;
}

std::string mib(double bytes) {
    char s[32];
    std::snprintf(s, sizeof s, "%.1f MiB", bytes / (1024.0 * 1024.0));
    return s;
}

}  // namespace

json run_benchmark(const BenchOptions& o) {
    if (o.size != "tiny" && o.size != "full") throw Error("bench: --size must be tiny or full, got '" + o.size + "'");
    if (o.repeat < 1) throw Error("bench: --repeat must be at least 1");
    if (o.warmup < 0) throw Error("bench: --warmup must not be negative");
    if (o.out_dir.empty()) throw Error("bench: an output folder is required");
    // Cold means cold for the driver too: its own shader disk cache (NVIDIA's, Mesa's) would make the
    // cold compile of a second process, or of the step after the inference, partly warm. Drivers read
    // these when they load, before the first device opens. Warm compiles use meganeura's own caches.
    setenv("__GL_SHADER_DISK_CACHE", "0", 0);
    setenv("MESA_SHADER_CACHE_DISABLE", "true", 0);
    const models::ModelEntry& entry = models::find_model(o.model);
    fs::create_directories(o.out_dir);
    const fs::path out(o.out_dir);

    const models::ModelRequest base{.size = o.size};
    const io::TensorMap full = entry.example_inputs(base, false, o.seed);
    const io::TensorMap minimal = entry.example_inputs(base, true, o.seed);
    const models::ModelRequest full_request{.size = o.size, .input_shapes = models::shapes_of(full)};
    io::write_safetensors((out / "inputs.safetensors").string(), full);
    io::write_safetensors((out / "inputs_latency.safetensors").string(), minimal);

    json report = {{"schema", kSchema},
                   {"framework", "meganeura"},
                   {"model", o.model},
                   {"size", o.size},
                   {"precision", precision_name(o.precision)},
                   {"repeat", o.repeat},
                   {"warmup", o.warmup},
                   {"seed", o.seed},
                   {"started_at", utc_now()},
                   {"binary_bytes", fs::file_size("/proc/self/exe")},
                   {"files", {{"weights", "weights.safetensors"}, {"inputs", "inputs.safetensors"},
                              {"inputs_latency", "inputs_latency.safetensors"}, {"outputs", "outputs.safetensors"}}},
                   {"notes", json::array()}};
    json messages = json::array();
    // Cold compiles first: nothing this process compiled yet can make them warm.
    report["compile"] = {{"inference", compile_times(o, full_request, Mode::Inference, messages)},
                         {"step", compile_times(o, full_request, Mode::Step, messages)}};

    const Device device = Device::open();
    report["device"] = device.name();
    if (o.compile_only) {
        collect_validation(*device.context(), messages);
        report["validation_messages"] = messages;
        return report;
    }
    const std::string weights = (out / "weights.safetensors").string();
    prepare(device, o, full_request, Mode::Inference, false).session.save(weights);

    io::TensorMap outputs;
    uint64_t peak = 0;
    for (const Workload& w : kWorkloads) {
        json result = measure(device, o, w, w.latency ? minimal : full, weights, outputs);
        peak = std::max(peak, result["peak_device_bytes"].get<uint64_t>());
        report["workloads"][w.name] = std::move(result);
    }
    report["peak_device_bytes"] = peak;
    if (!device.context()->caps().timestamps) report["notes"].push_back("no timestamp queries: GPU times are null");
    io::write_safetensors((out / "outputs.safetensors").string(), outputs);
    report["non_finite_outputs"] = non_finite_tensors(outputs);
    collect_validation(*device.context(), messages);
    report["validation_messages"] = messages;
    return report;
}

std::string summarize(const json& r) {
    std::string s;
    char line[256];
    std::snprintf(line, sizeof line, "%s (%s, %s) on %s; binary %s", r["model"].get<std::string>().c_str(),
                  r["size"].get<std::string>().c_str(), r["precision"].get<std::string>().c_str(),
                  r["device"].get<std::string>().c_str(), mib(r["binary_bytes"].get<double>()).c_str());
    s += line;
    s += r.contains("peak_device_bytes") ? ", peak device memory " + mib(r["peak_device_bytes"].get<double>()) + "\n" : "\n";
    for (const char* c : {"inference", "step"}) {
        const json& t = r["compile"][c];
        std::snprintf(line, sizeof line, "compile %-9s cold %8.1f ms, warm %8.1f ms (%d pipelines, %d dispatches, %d barriers; "
                      "%d shaders compiled cold)\n", c, t["cold_ms"].get<double>(), t["warm_ms"].get<double>(),
                      t["pipelines"].get<int>(), t.value("dispatches", 0), t.value("barriers", 0),
                      t["cold_shaders"]["compiled"].get<int>());
        s += line;
        for (const char* kind : {"cold", "warm"}) {
            s += std::string("  ") + kind + " passes:";
            for (const auto& pass : t[std::string(kind) + "_passes"]) {
                std::snprintf(line, sizeof line, " %s %.1f;", pass[0].get<std::string>().c_str(), pass[1].get<double>());
                s += line;
            }
            s += "\n";
        }
    }
    if (!r.contains("workloads")) return s;  // --compile-only
    s += "workload     wall ms median (min, p90)     GPU ms median   dispatches barriers   arena / logical   "
         "floor: product GFLOP, MB moved\n";
    for (const Workload& wl : kWorkloads) {
        const std::string name = wl.name;
        const json& w = r["workloads"][name];
        const json& wall = w["wall_ms"];
        char gpu[32] = "-";
        if (!w["gpu_ms"].is_null()) std::snprintf(gpu, sizeof gpu, "%.3f", w["gpu_ms"]["median"].get<double>());
        std::snprintf(line, sizeof line, "%-10s %10.3f (%.3f, %.3f) %15s %12zu %8zu   %s / %s   %.2f, %.1f\n",
                      name.c_str(), wall["median"].get<double>(), wall["min"].get<double>(),
                      wall["p90"].get<double>(), gpu, w["dispatches"].get<size_t>(), w["barriers"].get<size_t>(),
                      mib(w["physical_bytes"].get<double>()).c_str(), mib(w["logical_bytes"].get<double>()).c_str(),
                      w["floor"]["product_flops"].get<double>() * 1e-9, w["floor"]["bytes"].get<double>() * 1e-6);
        s += line;
    }
    if (const json& bad = r["non_finite_outputs"]; !bad.empty()) {
        s += "warning: NaN or infinity in " + std::to_string(bad.size()) + " outputs (the gates will fail):";
        for (const auto& b : bad) s += " " + b.get<std::string>() + ";";
        s += "\n";
    }
    for (const Workload& wl : kWorkloads) {
        const std::string name = wl.name;
        const json& w = r["workloads"][name];
        if (!w.contains("top_kernels")) continue;
        s += "top kernels (" + name + "):";
        for (const auto& k : w["top_kernels"]) {
            std::snprintf(line, sizeof line, " %s %.3f ms x%d;", k["label"].get<std::string>().c_str(),
                          k["ms"].get<double>(), k["dispatches"].get<int>());
            s += line;
        }
        s += "\n";
    }
    return s;
}

std::vector<std::string> non_finite_tensors(const io::TensorMap& outputs) {
    std::vector<std::string> bad;
    for (const auto& [name, t] : outputs) {
        if (t.dtype != "F32") continue;
        const std::vector<float> v = t.to_f32(name);
        const auto count = std::count_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
        if (count) bad.push_back(name + ": " + std::to_string(count) + " of " + std::to_string(v.size()));
    }
    return bad;
}

}  // namespace mn::bench
