#include "models/resnet.hpp"

#include <cmath>

namespace mn::models {

namespace {

struct Builder {
    Graph& g;
    const ResNetConfig& c;

    // conv (no bias) then batch norm, as torchvision's conv/bn pairs; names are the two prefixes.
    Tensor conv_bn(Tensor x, const std::string& conv, const std::string& bn, int64_t in, int64_t out, int64_t k,
                   int64_t stride) {
        const ConvOptions o{.stride = stride, .padding = k / 2};
        // torchvision: kaiming_normal_(mode="fan_out", nonlinearity="relu"); BN weight 1, bias 0
        const double std = std::sqrt(2.0 / static_cast<double>(out * k * k));
        Tensor w = g.parameter(conv + ".weight", {out, in, k, k}, Init::normal(0, std));
        Tensor gamma = g.parameter(bn + ".weight", {out}, Init::ones());
        Tensor beta = g.parameter(bn + ".bias", {out}, Init::zeros());
        Tensor mean = g.state(bn + ".running_mean", {out}, Init::zeros());
        Tensor var = g.state(bn + ".running_var", {out}, Init::ones());
        if (c.train_bn) return g.batch_norm(g.conv2d(x, w, std::nullopt, o), gamma, beta, mean, var, true, c.bn_momentum, c.bn_eps);
        // eval: bn(conv(x, w)) = conv(x, w * scale) + (beta - mean * scale), scale = gamma / sqrt(var + eps)
        Tensor scale = gamma * g.rsqrt(var + c.bn_eps);
        Tensor folded = w * g.reshape(scale, {out, 1, 1, 1});
        return g.conv2d(x, folded, beta - mean * scale, o);
    }

    // torchvision's Bottleneck (stride on the 3x3 conv, "ResNet v1.5").
    Tensor bottleneck(Tensor x, const std::string& p, int64_t in, int64_t planes, int64_t stride, bool downsample) {
        Tensor h = g.relu(conv_bn(x, p + ".conv1", p + ".bn1", in, planes, 1, 1));
        h = g.relu(conv_bn(h, p + ".conv2", p + ".bn2", planes, planes, 3, stride));
        h = conv_bn(h, p + ".conv3", p + ".bn3", planes, planes * 4, 1, 1);
        Tensor identity = downsample ? conv_bn(x, p + ".downsample.0", p + ".downsample.1", in, planes * 4, 1, stride) : x;
        return g.relu(h + identity);
    }
};

}  // namespace

ResNetConfig resnet_config_of(const io::TensorMap& weights, const std::string& file) {
    auto shape = [&](const std::string& name) -> const Shape& {
        const auto it = weights.find(name);
        if (it == weights.end()) throw Error(file + ": no tensor '" + name + "'; expected torchvision ResNet weights");
        return it->second.shape;
    };
    const Shape& stem = shape("conv1.weight");
    const Shape& fc = shape("fc.weight");
    if (stem.size() != 4 || stem[1] != 3 || fc.size() != 2)
        throw Error(file + ": conv1.weight is " + shape_str(stem) + " and fc.weight " + shape_str(fc) +
                    "; expected torchvision ResNet weights ([width, 3, 7, 7] and [classes, features])");
    ResNetConfig c{.blocks = {}, .width = stem[0], .num_classes = fc[0]};
    for (int stage = 1; weights.count("layer" + std::to_string(stage) + ".0.conv1.weight"); ++stage) {
        const std::string layer = "layer" + std::to_string(stage) + ".";
        int64_t n = 0;
        while (weights.count(layer + std::to_string(n) + ".conv1.weight")) ++n;
        if (!weights.count(layer + "0.conv3.weight"))
            throw Error(file + ": " + layer + "0 has no conv3: basic blocks (ResNet-18, -34) are not built, only bottlenecks");
        c.blocks.push_back(n);
    }
    if (c.blocks.empty()) throw Error(file + ": no tensor 'layer1.0.conv1.weight'; expected torchvision ResNet weights");
    return c;
}

Tensor resnet_logits(Graph& g, Tensor images, const ResNetConfig& config) {
    Builder b{g, config};
    Tensor h = g.relu(b.conv_bn(images, "conv1", "bn1", 3, config.width, 7, 2));
    h = g.max_pool2d(h, 3, 2, 1);
    int64_t in = config.width;
    for (size_t stage = 0; stage < config.blocks.size(); ++stage) {
        const int64_t planes = config.width << stage;
        for (int64_t i = 0; i < config.blocks[stage]; ++i) {
            const std::string p = "layer" + std::to_string(stage + 1) + "." + std::to_string(i);
            const int64_t stride = i == 0 && stage > 0 ? 2 : 1;
            h = b.bottleneck(h, p, in, planes, stride, i == 0);
            in = planes * 4;
        }
    }
    h = g.flatten(g.global_avg_pool2d(h));
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    return g.linear(h, g.parameter("fc.weight", {config.num_classes, in}, Init::uniform(-bound, bound)),
                    g.parameter("fc.bias", {config.num_classes}, Init::uniform(-bound, bound)));
}

BuiltModel build_resnet(const ResNetConfig& config, const Shape& images) {
    BuiltModel m;
    Graph& g = *m.graph;
    Tensor x = g.input("images", images);
    Tensor labels = g.input("labels", {images[0]}, DType::I32);
    m.output = resnet_logits(g, x, config);
    m.output_name = "logits";
    g.output("logits", m.output);
    m.loss = g.cross_entropy(m.output, labels);
    g.output("loss", m.loss);
    m.inputs = {"images", "labels"};
    return m;
}

BuiltModel build_resnet50(const ModelRequest& r) {
    const Shape images = input_shape(r, "images", {4, 3, 224, 224});
    if (images.size() != 4 || images[1] != 3 || images[2] < 32 || images[3] < 32) {
        throw Error("resnet50: images must be [N, 3, H, W] with H, W >= 32, got " + shape_str(images));
    }
    return build_resnet(ResNetConfig{}, images);
}

io::TensorMap resnet50_inputs(const ModelRequest& r, bool latency, uint64_t seed) {
    Shape images = input_shape(r, "images", {4, 3, 224, 224});
    if (latency) images[0] = 1;
    return {{"images", random_floats(images, -2, 2, seed)}, {"labels", random_ids({images[0]}, 1000, seed + 1)}};
}

}  // namespace mn::models
