// Which forward products of a graph with gradients are split (Tuning::split_forward): those that a
// ReLU, a max pool, |x|, maximum or minimum depends on. Those ops' gradients are piecewise, and f16's
// rounding of a product before them flips some of their pieces (a ReLU's sign, a max pool's winner):
// in torchvision's ResNet-50 that moved conv1.weight's gradient by 8% (relative L2), spread over every
// layer (scripts/resnet50_fast_gate_emulation.py). Where every activation is smooth (SiLU, GELU,
// softmax: the transformers, the U-Net) the rounding moves the gradients about as much as it moves the
// values, ~1e-3, and splitting would cost time for nothing (SmolLM2-135M's fast training took 14.3 ms
// split against 10.3 on the H200).
#include <algorithm>

#include "schedule/schedule.hpp"

namespace mn::sched {

namespace {

bool piecewise_gradient(Op op) {
    return op == Op::Relu || op == Op::MaxPool2d || op == Op::Abs || op == Op::Maximum || op == Op::Minimum;
}

}  // namespace

std::vector<bool> before_piecewise_gradients(const Graph& g) {
    const auto& nodes = g.nodes();
    std::vector<bool> before(nodes.size(), false);
    const size_t forward = std::min(nodes.size(), static_cast<size_t>(g.gradient_start()));
    for (size_t i = forward; i-- > 0;) {  // inputs precede their consumers
        if (!before[i] && !piecewise_gradient(nodes[i].op)) continue;
        for (int32_t in : nodes[i].inputs) before[static_cast<size_t>(in)] = true;
    }
    return before;
}

}  // namespace mn::sched
