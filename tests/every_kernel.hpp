#pragma once
// Every kernel of every model, for a device known only by its caps: each model of the registry at its
// tiny size (the kernel families and their variants are those of the full one), its inference program
// and one training step, and SmolLM2's decode step, in both precisions. The caps tests and the Metal
// test walk these.
#include <map>
#include <string>
#include <vector>

#include "codegen/shader_compiler.hpp"
#include "compiler/program_kernels.hpp"
#include "models/registry.hpp"
#include "models/smollm2.hpp"

namespace mn::test {

struct ProgramKernels {
    std::string name;  // "smollm2 training fast"
    std::vector<codegen::KernelSource> kernels;
};

inline std::vector<ProgramKernels> every_program(const rt::DeviceCaps& caps) {
    std::vector<ProgramKernels> out;
    for (const models::ModelEntry& e : models::model_table()) {
        const models::BuiltModel m = e.build({.size = "tiny"});
        for (const Precision p : {Precision::Strict, Precision::Fast}) {
            const std::string suffix = p == Precision::Fast ? " fast" : " strict";
            out.push_back({e.name + " inference" + suffix, compiler::program_kernels(*m.graph, caps, {.precision = p})});
            out.push_back({e.name + " training" + suffix,
                           compiler::program_kernels(*m.graph, caps, {.loss = m.loss, .precision = p})});
        }
    }
    // generate's decode step over a 4K cache, whose keys are split across workgroups (flash-decoding).
    const models::BuiltModel decode = models::build_llama_cached(models::LlamaConfig::tiny(), 1, 1, 4096);
    for (const Precision p : {Precision::Strict, Precision::Fast}) {
        out.push_back({std::string("smollm2 decode at 4096") + (p == Precision::Fast ? " fast" : " strict"),
                       compiler::program_kernels(*decode.graph, caps, {.precision = p})});
    }
    return out;
}

// The SPIR-V of every distinct kernel source of `programs`, for that device's target.
inline std::map<std::string, codegen::Spirv> compile_every_kernel(const std::vector<ProgramKernels>& programs,
                                                                  const rt::DeviceCaps& caps) {
    std::vector<std::string> sources;
    std::map<std::string, codegen::Spirv> spirv;
    for (const ProgramKernels& p : programs) {
        for (const codegen::KernelSource& k : p.kernels)
            if (spirv.emplace(k.glsl, nullptr).second) sources.push_back(k.glsl);
    }
    const std::vector<codegen::Spirv> compiled = codegen::compile_glsl_parallel(sources, compiler::shader_options(caps));
    for (size_t i = 0; i < sources.size(); ++i) spirv[sources[i]] = compiled[i];
    return spirv;
}

}  // namespace mn::test
