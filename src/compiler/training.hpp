#pragma once
// Training as graph rewriting: the backward graph, gradient clipping and the optimizer update of
// every f32 parameter are appended to the graph, ending in assign nodes that write the new
// parameter and moment values in place. The host feeds only the per-step scalars below.
#include <string>

#include "meganeura/session.hpp"

namespace mn::compiler {

// Scalar inputs the training graph reads each step.
inline constexpr const char* kLearningRate = "train.lr";
inline constexpr const char* kBiasCorrection1 = "train.bias_correction1";  // 1 - beta1^t
inline constexpr const char* kBiasCorrection2 = "train.bias_correction2";  // 1 - beta2^t
inline constexpr const char* kLossOutput = "loss";

// Data-parallel training (CompileOptions::data_parallel): the gradient of parameter NAME is the output
// "train.grad.NAME", which the host reduces across processes; the update reads the sum back from the
// input "train.reduced_grad.NAME" and divides it by the number of processes.
std::string gradient_output(const std::string& parameter);
std::string reduced_gradient_input(const std::string& parameter);

// Appends backward + update to `g` (a copy of the user's graph) and marks the loss an output.
void append_training(Graph& g, Tensor loss, const CompileOptions& options);

// The scalar feeds for step t (t = 1 for the first step).
struct StepScalars {
    float lr, bias_correction1, bias_correction2;
};
StepScalars step_scalars(const CompileOptions& options, int64_t t);

}  // namespace mn::compiler
