#pragma once
// Pieces the transformer models share: Hugging Face-style linears, head split/merge around
// Graph::attention, the SwiGLU MLP, and reading a Hugging Face config.json (config_json.hpp).
#include <string>

#include "models/config_json.hpp"
#include "models/lora.hpp"
#include "models/registry.hpp"

namespace mn::models {

// A [out, in] linear weight (and optional [out] bias) named `<name>.weight` / `<name>.bias`,
// initialized like Hugging Face's _init_weights (normal, std 0.02; bias zeros), with a LoRA adapter
// when `lora` targets the module.
Tensor linear(Graph& g, Tensor x, const std::string& name, int64_t in, int64_t out, bool bias = false,
              const LoraConfig& lora = {});
// A norm weight of ones (and a bias of zeros), named `<name>.weight` / `<name>.bias`.
Tensor norm_weight(Graph& g, const std::string& name, int64_t dim);
Tensor norm_bias(Graph& g, const std::string& name, int64_t dim);

// [B, T, heads * head_dim] -> [B, heads, T, head_dim] and back.
Tensor split_heads(Graph& g, Tensor x, int64_t heads, int64_t head_dim);
Tensor merge_heads(Graph& g, Tensor x);

// Llama's MLP: down(silu(gate(x)) * up(x)), under `<prefix>.{gate,up,down}_proj` (with biases when `bias`).
Tensor swiglu_mlp(Graph& g, Tensor x, const std::string& prefix, int64_t hidden, int64_t ffn, bool bias = false,
                  const LoraConfig& lora = {});

// An input's shape: the caller's, checked against `pattern` (-1: any size), or `fallback`.
Shape checked_input_shape(const ModelRequest& r, const std::string& model, const std::string& name, Shape fallback,
                          const Shape& pattern);

}  // namespace mn::models
