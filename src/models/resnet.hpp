#pragma once
// ResNet-50 with torchvision's architecture and parameter names (conv1.weight, bn1.*,
// layer1.0.conv1.weight, ..., fc.weight, fc.bias), so a torchvision state_dict loads by name.
#include "models/registry.hpp"

namespace mn::models {

struct ResNetConfig {
    std::vector<int64_t> blocks = {3, 4, 6, 3};  // bottlenecks per stage (ResNet-50)
    int64_t width = 64;  // the stem's channels; stage s has width << s planes and 4x as many outputs
    int64_t num_classes = 1000;
    // Eval mode (false) folds each batch norm into its convolution, in the graph, from the
    // running stats (State tensors, loaded by name, never trained); gradients still reach the BN
    // weight and bias through the fold. Training mode normalizes with batch statistics and
    // assigns the running-stat update.
    bool train_bn = false;
    double bn_eps = 1e-5, bn_momentum = 0.1;
};

// The architecture of torchvision ResNet weights (a state_dict in safetensors, fc included): the
// stem's width from conv1.weight, the bottlenecks per stage from the layer<s>.<i> names, the classes
// from fc.weight. An mn::Error names what is missing or not a bottleneck ResNet's (ResNet-18 and -34
// have basic blocks, without conv3); load() then checks every shape.
ResNetConfig resnet_config_of(const io::TensorMap& weights, const std::string& file);

// logits [N, num_classes] of images [N, 3, H, W] (H, W >= 32).
Tensor resnet_logits(Graph& g, Tensor images, const ResNetConfig& config);

// images [N, 3, H, W] and labels [N] i32 in, outputs "logits" and "loss" (cross-entropy).
BuiltModel build_resnet(const ResNetConfig& config, const Shape& images);

// Registry entry "resnet50": images [4, 3, 224, 224] and labels [4] i32 by default, eval-mode BN,
// cross-entropy loss, output "logits". Sizes "tiny" and "full" are the same network; the tests
// shrink the input instead.
BuiltModel build_resnet50(const ModelRequest& r);
io::TensorMap resnet50_inputs(const ModelRequest& r, bool latency, uint64_t seed);

}  // namespace mn::models
