// Hugging Face's LlamaConfig and Qwen2Config, as LlamaConfig: every field is either read, checked to
// hold the one value the builder implements, or listed as metadata that does not change the
// computation; anything else is refused by name.
#include "models/smollm2.hpp"

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
    j.require("rope_scaling", "null");
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

}  // namespace mn::models
