#include "compiler/training.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "meganeura/autodiff.hpp"

namespace mn {

double LrSchedule::factor(int64_t step) const {
    if (warmup_steps > 0 && step <= warmup_steps) return static_cast<double>(step) / static_cast<double>(warmup_steps);
    if (decay == Decay::Constant || total_steps <= warmup_steps) return 1.0;
    // As transformers' get_cosine_schedule_with_warmup: a step takes the cosine's value where the
    // steps before it have brought it, so the first step after the warm-up has the whole rate and the
    // last a small one, min_lr_ratio coming after it. The last step had min_lr_ratio's (0: a run's
    // last step changed nothing, and a one-step fine-tune trained nothing).
    const double progress = std::min(1.0, static_cast<double>(step - 1 - warmup_steps) /
                                              static_cast<double>(total_steps - warmup_steps));
    return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
}

double learning_rate(const Optimizer& opt) {
    return std::visit([](const auto& o) { return o.lr; }, opt);
}

namespace compiler {

namespace {

// torch.nn.utils.clip_grad_norm_: scale every gradient by min(1, max_norm / (norm + 1e-6)).
void clip(Graph& g, std::vector<Tensor>& grads, double max_norm) {
    std::optional<Tensor> total;
    for (Tensor gr : grads) {
        Tensor sq = g.sum(gr * gr);
        total = total ? *total + sq : sq;
    }
    if (!total) return;
    Tensor coef = g.minimum(g.scalar(max_norm) / (g.sqrt(*total) + 1e-6), g.scalar(1.0));
    for (Tensor& gr : grads) gr = gr * coef;
}

// Data parallel: each gradient leaves the first program as an output, and the update reads the sum over
// the processes, scaled to their mean, from an input the host fills (so clipping sees the whole batch's
// gradient too). Nothing fuses an update into its gradient's product then: the product's result is an
// output, and the update reads another value.
void read_reduced_gradients(Graph& g, std::vector<Tensor>& grads, const std::vector<std::string>& names, int processes) {
    for (size_t i = 0; i < grads.size(); ++i) {
        g.output(gradient_output(names[i]), grads[i]);
        const Tensor sum = g.input(reduced_gradient_input(names[i]), grads[i].shape());
        grads[i] = processes == 1 ? sum : sum * (1.0 / processes);
    }
}

// The per-parameter update rules. Scalars shared by every parameter (step size, bias
// corrections, the decay factor) are built once, so each parameter's update is a few fused kernels.
// A parameter's assignment carries the optimizer's name: the updates not stored by their gradient's
// product then run as one dispatch over many tensors (schedule/fusion.hpp), named after it.
struct Updater {
    Graph& g;
    Tensor lr;
    Tensor step_size;    // lr / bias_correction1
    Tensor sqrt_bc2;     // sqrt(bias_correction2)
    std::optional<Tensor> decay;  // AdamW: 1 - lr * weight_decay

    void operator()(const SGD& o, Tensor p, Tensor grad, const std::string& name) const {
        if (o.weight_decay != 0) grad = grad + p * o.weight_decay;
        if (o.momentum != 0) {
            Tensor buf = g.state("optimizer.momentum." + name, p.shape());
            grad = g.assign(buf, buf * o.momentum + grad);
        }
        g.assign(p, p - lr * grad, "sgd");
    }
    // `base` is the parameter's value before the moment step (AdamW decays it first).
    void adam(const char* optimizer, double beta1, double beta2, double eps, Tensor p, Tensor base, Tensor grad,
              const std::string& name) const {
        Tensor m = g.state("optimizer.exp_avg." + name, p.shape());
        Tensor v = g.state("optimizer.exp_avg_sq." + name, p.shape());
        Tensor m_new = g.assign(m, m * beta1 + grad * (1 - beta1));
        Tensor v_new = g.assign(v, v * beta2 + grad * grad * (1 - beta2));
        // torch's order: denom = sqrt(v) / sqrt(bc2) + eps; p -= (lr / bc1) * m / denom
        Tensor denom = g.sqrt(v_new) / sqrt_bc2 + eps;
        g.assign(p, base - step_size * m_new / denom, optimizer);
    }
    void operator()(const Adam& o, Tensor p, Tensor grad, const std::string& name) const {
        if (o.weight_decay != 0) grad = grad + p * o.weight_decay;
        adam("adam", o.beta1, o.beta2, o.eps, p, p, grad, name);
    }
    void operator()(const AdamW& o, Tensor p, Tensor grad, const std::string& name) const {
        adam("adamw", o.beta1, o.beta2, o.eps, p, decay ? p * *decay : p, grad, name);
    }
};

}  // namespace

void append_training(Graph& g, Tensor loss, const CompileOptions& options) {
    if (!loss.shape().empty()) throw Error("compile: the loss must be a scalar, got shape " + shape_str(loss.shape()));
    std::vector<Tensor> params;
    std::vector<std::string> names;
    for (size_t i = 0; i < g.nodes().size(); ++i) {
        const Node& n = g.nodes()[i];
        if (n.op == Op::Parameter && n.dtype == DType::F32 && n.requires_grad) {
            params.push_back(g.handle(static_cast<int32_t>(i)));
            names.push_back(n.name);
        }
    }
    if (params.empty()) throw Error("compile: no f32 parameter requires a gradient; there is nothing to train");
    // A model that already outputs its loss as "loss" (every registry model does) keeps that output.
    const auto& outs = g.outputs();
    if (std::none_of(outs.begin(), outs.end(), [&](const auto& o) { return o.first == kLossOutput && o.second == loss.id; }))
        g.output(kLossOutput, loss);
    std::vector<Tensor> grads = grad(loss, params);
    if (const auto& dp = options.data_parallel) {
        if (dp->processes < 1 || !dp->all_reduce)
            throw Error("compile: data_parallel needs processes >= 1 and an all_reduce, got " + std::to_string(dp->processes));
        read_reduced_gradients(g, grads, names, dp->processes);
    }
    if (options.clip_grad_norm > 0) clip(g, grads, options.clip_grad_norm);
    const Tensor lr = g.input(kLearningRate, {});
    Updater up{g, lr, lr / g.input(kBiasCorrection1, {}), g.sqrt(g.input(kBiasCorrection2, {}))};
    if (const auto* w = std::get_if<AdamW>(&options.optimizer); w && w->weight_decay != 0) {
        up.decay = g.scalar(1.0) - lr * w->weight_decay;
    }
    for (size_t i = 0; i < params.size(); ++i) {
        std::visit([&](const auto& o) { up(o, params[i], grads[i], names[i]); }, options.optimizer);
    }
}

std::string gradient_output(const std::string& parameter) { return "train.grad." + parameter; }
std::string reduced_gradient_input(const std::string& parameter) { return "train.reduced_grad." + parameter; }

StepScalars step_scalars(const CompileOptions& options, int64_t t) {
    const double lr = learning_rate(options.optimizer) * options.schedule.factor(t);
    double b1 = 0, b2 = 0;
    if (const auto* a = std::get_if<Adam>(&options.optimizer)) b1 = a->beta1, b2 = a->beta2;
    if (const auto* a = std::get_if<AdamW>(&options.optimizer)) b1 = a->beta1, b2 = a->beta2;
    return {static_cast<float>(lr), static_cast<float>(1 - std::pow(b1, static_cast<double>(t))),
            static_cast<float>(1 - std::pow(b2, static_cast<double>(t)))};
}

}  // namespace compiler
}  // namespace mn
