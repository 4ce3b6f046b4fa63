#include "models/whisper.hpp"

#include "models/transformer_blocks.hpp"

namespace mn::models {

WhisperConfig WhisperConfig::tiny() { return {.mels = 8, .frames = 20, .d = 32, .layers = 2, .heads = 4, .ffn = 64, .eps = 1e-5}; }

WhisperConfig WhisperConfig::from_json(const std::string& path) {
    const ConfigJson j(path);
    WhisperConfig c;
    c.mels = j.count("num_mel_bins", c.mels);
    c.frames = 2 * j.count("max_source_positions", c.frames / 2);
    c.d = j.count("d_model", c.d);
    c.layers = j.count("encoder_layers", c.layers);
    c.heads = j.count("encoder_attention_heads", c.heads);
    c.ffn = j.count("encoder_ffn_dim", c.ffn);
    if (c.d % c.heads != 0)
        j.fail("d_model " + std::to_string(c.d) + " is not a multiple of encoder_attention_heads " + std::to_string(c.heads));
    return c;
}

namespace {

WhisperConfig config_of(const ModelRequest& r) {
    if (!r.config_path.empty()) return WhisperConfig::from_json(r.config_path);
    return r.size == "full" ? WhisperConfig::tiny_en() : WhisperConfig::tiny();
}

Tensor conv(Graph& g, Tensor x, const std::string& name, int64_t in, int64_t out, int64_t stride) {
    const Tensor w = g.parameter(name + ".weight", {out, in, 3}, Init::normal(0, 0.02));
    return g.conv1d(x, w, g.parameter(name + ".bias", {out}), {.stride = stride, .padding = 1});
}

Tensor layer_norm(Graph& g, Tensor x, const std::string& name, const WhisperConfig& c) {
    return g.layer_norm(x, norm_weight(g, name, c.d), norm_bias(g, name, c.d), c.eps);
}

}  // namespace

BuiltModel build_whisper(const ModelRequest& r) {
    const WhisperConfig c = config_of(r);
    // The positions table has frames / 2 rows (1500), so the frame count is the config's.
    const Shape features = checked_input_shape(r, "whisper", "input_features", {1, c.mels, c.frames}, {-1, c.mels, c.frames});
    const int64_t positions = c.frames / 2, head_dim = c.d / c.heads;
    BuiltModel m;
    Graph& g = *m.graph;
    const std::string p = "model.encoder.";
    Tensor x = g.gelu(conv(g, g.input("input_features", features), p + "conv1", c.mels, c.d, 1));
    x = g.gelu(conv(g, x, p + "conv2", c.d, c.d, 2));
    x = g.transpose(x, 1, 2) + g.parameter(p + "embed_positions.weight", {positions, c.d}, Init::normal(0, 0.02));
    for (int64_t l = 0; l < c.layers; ++l) {
        const std::string lp = p + "layers." + std::to_string(l);
        const std::string a = lp + ".self_attn";
        const Tensor h = layer_norm(g, x, lp + ".self_attn_layer_norm", c);
        const Tensor q = split_heads(g, linear(g, h, a + ".q_proj", c.d, c.d, true), c.heads, head_dim);
        const Tensor k = split_heads(g, linear(g, h, a + ".k_proj", c.d, c.d), c.heads, head_dim);
        const Tensor v = split_heads(g, linear(g, h, a + ".v_proj", c.d, c.d, true), c.heads, head_dim);
        x = x + linear(g, merge_heads(g, g.attention(q, k, v)), a + ".out_proj", c.d, c.d, true);
        const Tensor h2 = layer_norm(g, x, lp + ".final_layer_norm", c);
        x = x + linear(g, g.gelu(linear(g, h2, lp + ".fc1", c.d, c.ffn, true)), lp + ".fc2", c.ffn, c.d, true);
    }
    m.output = layer_norm(g, x, p + "layer_norm", c);
    m.output_name = "output";
    g.output("output", m.output);
    m.loss = g.mean(m.output * m.output);
    g.output("loss", m.loss);
    m.inputs = {"input_features"};
    return m;
}

io::TensorMap whisper_inputs(const ModelRequest& r, bool latency, uint64_t seed) {
    const WhisperConfig c = config_of(r);
    // Whisper always encodes a full 30 s window, so the latency input is the full mel of batch 1.
    const Shape shape = latency ? Shape{1, c.mels, c.frames}
                                : checked_input_shape(r, "whisper", "input_features", {1, c.mels, c.frames}, {-1, c.mels, c.frames});
    return {{"input_features", random_floats(shape, -1, 1, seed)}};
}

}  // namespace mn::models
