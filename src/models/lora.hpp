#pragma once
// LoRA adapters (Hu et al. 2021, as PEFT's LoraConfig builds them): a target linear y = W x + b becomes
// y = W x + b + (alpha / r) * B (A x), with A [r, in] drawn like PEFT's (kaiming-uniform, a = sqrt 5:
// uniform in +-1/sqrt(in)) and B [out, r] zero, so training starts from the base model exactly. The
// adapter's parameters are named <module>.lora_A.weight and <module>.lora_B.weight, PEFT's names
// under its "base_model.model." prefix.
#include <string>
#include <vector>

#include "meganeura/graph.hpp"

namespace mn::models {

struct LoraConfig {
    int64_t rank = 0;  // 0: no adapter
    double alpha = 16;
    std::vector<std::string> targets = {"q_proj", "k_proj", "v_proj", "o_proj"};

    bool on() const { return rank > 0; }
    double scale() const { return alpha / static_cast<double>(rank); }
    // Whether the module named `name` (e.g. "model.layers.0.self_attn.q_proj") takes an adapter: its
    // last component is a target.
    bool applies(const std::string& name) const;
};

// x [..., in] through the adapter of module `name`: (alpha / r) * B (A x), [..., out].
Tensor lora_delta(Graph& g, Tensor x, const std::string& name, int64_t in, int64_t out, const LoraConfig& lora);

bool is_lora_parameter(const std::string& name);
// w [out, in] += scale * b [out, r] a [r, in], each sum over r in double (PEFT's merge: what a merged model folder
// holds, and what generate runs on).
void merge_lora(std::vector<float>& w, const std::vector<float>& a, const std::vector<float>& b, int64_t r, double scale);
// requires_grad false for every parameter but the adapters' (a LoRA fine-tune).
void freeze_all_but_lora(Graph& g);

}  // namespace mn::models
