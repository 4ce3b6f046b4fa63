#include "models/smolvla.hpp"

#include "models/transformer_blocks.hpp"

namespace mn::models {

SmolVlaConfig SmolVlaConfig::tiny() {
    return {.hidden = 48, .layers = 2, .heads = 3, .kv_heads = 1, .head_dim = 16, .ffn = 64, .action_dim = 5, .chunk = 7,
            .time_dim = 96, .context = 4, .context_dim = 12, .rms_eps = 1e-5};
}

namespace {

SmolVlaConfig config_of(const ModelRequest& r) {
    if (!r.config_path.empty()) throw Error("smolvla: no config.json support; use --size tiny or full");
    return r.size == "full" ? SmolVlaConfig::published() : SmolVlaConfig::tiny();
}

struct Shapes {
    Shape actions, timestep, vlm_kv;
};

Shapes shapes_of(const ModelRequest& r, const SmolVlaConfig& c) {
    Shapes s;
    s.actions = checked_input_shape(r, "smolvla", "actions", {1, c.chunk, c.action_dim}, {-1, -1, c.action_dim});
    const int64_t b = s.actions[0];
    s.timestep = checked_input_shape(r, "smolvla", "timestep", {b, 1, c.time_dim}, {b, 1, c.time_dim});
    s.vlm_kv = checked_input_shape(r, "smolvla", "vlm_kv", {b, c.context, c.context_dim}, {b, -1, c.context_dim});
    return s;
}

}  // namespace

BuiltModel build_smolvla(const ModelRequest& r) {
    const SmolVlaConfig c = config_of(r);
    const Shapes s = shapes_of(r, c);
    BuiltModel m;
    Graph& g = *m.graph;
    const Tensor actions = g.input("actions", s.actions);
    const Tensor timestep = g.input("timestep", s.timestep);
    const Tensor vlm_kv = g.input("vlm_kv", s.vlm_kv);
    // The timestep embedding [B, 1, hidden] broadcasts over the chunk.
    Tensor x = linear(g, actions, "action_in_proj", c.action_dim, c.hidden) + linear(g, timestep, "time_proj", c.time_dim, c.hidden);
    const Tensor kv = linear(g, vlm_kv, "kv_proj", c.context_dim, c.hidden);
    for (int64_t l = 0; l < c.layers; ++l) {
        const std::string p = "layers." + std::to_string(l);
        const Tensor h = g.rms_norm(x, norm_weight(g, p + ".input_layernorm", c.hidden), c.rms_eps);
        const Tensor source = l % 2 == 0 ? h : kv;  // odd layers cross-attend to the context
        const std::string a = p + ".self_attn";
        const Tensor q = split_heads(g, linear(g, h, a + ".q_proj", c.hidden, c.heads * c.head_dim), c.heads, c.head_dim);
        const Tensor k = split_heads(g, linear(g, source, a + ".k_proj", c.hidden, c.kv_heads * c.head_dim), c.kv_heads, c.head_dim);
        const Tensor v = split_heads(g, linear(g, source, a + ".v_proj", c.hidden, c.kv_heads * c.head_dim), c.kv_heads, c.head_dim);
        x = x + linear(g, merge_heads(g, g.attention(q, k, v)), a + ".o_proj", c.heads * c.head_dim, c.hidden);
        const Tensor h2 = g.rms_norm(x, norm_weight(g, p + ".post_attention_layernorm", c.hidden), c.rms_eps);
        x = x + swiglu_mlp(g, h2, p + ".mlp", c.hidden, c.ffn);
    }
    x = g.rms_norm(x, norm_weight(g, "norm", c.hidden), c.rms_eps);
    m.output = linear(g, x, "action_out_proj", c.hidden, c.action_dim);
    m.output_name = "output";
    g.output("output", m.output);
    m.loss = g.mean(m.output * m.output);
    g.output("loss", m.loss);
    m.inputs = {"actions", "timestep", "vlm_kv"};
    return m;
}

io::TensorMap smolvla_inputs(const ModelRequest& r, bool latency, uint64_t seed) {
    const SmolVlaConfig c = config_of(r);
    Shapes s = shapes_of(r, c);
    if (latency) s = {{1, 1, c.action_dim}, {1, 1, c.time_dim}, {1, s.vlm_kv[1], c.context_dim}};
    return {{"actions", random_floats(s.actions, -1, 1, seed)},
            {"timestep", random_floats(s.timestep, -1, 1, seed + 1)},
            {"vlm_kv", random_floats(s.vlm_kv, -1, 1, seed + 2)}};
}

}  // namespace mn::models
