#pragma once
// Pieces the transformer models share: Hugging Face-style linears, head split/merge around
// Graph::attention, the SwiGLU MLP, and reading a Hugging Face config.json.
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "models/registry.hpp"

namespace mn::models {

// A [out, in] linear weight (and optional [out] bias) named `<name>.weight` / `<name>.bias`,
// initialized like Hugging Face's _init_weights (normal, std 0.02; bias zeros).
Tensor linear(Graph& g, Tensor x, const std::string& name, int64_t in, int64_t out, bool bias = false);
// A norm weight of ones (and a bias of zeros), named `<name>.weight` / `<name>.bias`.
Tensor norm_weight(Graph& g, const std::string& name, int64_t dim);
Tensor norm_bias(Graph& g, const std::string& name, int64_t dim);

// [B, T, heads * head_dim] -> [B, heads, T, head_dim] and back.
Tensor split_heads(Graph& g, Tensor x, int64_t heads, int64_t head_dim);
Tensor merge_heads(Graph& g, Tensor x);

// Llama's MLP: down(silu(gate(x)) * up(x)), under `<prefix>.{gate,up,down}_proj`.
Tensor swiglu_mlp(Graph& g, Tensor x, const std::string& prefix, int64_t hidden, int64_t ffn);

// A Hugging Face config.json, read field by field with validation: every value is checked before a
// model sees it, and a wrong one is an mn::Error naming the file, the field and the value
// ("config c.json: hidden_size is 64.7, expected an integer from 1 to 2147483647"). A missing or
// null field takes the caller's default.
class ConfigJson {
public:
    explicit ConfigJson(const std::string& path);  // an mn::Error when it cannot be read or parsed

    bool has(const char* key) const;  // present and not null
    // An integer from 1 to 2^31 - 1 (tensor dimensions are int32 on the device).
    int64_t count(const char* key, int64_t fallback) const;
    double positive(const char* key, double fallback) const;  // a finite number above 0
    bool boolean(const char* key, bool fallback) const;
    // An error naming the file and `what` (a field and its value, or a relation between fields).
    [[noreturn]] void fail(const std::string& what) const;
    std::string value_of(const char* key) const;  // the field's JSON text, for messages

private:
    std::string path_;
    std::shared_ptr<const nlohmann::json> json_;
};

// An input's shape: the caller's, checked against `pattern` (-1: any size), or `fallback`.
Shape checked_input_shape(const ModelRequest& r, const std::string& model, const std::string& name, Shape fallback,
                          const Shape& pattern);

}  // namespace mn::models
