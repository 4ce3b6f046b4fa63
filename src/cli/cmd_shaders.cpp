// `meganeura shaders`: every kernel of a model's programs (inference, and one training step) as the
// SPIR-V a device would run and, with --msl, as the Metal Shading Language MoltenVK would make of it.
// The kernels are specialized for the device opened here, or for a device profile (--caps), so the
// kernels an Apple GPU would get can be read and compiled on a machine without one.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "cli/commands.hpp"
#include "codegen/msl.hpp"
#include "common/caps_profiles.hpp"
#include "compiler/program_kernels.hpp"
#include "models/registry.hpp"
#include "models/smollm2.hpp"
#include "runtime/runtime.hpp"

namespace mn::cli {

namespace {

rt::DeviceCaps caps_of(const std::string& name) {
    if (name == "device") return Device::open().context()->caps();
    if (const rt::CapsProfile* p = rt::find_caps_profile(name)) return p->caps;
    std::string names;
    for (const rt::CapsProfile& p : rt::caps_profiles()) names += ", " + p.name;
    throw Error("no device profile '" + name + "'; profiles: device" + names);
}

void write(const std::filesystem::path& path, const char* data, size_t bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(data, static_cast<std::streamsize>(bytes));
    if (!out) throw Error("cannot write " + path.string());
}

// Writes each distinct kernel of the program (dispatches of one family variant share their SPIR-V)
// as NN-label.spv and .metal (spaces in a label as underscores), in the order of first dispatch; returns how many.
size_t write_program(const compiler::ProgramSchedule& program, const rt::DeviceCaps& caps, bool msl,
                     const std::filesystem::path& dir) {
    std::vector<codegen::KernelSource> kernels;
    for (const sched::Step& step : program.schedule.steps) kernels.push_back(step.kernel);
    std::map<std::string, size_t> index;  // GLSL -> its position in sources
    std::vector<std::string> sources, labels;
    for (const auto& k : kernels) {
        if (index.emplace(k.glsl, sources.size()).second) sources.push_back(k.glsl), labels.push_back(k.label);
    }
    const std::vector<codegen::Spirv> spirv = codegen::compile_glsl_parallel(sources, compiler::shader_options(caps));
    compiler::FitCheck fit(caps);
    for (const auto& k : kernels) fit.require(k, *spirv[index.at(k.glsl)]);
    if (std::error_code e; !std::filesystem::create_directories(dir, e) && e)
        throw Error("--out " + dir.string() + ": cannot create it: " + e.message());
    // dispatches.txt: every dispatch in order, its kernel's file, grid and workgroup size, its level (a barrier
    // between levels; "hoisted": before the run, sched::hoist_parameter_work) and the choice its family made
    // (KernelSource::choice: the variant, and why the others declined).
    std::string list;
    for (size_t i = 0; i < kernels.size(); ++i) {
        const codegen::KernelSource& k = kernels[i];
        char line[128];
        std::snprintf(line, sizeof line, "%03zu %ux%ux%u x %u  ", index.at(k.glsl), k.groups[0], k.groups[1], k.groups[2],
                      k.iface.local_size);
        const std::string level = i < program.hoisted ? "hoisted" : "L" + std::to_string(program.schedule.step_level[i]);
        list += line + level + "  " + k.label + (k.choice.empty() ? "" : ": " + k.choice) + "\n";
    }
    write(dir / "dispatches.txt", list.data(), list.size());
    for (size_t i = 0; i < sources.size(); ++i) {
        char stem[16];
        std::snprintf(stem, sizeof stem, "%03zu-", i);
        std::string label = labels[i];
        std::replace(label.begin(), label.end(), ' ', '_');  // "adamw x 62 tensors": no spaces in file names
        const std::filesystem::path base = dir / (stem + label);
        write(base.string() + ".spv", reinterpret_cast<const char*>(spirv[i]->data()), spirv[i]->size() * 4);
        if (!msl) continue;
        std::string metal;
        try {
            metal = codegen::spirv_to_msl(*spirv[i]);
        } catch (const Error& e) {
            throw Error("kernel " + base.filename().string() + ": " + e.what());
        }
        write(base.string() + ".metal", metal.data(), metal.size());
    }
    return sources.size();
}

int run_shaders(const Flags& f) {
    if (!f.positional().empty()) throw Error("shaders takes no arguments");
    const models::ModelEntry& entry = models::find_model(f.required("model"));
    const std::string& out = f.required("out");
    const models::ModelRequest request{.size = f.choice("size", {"tiny", "full"}), .config_path = f.str("config")};
    const Precision precision = parse_precision(f);
    const rt::DeviceCaps caps = caps_of(f.str("caps"));
    const models::BuiltModel model = entry.build(request);
    struct Program {
        std::string name;
        const Graph* graph;
        CompileOptions options;
    };
    std::vector<Program> programs = {{"inference", model.graph.get(), {.precision = precision}}};
    if (model.loss.valid()) programs.push_back({"training", model.graph.get(), {.loss = model.loss, .precision = precision}});
    // generate's one-token step over a KV cache of that many positions (models/generation.hpp), as it compiles it.
    models::BuiltModel decode;
    if (const int64_t cache = f.integer("decode", 0, INT32_MAX); cache > 0) {
        if (entry.name != "smollm2") throw Error("--decode is for a causal LM (smollm2), not " + entry.name);
        decode = models::build_llama_cached(models::LlamaConfig::from_request(request), 1, 1, cache);
        programs.push_back({"decode", decode.graph.get(), {.precision = precision, .read_back = std::vector<std::string>{"logits"}}});
    }
    for (const auto& [name, graph, options] : programs) {
        const compiler::ProgramSchedule program = compiler::program_schedule(*graph, caps, options, true);
        const std::filesystem::path dir = std::filesystem::path(out) / name;
        const size_t written = write_program(program, caps, f.on("msl"), dir);
        const std::vector<sched::Step>& steps = program.schedule.steps;
        const std::set<int32_t> levels(program.schedule.step_level.begin() + static_cast<std::ptrdiff_t>(program.hoisted),
                                       program.schedule.step_level.end());
        std::set<std::pair<std::string, std::vector<uint32_t>>> pipelines;  // a kernel's specializations, each one
        for (const sched::Step& step : steps) pipelines.emplace(step.kernel.glsl, step.kernel.spec_values);
        std::printf("%s %s for %s: %zu kernels (%zu pipelines), %zu dispatches a run in %zu levels (%zu hoisted) in %s\n",
                    entry.name.c_str(), name.c_str(), caps.name.c_str(), written, pipelines.size(),
                    steps.size() - program.hoisted, levels.size(), program.hoisted, dir.string().c_str());
    }
    return 0;
}

std::string profile_list() {
    std::string s;
    for (const rt::CapsProfile& p : rt::caps_profiles()) s += "\n  " + p.name + ": " + p.summary;
    return s;
}

}  // namespace

const Command shaders_command = {
    .name = "shaders",
    .summary = "write every kernel of a model's programs as SPIR-V and, with --msl, as Metal",
    .description =
        "Writes every kernel of a model's inference program and training step to --out (inference/ and\n"
        "training/, one NNN-label.spv per kernel; with --decode, generate's decode step too, in decode/),\n"
        "specialized for the device here or for a device profile; with --msl also each as Metal Shading\n"
        "Language (NNN-label.metal, through SPIRV-Cross, as MoltenVK would translate it). Shapes stay\n"
        "specialization constants (Metal function constants). dispatches.txt lists every dispatch: its\n"
        "kernel's number, grid x workgroup size, level (a barrier between levels; hoisted: run only when\n"
        "parameters change), label and the variant its family chose, with why the others declined. Device\n"
        "profiles (--caps):" +
        profile_list(),
    .options = {{"model", "", "NAME", "a model of the registry (meganeura models; required)"},
                {"size", "full", "SIZE", "tiny (the test configuration) or full (the published one)"},
                {"config", "", "FILE", "a Hugging Face config.json, overriding --size's configuration"},
                {"caps", "device", "NAME", "device: the Vulkan device here; or a device profile (listed above)"},
                precision_option(),
                {"out", "", "DIR", "where the kernels go (required)"},
                {"decode", "0", "N", "also generate's one-token decode step over a cache of N positions (smollm2)"},
                {"msl", "false", "", "also write each kernel as Metal Shading Language"}},
    .run = run_shaders,
};

}  // namespace mn::cli
