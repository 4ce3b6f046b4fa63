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

}  // namespace

Classifier fashion_classifier(const std::string& name, int64_t batch) {
    if (name != "mlp") throw Error("unknown model '" + name + "' for fashion-mnist; known: mlp");
    Classifier c;
    Graph& g = c.graph;
    c.images = g.input("images", {batch, 784});
    c.labels = g.input("labels", {batch}, DType::I32);
    Tensor h = g.relu(linear(g, c.images, "fc1", 784, 256));
    h = g.relu(linear(g, h, "fc2", 256, 128));
    c.logits = linear(g, h, "fc3", 128, 10);
    g.output("logits", c.logits);
    c.loss = g.cross_entropy(c.logits, c.labels);
    return c;
}

}  // namespace mn::models
