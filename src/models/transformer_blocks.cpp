#include "models/transformer_blocks.hpp"

namespace mn::models {

Tensor linear(Graph& g, Tensor x, const std::string& name, int64_t in, int64_t out, bool bias, const LoraConfig& lora) {
    const Tensor w = g.parameter(name + ".weight", {out, in}, Init::normal(0, 0.02));
    const Tensor y = bias ? g.linear(x, w, g.parameter(name + ".bias", {out})) : g.linear(x, w);
    return lora.applies(name) ? y + lora_delta(g, x, name, in, out, lora) : y;
}

Tensor norm_weight(Graph& g, const std::string& name, int64_t dim) { return g.parameter(name + ".weight", {dim}, Init::ones()); }
Tensor norm_bias(Graph& g, const std::string& name, int64_t dim) { return g.parameter(name + ".bias", {dim}); }

Tensor split_heads(Graph& g, Tensor x, int64_t heads, int64_t head_dim) {
    const Shape s = x.shape();
    return g.permute(g.reshape(x, {s[0], s[1], heads, head_dim}), {0, 2, 1, 3});
}

Tensor merge_heads(Graph& g, Tensor x) {
    const Shape s = x.shape();
    return g.reshape(g.permute(x, {0, 2, 1, 3}), {s[0], s[2], s[1] * s[3]});
}

Tensor swiglu_mlp(Graph& g, Tensor x, const std::string& prefix, int64_t hidden, int64_t ffn, bool bias,
                  const LoraConfig& lora) {
    const Tensor gate = linear(g, x, prefix + ".gate_proj", hidden, ffn, bias, lora);
    const Tensor up = linear(g, x, prefix + ".up_proj", hidden, ffn, bias, lora);
    return linear(g, g.silu(gate) * up, prefix + ".down_proj", ffn, hidden, bias, lora);
}

Shape checked_input_shape(const ModelRequest& r, const std::string& model, const std::string& name, Shape fallback,
                          const Shape& expected) {
    const auto it = r.input_shapes.find(name);
    if (it == r.input_shapes.end()) return fallback;
    const Shape& got = it->second;
    bool ok = got.size() == expected.size();
    for (size_t d = 0; ok && d < got.size(); ++d) ok = expected[d] < 0 || expected[d] == got[d];
    if (!ok) {
        std::string want = "(";
        for (size_t d = 0; d < expected.size(); ++d) want += (d ? "," : "") + (expected[d] < 0 ? std::string("*") : std::to_string(expected[d]));
        throw Error(model + ": input '" + name + "' is " + shape_str(got) + ", expected " + want + ")");
    }
    return got;
}

}  // namespace mn::models
