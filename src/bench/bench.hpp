#pragma once
// The benchmark harness behind `meganeura bench`: one registered model, four workloads, timed the
// same way PyTorch is timed by bench/torch_bench.py, so bench/compare.py can put them side by side.
//
//   inference  forward + loss on the full benchmark input (example_inputs, latency = false)
//   latency    the same on the minimal input (latency = true: one token, batch 1, ...)
//   training   forward + loss + backward (every parameter's gradient), no update
//   step       a full AdamW step (Session::step: forward + backward + update, one submit)
//
// Each workload is warmed up, then run `repeat` times: wall time around the whole submit-and-wait,
// and, where the device has timestamp queries, GPU time as the sum of the per-dispatch timestamps
// (a second compile of the same graph with CompileOptions::profile, so the timed runs carry no
// timestamp writes). Outputs and gradients stay on the device during timed runs, as in a framework.
//
// The harness writes what it used into the output folder, so the PyTorch side runs on identical
// values and the correctness gates compare like with like:
//   weights.safetensors          every parameter (Session::save before any step)
//   inputs.safetensors           the full input; inputs_latency.safetensors the minimal one
//   outputs.safetensors          "output" (inference), "loss" and "grad.<parameter>" (training)
// Outputs holding NaN or infinity are named in the report (non_finite_outputs): a time measured on them
// is a broken kernel's, whatever it is.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.hpp"
#include "meganeura/session.hpp"

namespace mn::bench {

struct BenchOptions {
    std::string model;
    std::string size = "full";  // "full" (the benchmark) or "tiny"
    Precision precision = Precision::Strict;
    std::string out_dir;        // where the weights, inputs and outputs go (created)
    int repeat = 20;            // timed runs per workload
    int warmup = 3;             // untimed runs before them
    uint64_t seed = 0;          // parameter initialization and example inputs
    bool compile_only = false;  // only the compile times: no workloads, nothing written but the inputs
};

// Runs every workload and returns the report (its schema is described in bench/README.md).
// Throws mn::Error on bad options or an unknown model.
nlohmann::json run_benchmark(const BenchOptions& options);

// A one-screen human summary of a report.
std::string summarize(const nlohmann::json& report);

// The names of the f32 tensors of `outputs` that hold a NaN or an infinity, with how many, in name order
// ("grad.conv1.weight: 9408 of 9408").
std::vector<std::string> non_finite_tensors(const io::TensorMap& outputs);

}  // namespace mn::bench
