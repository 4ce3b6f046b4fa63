#pragma once
// SmolLM2 (a Llama): embeddings, pre-norm decoder layers with grouped-query causal attention and
// RoPE, a SwiGLU MLP, RMSNorm, and (tied by default) the embedding matrix as the LM head.
#include <string>

#include "models/registry.hpp"

namespace mn::models {

struct LlamaConfig {
    int64_t hidden = 576, layers = 30, heads = 9, kv_heads = 3, head_dim = 64, ffn = 1536, vocab = 49152;
    double rope_theta = 100000, rms_eps = 1e-5;
    bool tied_embeddings = true;
    int64_t max_positions = 8192;

    static LlamaConfig smollm2_135m() { return {}; }
    static LlamaConfig tiny();
    // A Hugging Face config.json (LlamaConfig keys; unknown keys ignored, missing ones keep the
    // SmolLM2-135M value).
    static LlamaConfig from_json(const std::string& path);
    // From a ModelRequest: its config_path, else its size ("tiny" or "full").
    static LlamaConfig from_request(const ModelRequest& r);
};

// The KV-cache form of the model: `tokens` new tokens at a run-time position. Inputs:
// "input_ids" i32 [batch, tokens] and "position" i32 scalar (the first new token's position);
// state "cache.<layer>.k" / "cache.<layer>.v" [batch, kv_heads, cache_len, head_dim] (zeros at
// first) is updated in place; output "logits" [batch, tokens, vocab]. The same builder serves the
// prefill (tokens = prompt length, position 0) and the decode steps (tokens = 1).
BuiltModel build_llama_cached(const LlamaConfig& c, int64_t batch, int64_t tokens, int64_t cache_len);
std::string cache_name(int64_t layer, const char* which);  // "cache.<layer>.k" / ".v"

// Registry entry "smollm2": inputs input_ids [B, T] and labels [B, T] (i32; default [1, 128]);
// output logits [B, T, vocab]; loss = cross-entropy of logits against labels (already shifted).
BuiltModel build_smollm2(const ModelRequest& r);
io::TensorMap smollm2_inputs(const ModelRequest& r, bool latency, uint64_t seed);

}  // namespace mn::models
