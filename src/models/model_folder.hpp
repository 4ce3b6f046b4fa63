#pragma once
// A Hugging Face model folder, as `meganeura <command> -m DIR` takes it: config.json (its model_type
// picks the builder), the weights (model.safetensors, or the shards model.safetensors.index.json
// lists), tokenizer.json when there is one, and generation_config.json's end-of-sequence ids and
// sampling defaults. Everything is checked when the folder is opened, so a missing shard or a
// config the builder refuses is an error before anything is compiled.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mn::models {

// generation_config.json, with transformers' defaults for what it leaves out; the end-of-sequence
// ids fall back to config.json's eos_token_id.
struct GenerationDefaults {
    std::vector<int64_t> eos_token_ids;
    bool do_sample = false;
    double temperature = 1.0, top_p = 1.0;
    int64_t top_k = 50;  // 0: no limit
    std::optional<int64_t> max_new_tokens;
};

struct ModelFolder {
    std::string dir;
    std::string model;                 // the registry entry config.json's model_type builds ("smollm2")
    std::string config;                // config.json
    std::vector<std::string> weights;  // model.safetensors, or every shard of the index
    std::string tokenizer;             // tokenizer.json; empty when the folder has none
    GenerationDefaults generation;
};

bool is_directory(const std::string& path);
// Reads and checks the folder; an mn::Error names the file at fault.
ModelFolder open_model_folder(const std::string& dir);

}  // namespace mn::models
