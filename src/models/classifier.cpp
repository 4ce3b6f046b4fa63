#include "models/classifier.hpp"

#include <cmath>

namespace mn::models {

namespace {

// nn.Linear with PyTorch's default initialization.
Tensor linear(Graph& g, Tensor x, const std::string& name, int64_t in, int64_t out) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    return g.linear(x, g.parameter(name + ".weight", {out, in}, Init::uniform(-bound, bound)),
                    g.parameter(name + ".bias", {out}, Init::uniform(-bound, bound)));
}

// nn.Conv2d (3x3, padding 1, with bias) with PyTorch's default initialization.
Tensor conv3x3(Graph& g, Tensor x, const std::string& name, int64_t in, int64_t out) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in * 9));
    return g.conv2d(x, g.parameter(name + ".weight", {out, in, 3, 3}, Init::uniform(-bound, bound)),
                    g.parameter(name + ".bias", {out}, Init::uniform(-bound, bound)), {.padding = 1});
}

Tensor mlp(Graph& g, Tensor images) {
    Tensor h = g.relu(linear(g, images, "fc1", 784, 256));
    h = g.relu(linear(g, h, "fc2", 256, 128));
    return linear(g, h, "fc3", 128, 10);
}

// Two conv3x3-ReLU-maxpool2 stages (28 -> 14 -> 7), then 1568-128-10.
Tensor cnn(Graph& g, Tensor images) {
    const int64_t batch = images.shape()[0];
    Tensor h = g.reshape(images, {batch, 1, 28, 28});
    h = g.max_pool2d(g.relu(conv3x3(g, h, "conv1", 1, 32)), 2);
    h = g.max_pool2d(g.relu(conv3x3(g, h, "conv2", 32, 64)), 2);
    h = g.relu(linear(g, g.flatten(h), "fc1", 64 * 7 * 7, 128));
    return linear(g, h, "fc2", 128, 10);
}

// Builds the named classifier into `g`; fills the images/labels/logits/loss handles.
void build_classifier(Graph& g, const std::string& name, int64_t batch, Classifier& c) {
    if (name != "mlp" && name != "cnn") throw Error("unknown model '" + name + "' for fashion-mnist; known: mlp, cnn");
    c.images = g.input("images", {batch, 784});
    c.labels = g.input("labels", {batch}, DType::I32);
    c.logits = name == "mlp" ? mlp(g, c.images) : cnn(g, c.images);
    g.output("logits", c.logits);
    c.loss = g.cross_entropy(c.logits, c.labels);
}

}  // namespace

Classifier fashion_classifier(const std::string& name, int64_t batch) {
    Classifier c;
    build_classifier(*c.graph, name, batch, c);
    return c;
}

BuiltModel build_fashion_mlp(const ModelRequest& r) {
    const Shape images = input_shape(r, "images", {64, 784});
    if (images.size() != 2 || images[1] != 784) throw Error("mlp: images must be [N, 784], got " + shape_str(images));
    BuiltModel m;
    Classifier c;
    build_classifier(*m.graph, "mlp", images[0], c);
    m.graph->output("loss", c.loss);
    m.inputs = {"images", "labels"};
    m.output_name = "logits";
    m.output = c.logits;
    m.loss = c.loss;
    return m;
}

io::TensorMap fashion_mlp_inputs(const ModelRequest& r, bool latency, uint64_t seed) {
    const int64_t batch = latency ? 1 : input_shape(r, "images", {64, 784})[0];
    return {{"images", random_floats({batch, 784}, 0, 1, seed)}, {"labels", random_ids({batch}, 10, seed + 1)}};
}

}  // namespace mn::models
