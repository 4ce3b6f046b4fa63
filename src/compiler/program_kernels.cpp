#include "compiler/program_kernels.hpp"

#include <string>

#include <vulkan/vulkan.h>

#include "compiler/training.hpp"
#include "schedule/env.hpp"

namespace mn::compiler {

Graph optimize_program(const Graph& graph, const CompileOptions& options, optimize::Stats* stats) {
    if (!options.optimize) return graph;
    optimize::Options o{.saturate = options.saturate};
    if (const auto mode = env_choice("MEGANEURA_OPTIMIZE", {"greedy", "saturate"})) o.saturate = *mode == "saturate";
    if (options.saturate_nodes) o.budget.nodes = options.saturate_nodes;
    if (options.saturate_ms > 0) o.budget.ms = options.saturate_ms;
    return optimize::optimize(graph, o, stats);
}

sched::Schedule lower_program(const Graph& graph, const sched::Tuning& tuning) {
    std::vector<int32_t> roots;
    for (const auto& [name, id] : graph.outputs()) roots.push_back(id);
    for (size_t i = 0; i < graph.nodes().size(); ++i) {
        if (graph.nodes()[i].op == Op::Assign) roots.push_back(static_cast<int32_t>(i));
    }
    if (roots.empty()) throw Error("compile: the graph has no outputs (mark them with graph.output(name, tensor))");
    return sched::lower(graph, roots, tuning);
}

ProgramSchedule program_schedule(const Graph& graph, const rt::DeviceCaps& caps, const CompileOptions& options,
                                 bool hoist) {
    Graph program = graph;
    if (options.loss) {
        if (options.loss->graph != &graph) throw Error("compile: the loss belongs to another graph");
        append_training(program, program.handle(options.loss->id), options);
    }
    program = optimize_program(program, options);
    const sched::Tuning tuning = sched::tune_for(caps, options.precision, options.loss.has_value());
    ProgramSchedule out{.schedule = lower_program(program, tuning)};
    sched::order_by_level(out.schedule);
    if (hoist && !options.loss) out.hoisted = sched::hoist_parameter_work(out.schedule);
    return out;
}

std::vector<codegen::KernelSource> program_kernels(const Graph& graph, const rt::DeviceCaps& caps,
                                                   const CompileOptions& options) {
    std::vector<codegen::KernelSource> kernels;
    for (sched::Step& step : program_schedule(graph, caps, options).schedule.steps) kernels.push_back(std::move(step.kernel));
    return kernels;
}

codegen::ShaderOptions shader_options(const rt::DeviceCaps& caps) {
    codegen::ShaderOptions o;
    o.vulkan_minor = caps.api_version >= VK_API_VERSION_1_3 ? 3 : 2;
    o.coop_khr = sched::choose_coop(caps).path == sched::CoopPath::Khr;
    return o;
}

void FitCheck::require(const codegen::KernelSource& kernel, const std::vector<uint32_t>& spirv) {
    auto [it, fresh] = needs_.try_emplace({&spirv, kernel.spec_values});
    if (fresh) {
        try {
            it->second = codegen::spirv_needs(spirv, kernel.spec_values);
        } catch (const Error& e) {
            needs_.erase(it);
            throw Error("kernel " + kernel.label + ": " + e.what());
        }
    }
    const std::vector<std::string> misfits = codegen::device_misfits(kernel, it->second, caps_);
    if (misfits.empty()) return;
    std::string text;
    for (const std::string& m : misfits) text += "; " + m;
    throw Error("kernel " + kernel.label + " does not fit " + caps_.name + text.replace(0, 1, ":"));
}

}  // namespace mn::compiler
