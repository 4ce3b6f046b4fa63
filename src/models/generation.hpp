#pragma once
// Text generation with a causal LM: a prefill program writes the prompt's keys and values into the
// KV cache, a one-token decode program (same builder, same weights) extends it. Both live on one
// device; the cache and the weights move from one to the other by device copies, never through the
// host. Sampling follows transformers' order: temperature, then top-k, then top-p.
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "meganeura/session.hpp"
#include "models/smollm2.hpp"

namespace mn::models {

struct SamplingOptions {
    double temperature = 0;  // 0: greedy (the largest logit, the first one on ties)
    int64_t top_k = 0;       // 0: no limit
    double top_p = 1;        // the smallest set of likeliest tokens whose probability reaches top_p
    uint64_t seed = 0;
};

class Sampler {
public:
    explicit Sampler(const SamplingOptions& o) : o_(o), rng_(o.seed) {}
    int32_t next(const float* logits, int64_t vocab);

private:
    SamplingOptions o_;
    std::mt19937_64 rng_;
};

class Generator {
public:
    // Compiles both programs for a prompt of `prompt_len` tokens and a cache of `cache_len` positions
    // in `precision` and loads `weights` (an mn::Error before compiling when the sizes do not fit), then,
    // when c.lora is on, the adapter's tensors (every one of c.lora's, by graph parameter name).
    Generator(const Device& device, const LlamaConfig& c, int64_t prompt_len, int64_t cache_len,
              const std::vector<std::string>& weights, const io::TensorMap& adapter = {},
              Precision precision = Precision::Strict);
    // The logits [vocab] after the whole prompt (prompt_len tokens).
    std::vector<float> prefill(const std::vector<int32_t>& prompt);
    // The logits after `token` at `position` (the prompt's length, then one more each call), valid until the next call:
    // read into the same memory each step (a step of SmolLM2-135M is about a millisecond; allocating and copying its
    // 192 KB of logits twice over cost the host tens of microseconds of it).
    std::span<const float> decode(int32_t token, int64_t position);

private:
    LlamaConfig c_;
    int64_t prompt_len_;
    BuiltModel prefill_model_, decode_model_;
    Session prefill_, decode_;
    std::vector<float> logits_;  // decode's
};

}  // namespace mn::models
