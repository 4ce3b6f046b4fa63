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

// Builds the named classifier into `g`; fills the images/labels/logits/loss handles.
void build_classifier(Graph& g, const std::string& name, int64_t batch, Classifier& c) {
    if (name != "mlp") throw Error("unknown model '" + name + "' for fashion-mnist; known: mlp");
    c.images = g.input("images", {batch, 784});
    c.labels = g.input("labels", {batch}, DType::I32);
    Tensor h = g.relu(linear(g, c.images, "fc1", 784, 256));
    h = g.relu(linear(g, h, "fc2", 256, 128));
    c.logits = linear(g, h, "fc3", 128, 10);
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
