// Precision fast's kernels for each matmul and convolution (product_tuning): f16 cooperative matrices
// for the forward, split into two f16 parts where a piecewise gradient follows, and the gradient
// products scaled f16 or f32 by Tuning::fast_gradients.
//
// Which forward products of a graph with gradients are split (Tuning::split_forward): those that a
// ReLU, a max pool, |x|, maximum or minimum depends on. Those ops' gradients are piecewise, and f16's
// rounding of a product before them flips some of their pieces (a ReLU's sign, a max pool's winner):
// in torchvision's ResNet-50 that moved conv1.weight's gradient by 8% (relative L2), spread over every
// layer (scripts/resnet50_fast_gate_emulation.py). Where every activation is smooth (SiLU, GELU,
// softmax: the transformers, the U-Net) the rounding moves the gradients about as much as it moves the
// values, ~1e-3, and splitting would cost time for nothing (SmolLM2-135M's fast training took 14.3 ms
// split against 10.3 on the H200).
#include "schedule/schedule.hpp"

namespace mn::sched {

namespace {

// Tuning::FastGradients::Auto puts a matmul's gradient products on the scaled cooperative kernels from
// this size on: below it they are latency-bound. Measured on the H200: at 2^27, SmolLM2-135M's 128-row
// products stayed f32 (2026-12-02: its fast training 10.4 ms f32, 11.1 scaled); since the scales come
// from the fetch registers and the updates are batched (2026-12-03), scaled they take its fast training
// from 7.80 to 7.39 ms and SmolVLA's 50-row ones 4.05 to 3.89 (bench/results/2026-12-03-h200-session20.md).
constexpr double kScaledGradientWork = double(int64_t(1) << 24);

bool piecewise_gradient(Op op) {
    return op == Op::Relu || op == Op::MaxPool2d || op == Op::Abs || op == Op::Maximum || op == Op::Minimum;
}

}  // namespace

std::vector<bool> before_piecewise_gradients(const Graph& g) {
    const auto& nodes = g.nodes();
    std::vector<bool> before(nodes.size(), false);
    for (size_t i = nodes.size(); i-- > 0;) {  // inputs precede their consumers
        if (nodes[i].gradient || (!before[i] && !piecewise_gradient(nodes[i].op))) continue;
        for (int32_t in : nodes[i].inputs) before[static_cast<size_t>(in)] = true;
    }
    return before;
}

double matmul_multiply_adds(const Graph& g, const Node& n) {
    if (n.op != Op::MatMul) return 0;
    const Shape& a = g.node(n.inputs[0]).shape;
    return double(numel(n.shape)) * double(n.ints[0] ? a[a.size() - 2] : a.back());
}

codegen::MatmulTuning product_tuning(const Graph& g, int32_t id, const Tuning& tuning, const std::vector<bool>& split) {
    codegen::MatmulTuning t = tuning.matmul;
    const Node& n = g.node(id);
    if (!n.gradient) {
        t.coop_split = !split.empty() && split[static_cast<size_t>(id)] && n.dtype == DType::F32 &&
                       g.node(n.inputs[0]).dtype == DType::F32 && g.node(n.inputs[1]).dtype == DType::F32;
        return t;
    }
    using FG = Tuning::FastGradients;
    const bool convolution = n.op == Op::Conv2dGradInput || n.op == Op::Conv2dGradWeight;
    if (tuning.fast_gradients == FG::F16 ||
        (tuning.fast_gradients == FG::Auto && (convolution || matmul_multiply_adds(g, n) >= kScaledGradientWork))) {
        t.coop_scaled = true;
    } else {
        t.coop_subgroup = 0;
        t.coop_declined = tuning.fast_gradients == FG::F32
                              ? "a gradient product, kept f32 (MEGANEURA_FAST_GRADIENTS=f32)"
                              : "a gradient product under 2^24 multiply-adds, kept f32 (MEGANEURA_FAST_GRADIENTS=auto)";
    }
    return t;
}

}  // namespace mn::sched
