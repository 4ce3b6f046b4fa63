#pragma once
// Every model meganeura builds by name. `meganeura forward`, `meganeura bench` and the model tests
// all go through this table, so a model added here is reachable from each of them.
//
// A builder reads its configuration (a size's published defaults, or a Hugging Face config.json)
// and the shapes of the inputs the caller holds, and returns a graph whose parameters carry the
// Hugging Face / torchvision names, so real checkpoints load by name.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.hpp"
#include "meganeura/graph.hpp"

namespace mn::models {

struct ModelRequest {
    std::string size = "tiny";         // "tiny" (tests) or "full" (the published configuration)
    std::string config_path;           // a Hugging Face config.json; overrides size's defaults
    std::map<std::string, Shape> input_shapes;  // by input name; missing ones take the benchmark shape
};

// The graph lives on the heap so that the Tensor handles (which point at it) survive moves.
struct BuiltModel {
    std::unique_ptr<Graph> graph = std::make_unique<Graph>();
    std::vector<std::string> inputs;  // every input the graph reads, by name
    std::string output_name;          // "logits" or "output"; also registered with graph.output
    Tensor output;
    Tensor loss;                      // float scalar, registered as output "loss"
};

struct ModelEntry {
    std::string name;
    std::string description;  // one line, with the input names
    BuiltModel (*build)(const ModelRequest&);
    // Inputs for a benchmark or a test: the full benchmark input, or with `latency` the minimal one
    // (one token, batch 1, ...). Values are random but valid (token ids below the vocabulary size).
    io::TensorMap (*example_inputs)(const ModelRequest&, bool latency, uint64_t seed);
};

const std::vector<ModelEntry>& model_table();
// The entry named `name`, or an mn::Error listing the known names.
const ModelEntry& find_model(std::string_view name);

// The shape of input `name`: the caller's, or `fallback` when the caller has none.
Shape input_shape(const ModelRequest& r, const std::string& name, Shape fallback);

// Random example data for example_inputs: uniform floats in [lo, hi), or i32 ids in [0, count).
io::TensorData random_floats(Shape shape, double lo, double hi, uint64_t seed);
io::TensorData random_ids(Shape shape, int64_t count, uint64_t seed);

}  // namespace mn::models
