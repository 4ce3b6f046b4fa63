#include "models/unet.hpp"

#include <cmath>

namespace mn::models {

namespace {

struct Builder {
    Graph& g;
    const UNetConfig& c;

    // nn.Conv2d(bias=False) with PyTorch's default initialization, "same" padding.
    Tensor conv(Tensor x, const std::string& name, int64_t in, int64_t out, int64_t k, int64_t stride = 1) {
        const double bound = 1.0 / std::sqrt(static_cast<double>(in * k * k));
        Tensor w = g.parameter(name + ".weight", {out, in, k, k}, Init::uniform(-bound, bound));
        return g.conv2d(x, w, std::nullopt, {.stride = stride, .padding = k / 2});
    }

    Tensor norm(Tensor x, const std::string& name, int64_t channels) {
        return g.group_norm(x, c.groups, g.parameter(name + ".weight", {channels}, Init::ones()),
                            g.parameter(name + ".bias", {channels}, Init::zeros()), c.eps);
    }

    Tensor res_block(Tensor x, const std::string& p, int64_t in, int64_t out) {
        Tensor h = conv(g.silu(norm(x, p + ".norm1", in)), p + ".conv1", in, out, 3);
        h = conv(g.silu(norm(h, p + ".norm2", out)), p + ".conv2", out, out, 3);
        return h + (in == out ? x : conv(x, p + ".skip", in, out, 1));
    }
};

}  // namespace

Tensor unet_forward(Graph& g, Tensor x, const UNetConfig& c) {
    Builder b{g, c};
    const size_t levels = c.mults.size();
    Tensor h = b.conv(x, "conv_in", c.in_channels, c.base, 3);
    int64_t ch = c.base;
    std::vector<Tensor> skips;
    std::vector<int64_t> skip_channels;
    for (size_t l = 0; l < levels; ++l) {
        const std::string p = "down." + std::to_string(l);
        const int64_t out = c.base * c.mults[l];
        h = b.res_block(h, p + ".res", ch, out);
        ch = out;
        skips.push_back(h);
        skip_channels.push_back(ch);
        if (l + 1 < levels) h = b.conv(h, p + ".downsample", ch, ch, 3, 2);
    }
    h = b.res_block(h, "mid", ch, ch);
    for (size_t j = 0; j < levels; ++j) {
        const size_t level = levels - 1 - j;
        if (j > 0) h = g.upsample_nearest2x(h);
        h = g.concat({h, skips[level]}, 1);
        const int64_t out = c.base * c.mults[level];
        h = b.res_block(h, "up." + std::to_string(j) + ".res", ch + skip_channels[level], out);
        ch = out;
    }
    return b.conv(g.silu(b.norm(h, "norm_out", ch)), "conv_out", ch, c.in_channels, 3);
}

BuiltModel build_sd_unet(const ModelRequest& r) {
    const UNetConfig config = r.size == "full" ? UNetConfig{} : UNetConfig::tiny();
    const Shape latent = input_shape(r, "noisy_latent", {2, 4, 32, 32});
    const int64_t align = int64_t{1} << (config.mults.size() - 1);
    if (latent.size() != 4 || latent[1] != config.in_channels || latent[2] % align || latent[3] % align) {
        throw Error("sd_unet: noisy_latent must be [N, " + std::to_string(config.in_channels) + ", H, W] with H and W " +
                    "divisible by " + std::to_string(align) + ", got " + shape_str(latent));
    }
    BuiltModel m;
    Graph& g = *m.graph;
    Tensor x = g.input("noisy_latent", latent);
    Tensor target = g.input("target", latent);
    m.output = unet_forward(g, x, config);
    m.output_name = "output";
    g.output("output", m.output);
    m.loss = g.mse_loss(m.output, target);
    g.output("loss", m.loss);
    m.inputs = {"noisy_latent", "target"};
    return m;
}

io::TensorMap sd_unet_inputs(const ModelRequest& r, bool latency, uint64_t seed) {
    Shape latent = input_shape(r, "noisy_latent", {2, 4, 32, 32});
    if (latency) latent[0] = 1;
    return {{"noisy_latent", random_floats(latent, -2, 2, seed)}, {"target", random_floats(latent, -1, 1, seed + 1)}};
}

}  // namespace mn::models
