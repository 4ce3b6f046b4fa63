// Hugging Face's LlamaConfig and Qwen2Config, as LlamaConfig: every field is either read, checked to
// hold the one value the builder implements, or listed as metadata that does not change the
// computation; anything else is refused by name.
#include "models/smollm2.hpp"

#include <cmath>
#include <numbers>

#include "models/config_json.hpp"

namespace mn::models {

namespace {

// Fields that describe the checkpoint or the training run, not the computation.
const std::vector<std::string> kMetadata = {
    "architectures", "_name_or_path", "torch_dtype", "transformers_version", "use_cache", "initializer_range",
    "bos_token_id", "eos_token_id", "pad_token_id", "is_llama_config", "return_dict", "output_attentions",
    "output_hidden_states", "tokenizer_class", "_attn_implementation_autoset",
    // Qwen2: the window's layers and size, which matter only with use_sliding_window (refused below)
    "sliding_window", "max_window_layers"};

}  // namespace

LlamaConfig LlamaConfig::from_json(const std::string& path) {
    const ConfigJson j(path);
    LlamaConfig c;
    c.model_type = j.text("model_type", "");
    if (c.model_type != "llama" && c.model_type != "qwen2")
        j.fail("model_type is " + j.value_of("model_type") + "; this builder implements \"llama\" and \"qwen2\"");
    c.hidden = j.count("hidden_size", c.hidden);
    c.layers = j.count("num_hidden_layers", c.layers);
    c.heads = j.count("num_attention_heads", c.heads);
    c.kv_heads = j.count("num_key_value_heads", c.heads);
    if (!j.has("head_dim") && c.hidden % c.heads != 0)
        j.fail("hidden_size " + std::to_string(c.hidden) + " is not a multiple of num_attention_heads " +
               std::to_string(c.heads) + " (and there is no head_dim)");
    c.head_dim = j.count("head_dim", c.hidden / c.heads);
    c.ffn = j.count("intermediate_size", c.ffn);
    c.vocab = j.count("vocab_size", c.vocab);
    c.rope_theta = j.positive("rope_theta", c.rope_theta);
    c.rms_eps = j.positive("rms_norm_eps", c.rms_eps);
    c.tied_embeddings = j.boolean("tie_word_embeddings", c.tied_embeddings);
    c.max_positions = j.count("max_position_embeddings", c.max_positions);
    if (c.model_type == "qwen2") {
        c.qkv_bias = true;  // Qwen2Attention's q, k and v projections always have biases, o_proj none
        j.require("use_sliding_window", "false");
    } else {
        c.qkv_bias = c.o_bias = j.boolean("attention_bias", false);
        c.mlp_bias = j.boolean("mlp_bias", false);
        j.require("pretraining_tp", "1");
        j.require("rope_interleaved", "false");  // SmolLM2's field: Hugging Face's rotate-half pairing
    }
    j.require("hidden_act", "\"silu\"");
    if (j.has("rope_scaling")) {
        const ConfigJson s = j.object("rope_scaling");
        LlamaConfig::RopeScaling r;
        const char* type_key = s.has("rope_type") ? "rope_type" : "type";  // transformers reads either
        r.type = s.text(type_key, "");
        if (r.type != "linear" && r.type != "llama3")
            s.fail(std::string(type_key) + " is " + s.value_of(type_key) + "; only \"linear\" and \"llama3\" are implemented");
        r.factor = s.positive("factor", r.factor);
        if (r.type == "llama3") {
            r.low_freq_factor = s.positive("low_freq_factor", r.low_freq_factor);
            r.high_freq_factor = s.positive("high_freq_factor", r.high_freq_factor);
            r.original_max_positions = s.count("original_max_position_embeddings", r.original_max_positions);
            if (!(r.high_freq_factor > r.low_freq_factor)) s.fail("high_freq_factor must be above low_freq_factor");
        }
        s.refuse_unread(c.model_type, {});
        c.rope_scaling = r;
    }
    // Dropout would make training differ from Hugging Face's; inference ignores it either way.
    j.require("attention_dropout", "0");
    j.refuse_unread(c.model_type, kMetadata);

    if (c.heads % c.kv_heads != 0)
        j.fail("num_attention_heads " + std::to_string(c.heads) + " is not a multiple of num_key_value_heads " +
               std::to_string(c.kv_heads));
    if (c.head_dim % 2 != 0) j.fail("head_dim " + std::to_string(c.head_dim) + " is odd; RoPE rotates pairs");
    // The RoPE frequencies are a host-side constant of head_dim / 2 values, built with the graph,
    // before the device's memory can be checked; real models use 64 to 256.
    constexpr int64_t kMaxHeadDim = 1 << 16;
    if (c.head_dim > kMaxHeadDim)
        j.fail("head_dim " + std::to_string(c.head_dim) + " is above " + std::to_string(kMaxHeadDim) +
               (j.has("head_dim") ? "" : " (hidden_size / num_attention_heads)"));
    return c;
}

std::vector<double> LlamaConfig::rope_inv_freq() const {
    std::vector<double> f;
    for (int64_t i = 0; i < head_dim / 2; ++i) {
        const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
        f.push_back(static_cast<float>(1.0 / std::pow(rope_theta, static_cast<double>(exponent))));
    }
    if (!rope_scaling) return f;
    const RopeScaling& s = *rope_scaling;
    for (double& v : f) {
        if (s.type == "linear") {
            v = static_cast<float>(v / s.factor);
            continue;
        }
        // Llama 3.1: short wavelengths kept, long ones divided by factor, the band between blended.
        const double old_len = static_cast<double>(s.original_max_positions);
        const double wavelen = 2 * std::numbers::pi / v;
        if (wavelen < old_len / s.high_freq_factor) continue;
        if (wavelen > old_len / s.low_freq_factor) {
            v = static_cast<float>(v / s.factor);
            continue;
        }
        const double smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        v = static_cast<float>((1 - smooth) * v / s.factor + smooth * v);
    }
    return f;
}

}  // namespace mn::models
