#pragma once
// SmolVLA's action expert: a Llama-style stack over the action chunk whose even layers attend to
// the chunk itself and odd layers cross-attend to the projected VLM context (no RoPE, no mask).
#include "models/registry.hpp"

namespace mn::models {

struct SmolVlaConfig {
    int64_t hidden = 720, layers = 16, heads = 15, kv_heads = 5, head_dim = 64, ffn = 2048;
    int64_t action_dim = 32, chunk = 50, time_dim = 1440, context = 16, context_dim = 320;
    double rms_eps = 1e-5;

    static SmolVlaConfig published() { return {}; }
    static SmolVlaConfig tiny();
};

// Registry entry "smolvla": inputs actions [B, chunk, action_dim], timestep [B, 1, time_dim],
// vlm_kv [B, context, context_dim]; output [B, chunk, action_dim]; loss = mean(output^2).
BuiltModel build_smolvla(const ModelRequest& r);
io::TensorMap smolvla_inputs(const ModelRequest& r, bool latency, uint64_t seed);

}  // namespace mn::models
