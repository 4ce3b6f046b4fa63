#include "models/smollm2.hpp"

#include "models/transformer_blocks.hpp"

namespace mn::models {

LlamaConfig LlamaConfig::tiny() {
    return {.hidden = 64, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 16, .ffn = 96, .vocab = 97,
            .rope_theta = 100000, .rms_eps = 1e-5, .tied_embeddings = true, .max_positions = 256};
}

LlamaConfig LlamaConfig::from_request(const ModelRequest& r) {
    if (!r.config_path.empty()) return from_json(r.config_path);
    return r.size == "full" ? smollm2_135m() : tiny();
}

std::string cache_name(int64_t layer, const char* which) { return "cache." + std::to_string(layer) + "." + which; }

namespace {

// The decoder over token ids at `positions` [T]; with `cache` (batch, cache length, position), each
// layer's k and v are written into its cache at the run-time position and attention reads the
// whole cache, and only the last position's logits are computed: [B, 1, vocab], all that
// generation reads (the prompt's other rows would be a product and a read-back for nothing: 85 MB
// for SmolLM2 after a 432-token prompt). Without, the logits [B, T, vocab].
struct CacheSpec {
    int64_t length;
    Tensor position;
};

Tensor llama(Graph& g, const LlamaConfig& c, Tensor ids, Tensor positions, const std::optional<CacheSpec>& cache) {
    const Tensor embed = g.parameter("model.embed_tokens.weight", {c.vocab, c.hidden}, Init::normal(0, 0.02));
    Tensor x = g.embedding(ids, embed);
    const Tensor inv_freq = g.constant(c.rope_inv_freq(), {c.head_dim / 2});
    const int64_t batch = ids.shape()[0];
    for (int64_t l = 0; l < c.layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l);
        const Tensor h = g.rms_norm(x, norm_weight(g, p + ".input_layernorm", c.hidden), c.rms_eps);
        const std::string a = p + ".self_attn";
        auto project = [&](const char* name, int64_t heads) {
            return split_heads(g, linear(g, h, a + name, c.hidden, heads * c.head_dim, c.qkv_bias, c.lora), heads,
                               c.head_dim);
        };
        Tensor q = project(".q_proj", c.heads);
        Tensor k = project(".k_proj", c.kv_heads);
        Tensor v = project(".v_proj", c.kv_heads);
        q = g.rope_rotate(q, positions, inv_freq, false);
        k = g.rope_rotate(k, positions, inv_freq, false);
        AttentionOptions options{.causal = true};
        if (cache) {
            const Shape cache_shape{batch, c.kv_heads, cache->length, c.head_dim};
            const Tensor k_cache = g.state(cache_name(l, "k"), cache_shape);
            const Tensor v_cache = g.state(cache_name(l, "v"), cache_shape);
            k = g.assign(k_cache, g.slice_scatter(k_cache, k, 2, cache->position));
            v = g.assign(v_cache, g.slice_scatter(v_cache, v, 2, cache->position));
            options.query_start = cache->position;
        }
        const Tensor attended = merge_heads(g, g.attention(q, k, v, options));
        x = x + linear(g, attended, a + ".o_proj", c.heads * c.head_dim, c.hidden, c.o_bias, c.lora);
        const Tensor h2 = g.rms_norm(x, norm_weight(g, p + ".post_attention_layernorm", c.hidden), c.rms_eps);
        x = x + swiglu_mlp(g, h2, p + ".mlp", c.hidden, c.ffn, c.mlp_bias, c.lora);
    }
    if (cache) x = g.slice(x, 1, positions.shape()[0] - 1, positions.shape()[0]);
    x = g.rms_norm(x, norm_weight(g, "model.norm", c.hidden), c.rms_eps);
    const Tensor head = c.tied_embeddings ? embed : g.parameter("lm_head.weight", {c.vocab, c.hidden}, Init::normal(0, 0.02));
    return g.linear(x, head);
}

Tensor arange(Graph& g, int64_t n) {
    std::vector<double> v;
    for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<double>(i));
    return g.constant(std::move(v), {n}, DType::I32);
}

}  // namespace

BuiltModel build_llama_cached(const LlamaConfig& c, int64_t batch, int64_t tokens, int64_t cache_len) {
    if (tokens < 1 || tokens > cache_len) {
        throw Error("smollm2: " + std::to_string(tokens) + " tokens do not fit a cache of " + std::to_string(cache_len));
    }
    BuiltModel m;
    Graph& g = *m.graph;
    const Tensor ids = g.input("input_ids", {batch, tokens}, DType::I32);
    const Tensor position = g.input("position", {}, DType::I32);
    m.output = llama(g, c, ids, arange(g, tokens) + position, CacheSpec{cache_len, position});
    m.output_name = "logits";
    g.output("logits", m.output);
    m.inputs = {"input_ids", "position"};
    return m;
}

namespace {

// Hugging Face's shift, on the labels rather than the logits (no copy of [B, T, vocab]): position t
// is scored against labels[t + 1], and the last position, which has no next label, is ignored.
Tensor shift_labels(Graph& g, Tensor labels) {
    const Shape& s = labels.shape();
    return g.concat({g.slice(labels, 1, 1, s[1]), g.full({s[0], 1}, Graph::kIgnoreIndex, DType::I32)}, 1);
}

}  // namespace

BuiltModel build_causal_lm(const LlamaConfig& c, const Shape& ids_shape, bool shifted) {
    if (ids_shape[1] > c.max_positions) {
        throw Error("smollm2: " + std::to_string(ids_shape[1]) + " tokens exceed max_position_embeddings " +
                    std::to_string(c.max_positions));
    }
    const std::string labels_name = shifted ? "shifted_labels" : "labels";
    BuiltModel m;
    Graph& g = *m.graph;
    const Tensor ids = g.input("input_ids", ids_shape, DType::I32);
    const Tensor labels = g.input(labels_name, ids_shape, DType::I32);
    m.output = llama(g, c, ids, arange(g, ids_shape[1]), std::nullopt);
    m.output_name = "logits";
    g.output("logits", m.output);
    const int64_t rows = ids_shape[0] * ids_shape[1];
    m.loss = g.cross_entropy(g.reshape(m.output, {rows, c.vocab}), g.reshape(shifted ? labels : shift_labels(g, labels), {rows}));
    g.output("loss", m.loss);
    m.inputs = {"input_ids", labels_name};
    return m;
}

BuiltModel build_smollm2(const ModelRequest& r) {
    const Shape ids_shape = checked_input_shape(r, "smollm2", "input_ids", {1, 128}, {-1, -1});
    const bool shifted = r.input_shapes.count("shifted_labels") != 0;
    if (shifted && r.input_shapes.count("labels"))
        throw Error("smollm2: give either labels (shifted inside, as Hugging Face's) or shifted_labels, not both");
    checked_input_shape(r, "smollm2", shifted ? "shifted_labels" : "labels", ids_shape, ids_shape);
    return build_causal_lm(LlamaConfig::from_request(r), ids_shape, shifted);
}

io::TensorMap smollm2_inputs(const ModelRequest& r, bool latency, uint64_t seed) {
    const LlamaConfig c = LlamaConfig::from_request(r);
    const Shape shape = latency ? Shape{1, 1} : checked_input_shape(r, "smollm2", "input_ids", {1, 128}, {-1, -1});
    return {{"input_ids", random_ids(shape, c.vocab, seed)}, {"labels", random_ids(shape, c.vocab, seed + 1)}};
}

}  // namespace mn::models
