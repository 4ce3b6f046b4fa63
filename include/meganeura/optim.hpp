#pragma once
// Optimizers and learning-rate schedules. They become graph ops at compile time, so one training
// step (forward + backward + update) is one submit; the per-step scalars (learning rate, bias
// corrections) are the only values the host writes each step.
#include <cstdint>
#include <variant>

namespace mn {

struct SGD {
    double lr = 1e-2;
    double momentum = 0;
    double weight_decay = 0;  // L2 added to the gradient, as torch.optim.SGD
};

struct Adam {
    double lr = 1e-3;
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
    double weight_decay = 0;  // L2 added to the gradient, as torch.optim.Adam
};

struct AdamW {
    double lr = 1e-3;
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
    double weight_decay = 1e-2;  // decoupled, as torch.optim.AdamW
};

using Optimizer = std::variant<SGD, Adam, AdamW>;

// lr(step) for step = 1, 2, ...: linear warm-up from 0 over `warmup_steps`, then constant or a
// cosine decay as transformers' get_cosine_schedule_with_warmup: step s takes the cosine after
// s - 1 - warmup_steps of the total_steps - warmup_steps decaying steps, reaching min_lr_ratio * lr
// after the last (which itself still trains).
struct LrSchedule {
    enum class Decay { Constant, Cosine } decay = Decay::Constant;
    int64_t warmup_steps = 0;
    int64_t total_steps = 0;  // for Cosine
    double min_lr_ratio = 0;
    double factor(int64_t step) const;
};

double learning_rate(const Optimizer& opt);

}  // namespace mn
