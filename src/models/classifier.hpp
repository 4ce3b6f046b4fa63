#pragma once
// Image classifiers for Fashion-MNIST (28x28 grey images, 10 classes), with torch.nn-style
// parameter names and PyTorch's default initialization (uniform in +-1/sqrt(fan_in)).
#include <memory>
#include <string>

#include "models/registry.hpp"

namespace mn::models {

struct Classifier {
    std::unique_ptr<Graph> graph = std::make_unique<Graph>();  // on the heap: the handles point at it
    Tensor images;  // input "images" [batch, 784]
    Tensor labels;  // input "labels" [batch] i32
    Tensor logits;  // output "logits" [batch, 10]
    Tensor loss;    // cross-entropy, output "loss" only when compiled for training
};

// `name` is "mlp" (784-256-128-10, ReLU) or "cnn" (conv3x3 1->32, ReLU, maxpool 2, conv3x3
// 32->64, ReLU, maxpool 2, 3136-128-10; images are read as [batch, 1, 28, 28]). Throws mn::Error listing the known names otherwise.
Classifier fashion_classifier(const std::string& name, int64_t batch);

// Registry entry "mlp": batch from the "images" input (default 64).
BuiltModel build_fashion_mlp(const ModelRequest& r);
io::TensorMap fashion_mlp_inputs(const ModelRequest& r, bool latency, uint64_t seed);

}  // namespace mn::models
