#pragma once
// Whisper's encoder (Hugging Face WhisperEncoder): two GELU conv1d layers over the log-mel frames
// (the second halves the time axis), learned positions, pre-LayerNorm transformer layers with full
// attention and a GELU MLP, and a final LayerNorm.
#include "models/registry.hpp"

namespace mn::models {

struct WhisperConfig {
    int64_t mels = 80, frames = 3000, d = 384, layers = 4, heads = 6, ffn = 1536;
    double eps = 1e-5;

    static WhisperConfig tiny_en() { return {}; }  // whisper-tiny's encoder
    static WhisperConfig tiny();                   // the test configuration
    // A Hugging Face WhisperConfig's config.json: num_mel_bins, max_source_positions (frames / 2),
    // d_model, encoder_layers, encoder_attention_heads, encoder_ffn_dim.
    static WhisperConfig from_json(const std::string& path);
};

// Registry entry "whisper": input input_features [B, mels, frames]; output the last hidden
// state [B, frames / 2, d]; loss = mean(output^2).
BuiltModel build_whisper(const ModelRequest& r);
io::TensorMap whisper_inputs(const ModelRequest& r, bool latency, uint64_t seed);

}  // namespace mn::models
