#pragma once
// The kernels of a program for a device known only by its DeviceCaps: compile's passes up to the
// ordered schedule (training appended, optimize, lower, order by level), with no Vulkan device
// opened and nothing allocated. `meganeura shaders` writes them out (as SPIR-V and Metal), and the
// caps tests check each one against device classes this machine does not have.
#include <map>
#include <utility>
#include <vector>

#include "codegen/device_fit.hpp"
#include "codegen/kernel.hpp"
#include "codegen/shader_compiler.hpp"
#include "common/device_caps.hpp"
#include "meganeura/session.hpp"
#include "optimize/optimize.hpp"
#include "schedule/schedule.hpp"

namespace mn::compiler {

// optimize/'s rewrites of the graph as the options ask, greedy or by equality saturation (MEGANEURA_OPTIMIZE=
// greedy|saturate overrides CompileOptions::saturate); the graph itself without CompileOptions::optimize.
Graph optimize_program(const Graph& graph, const CompileOptions& options, optimize::Stats* stats = nullptr);

// The schedule of the graph's outputs and assignments (compile's lower pass).
sched::Schedule lower_program(const Graph& graph, const sched::Tuning& tuning);

// The program's schedule ordered by level (with options.loss, one training step's); with `hoist`, a program that does
// not train has its steps that depend on parameters alone first, as compile runs them (sched::hoist_parameter_work:
// `hoisted` says how many).
struct ProgramSchedule {
    sched::Schedule schedule;
    size_t hoisted = 0;
};
ProgramSchedule program_schedule(const Graph& graph, const rt::DeviceCaps& caps, const CompileOptions& options,
                                 bool hoist = false);

// Every dispatch's kernel, in level order (program_schedule's, nothing hoisted).
std::vector<codegen::KernelSource> program_kernels(const Graph& graph, const rt::DeviceCaps& caps,
                                                   const CompileOptions& options);

// The SPIR-V target of a device: Vulkan 1.3's where it has 1.3, else 1.2's; with the cooperative
// matrices rewritten to KHR ones where sched::choose_coop picks that path.
codegen::ShaderOptions shader_options(const rt::DeviceCaps& caps);

// Kernels checked against the device's limits: an mn::Error naming the kernel and every limit it passes
// (codegen/device_fit.hpp). A shader's needs depend on its specialization alone, so they are read once per shader and
// specialization: SmolLM2-135M's step is 1,299 kernels of 54 pipelines on lavapipe (reading each took 15 ms of a warm
// compile on two cores).
class FitCheck {
public:
    explicit FitCheck(const rt::DeviceCaps& caps) : caps_(caps) {}
    void require(const codegen::KernelSource& kernel, const std::vector<uint32_t>& spirv);

private:
    const rt::DeviceCaps& caps_;
    std::map<std::pair<const std::vector<uint32_t>*, std::vector<uint32_t>>, codegen::SpirvNeeds> needs_;
};

}  // namespace mn::compiler
