#pragma once
// SmolLM2 (a Llama): embeddings, pre-norm decoder layers with grouped-query causal attention and
// RoPE, a SwiGLU MLP, RMSNorm, and (tied by default) the embedding matrix as the LM head. The same
// builder takes Hugging Face's Llama and Qwen2 configs (Qwen2: biases on q, k and v).
#include <optional>
#include <string>
#include <vector>

#include "models/lora.hpp"
#include "models/registry.hpp"

namespace mn::models {

struct LlamaConfig {
    int64_t hidden = 576, layers = 30, heads = 9, kv_heads = 3, head_dim = 64, ffn = 1536, vocab = 49152;
    double rope_theta = 100000, rms_eps = 1e-5;
    bool tied_embeddings = true;
    int64_t max_positions = 8192;
    std::string model_type = "llama";  // "llama" or "qwen2"
    bool qkv_bias = false, o_bias = false, mlp_bias = false;  // Llama's attention_bias / mlp_bias; Qwen2: qkv
    LoraConfig lora;  // adapters on top of the model (fine-tuning), not part of config.json
    // config.json's rope_scaling: "linear" (positions / factor) or "llama3" (Llama 3.1's frequency bands)
    struct RopeScaling {
        std::string type;
        double factor = 1, low_freq_factor = 1, high_freq_factor = 4;
        int64_t original_max_positions = 8192;
    };
    std::optional<RopeScaling> rope_scaling;
    // RoPE's inverse frequencies [head_dim / 2], in f32 as Hugging Face computes them, scaled.
    std::vector<double> rope_inv_freq() const;

    static LlamaConfig smollm2_135m() { return {}; }
    static LlamaConfig tiny();
    // A Hugging Face config.json of model_type "llama" or "qwen2" (llama_config.cpp). Missing fields
    // keep the SmolLM2-135M value (Qwen2's q/k/v biases are always on); a field the builder does not
    // implement (yarn rope scaling, a sliding window, another activation, ...) is an error naming it.
    static LlamaConfig from_json(const std::string& path);
    // From a ModelRequest: its config_path, else its size ("tiny" or "full").
    static LlamaConfig from_request(const ModelRequest& r);
};

// The KV-cache form of the model: `tokens` new tokens at a run-time position. Inputs:
// "input_ids" i32 [batch, tokens] and "position" i32 scalar (the first new token's position);
// state "cache.<layer>.k" / "cache.<layer>.v" [batch, kv_heads, cache_len, head_dim] (zeros at
// first) is updated in place; output "logits" [batch, 1, vocab], the last token's (all that
// generation reads). The same builder serves the prefill (tokens = prompt length, position 0) and
// the decode steps (tokens = 1).
BuiltModel build_llama_cached(const LlamaConfig& c, int64_t batch, int64_t tokens, int64_t cache_len);
std::string cache_name(int64_t layer, const char* which);  // "cache.<layer>.k" / ".v"

// Registry entry "smollm2": inputs input_ids [B, T] and labels [B, T] (i32; default [1, 128]);
// output logits [B, T, vocab]. The loss is Hugging Face's causal-LM loss: labels are shifted inside
// (the logits at t predict labels[t + 1]; labels = input_ids is the usual call), -100 is ignored and
// the mean is over the counted labels. A caller holding labels already aligned with the logits
// passes them as "shifted_labels" instead (the loss of logits[t] against shifted_labels[t]).
BuiltModel build_smollm2(const ModelRequest& r);
// The same for a configuration in hand, input_ids [B, T] (labels "shifted_labels" with `shifted`).
BuiltModel build_causal_lm(const LlamaConfig& c, const Shape& ids_shape, bool shifted = false);
io::TensorMap smollm2_inputs(const ModelRequest& r, bool latency, uint64_t seed);

}  // namespace mn::models
