// The compiler driver: a list of named passes from a graph to a recorded program.
//   optimize -> tune (tiles for the device) -> lower (schedule/, with pointwise fusion) -> order by level ->
//   place values (memory/) -> kernels: shaders (codegen/) and their pipelines, beside allocate and initialize ->
//   record (runtime/)
// Each pass is a function below; compile_graph runs them in order and times each one.
// MEGANEURA_DEBUG=1 prints the plan, MEGANEURA_DEBUG=3 also every kernel's GLSL.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>

#include "codegen/families.hpp"
#include "codegen/shader_compiler.hpp"
#include "common/parallel.hpp"
#include "compiler/check.hpp"
#include "compiler/coop_self_test.hpp"
#include "compiler/data_parallel.hpp"
#include "compiler/dump.hpp"
#include "compiler/hazards.hpp"
#include "compiler/initial_values.hpp"
#include "compiler/program_kernels.hpp"
#include "compiler/session_impl.hpp"
#include "compiler/training.hpp"
#include "memory/placement.hpp"
#include "optimize/optimize.hpp"
#include "runtime/runtime.hpp"

namespace mn {

namespace {

int debug_level() {
    const char* e = std::getenv("MEGANEURA_DEBUG");
    return e ? std::atoi(e) : 0;
}

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Inputs, parameters and state by name, and the outputs; leaves no output depends on stay known
// (value -1) so that setting them is harmless.
void name_values(Session::Impl& impl, const Graph& graph) {
    const sched::Schedule& s = impl.schedule;
    for (size_t i = 0; i < graph.nodes().size(); ++i) {
        const Node& n = graph.nodes()[i];
        if (n.op == Op::Input || n.op == Op::Parameter || n.op == Op::State) impl.names[n.name] = s.node_value[i];
        if ((n.op == Op::Parameter || n.op == Op::State) && s.node_value[i] >= 0) impl.checkpointed.insert(n.name);
    }
    for (const auto& [name, id] : graph.outputs()) impl.names[name] = s.node_value[static_cast<size_t>(id)];
}

// ---- pass: kernels (each distinct source compiled once, and each distinct pipeline of it, in parallel) ----
// A source's pipelines (one per shape it runs at) are queued the moment its SPIR-V is ready, and start before any
// source still waiting, the largest first: the driver's compiles, most of the pass, overlap glslang's. As two passes
// (every source, then every pipeline) each ended with cores idle while its longest jobs ran alone: the cold compiles
// of four models' programs on the H100 took 3-20% less time this way (bench/results/2026-12-06-session40-h100.md).
struct Kernels {
    std::vector<const rt::Pipeline*> step_pipelines;  // the schedule's steps', in order
    const rt::Pipeline* drawing = nullptr;            // the initial values' kernel, where `drawn` asks for one
};

// Every dispatch is checked against the device's limits here, before the driver sees its kernel; with `drawn`, the
// kernel that draws initial values is made too (push constants, one binding).
Kernels compile_kernels(Session::Impl& impl, const codegen::KernelSource* drawn) {
    const sched::Schedule& s = impl.schedule;
    // A distinct source, and its variants: each distinct pipeline of it (a spec-constant set) with the steps that run it.
    struct Variant {
        const codegen::KernelSource* kernel;
        rt::Context::PipelineRequest request;  // all but the SPIR-V, until the source is compiled
        std::vector<size_t> steps;
        const rt::Pipeline* made = nullptr;
    };
    struct Source {
        const std::string* glsl;
        std::vector<Variant> variants;
        codegen::Spirv spirv;
    };
    std::vector<Source> sources;
    std::unordered_map<std::string_view, size_t> index;
    auto variant_of = [&](const codegen::KernelSource& kernel, rt::Context::PipelineRequest request) -> Variant& {
        const auto [it, fresh] = index.emplace(kernel.glsl, sources.size());
        if (fresh) sources.push_back({&kernel.glsl});
        auto& variants = sources[it->second].variants;
        const auto same = [&](const rt::Context::PipelineRequest& r) {
            return r.spec_constants == request.spec_constants && r.bindings == request.bindings &&
                   r.push_constant_bytes == request.push_constant_bytes && r.required_subgroup_size == request.required_subgroup_size;
        };
        for (Variant& v : variants)
            if (same(v.request)) return v;
        return variants.emplace_back(Variant{&kernel, std::move(request)});
    };
    for (size_t i = 0; i < s.steps.size(); ++i) {
        const codegen::KernelSource& k = s.steps[i].kernel;
        variant_of(k, {nullptr, k.spec_values, static_cast<uint32_t>(k.iface.bindings.size()), 0, k.required_subgroup_size})
            .steps.push_back(i);
    }
    const Variant* drawing = drawn ? &variant_of(*drawn, {nullptr, {}, 1, codegen::kInitialValuesPushBytes, 0}) : nullptr;

    const codegen::ShaderOptions options = compiler::shader_options(impl.ctx->caps());
    std::mutex failing;
    std::exception_ptr error;  // the first failed job's
    auto guarded = [&](auto&& work) {
        try {
            work();
        } catch (...) {
            std::lock_guard lock(failing);
            if (!error) error = std::current_exception();
        }
    };
    // Longest first, by size: a source's glslang time grows with its GLSL, a pipeline's driver time with its SPIR-V.
    // Every pipeline ranks above every source (kPipeline added to its size): it is the most of the work, and once its
    // source is compiled nothing else is waiting on it.
    constexpr double kPipeline = 1e12;
    JobQueue queue;
    for (Source& source : sources) {
        queue.add(static_cast<double>(source.glsl->size()), [&] {
            guarded([&] {
                source.spirv = codegen::compile_glsl(*source.glsl, options);
                compiler::FitCheck fit(impl.ctx->caps());
                for (Variant& v : source.variants) {
                    if (!v.steps.empty()) fit.require(*v.kernel, *source.spirv);
                    v.request.spirv = source.spirv.get();
                }
                for (Variant& v : source.variants) {
                    queue.add(kPipeline + static_cast<double>(source.spirv->size()),
                              [&] { guarded([&] { v.made = impl.ctx->prepare_pipelines({v.request}).front(); }); });
                }
            });
        });
    }
    queue.run();
    if (error) std::rethrow_exception(error);

    Kernels out{.step_pipelines = std::vector<const rt::Pipeline*>(s.steps.size()), .drawing = drawing ? drawing->made : nullptr};
    for (const Source& source : sources)
        for (const Variant& v : source.variants)
            for (size_t i : v.steps) out.step_pipelines[i] = v.made;
    return out;
}

// Before anything is compiled or allocated: a tensor no binding can hold.
void require_storage_range(const sched::Schedule& s, uint64_t max_range) {
    for (const auto& v : s.values) {
        if (v.bytes() > max_range) {
            throw Error("compile: a tensor of shape " + shape_str(v.shape) + " (" + std::to_string(v.bytes()) +
                        " bytes) exceeds the device's storage-buffer range of " + std::to_string(max_range) + " bytes");
        }
    }
}

// ---- pass: allocate (device buffers, staging, MEGANEURA_CHECK's snapshot) ----
void allocate(Session::Impl& impl, const Graph& graph, const memory::Placement& placement) {
    const sched::Schedule& s = impl.schedule;
    const size_t nv = s.values.size();
    impl.pinned = rt::Buffer(impl.ctx, std::max<uint64_t>(placement.pinned_bytes, 4), rt::MemoryKind::DeviceLocal);
    impl.arena = rt::Buffer(impl.ctx, std::max<uint64_t>(placement.arena.physical_bytes, 4), rt::MemoryKind::DeviceLocal);
    impl.home.assign(nv, nullptr);
    impl.offset = placement.offset;
    for (size_t v = 0; v < nv; ++v) {
        if (placement.pinned[v]) impl.home[v] = &impl.pinned;
    }
    for (int32_t v : placement.arena_values) impl.home[static_cast<size_t>(v)] = &impl.arena;

    uint64_t upload_bytes = 0, readback_bytes = 0;
    std::set<int32_t> reduced;
    std::set<std::string> gradients;
    for (const auto& e : impl.exchanged) reduced.insert(e.reduced);
    for (const Node& n : graph.nodes())
        if (n.op == Op::Parameter && impl.training) gradients.insert(compiler::gradient_output(n.name));
    for (size_t v = 0; v < nv; ++v) {
        if (s.values[v].storage == sched::Storage::Input && s.values[v].view_of < 0 && !reduced.count(static_cast<int32_t>(v))) {
            impl.upload_at[static_cast<int32_t>(v)] = upload_bytes;
            upload_bytes += align_up(std::max<uint64_t>(s.values[v].bytes(), 4), 16);
        }
    }
    const auto& read_back = impl.options.read_back;
    for (const auto& [name, id] : graph.outputs()) {
        const bool exchanged = !impl.exchanged.empty();  // reads the loss back, and its gradients by themselves
        if (exchanged && gradients.count(name)) continue;
        if (read_back && std::find(read_back->begin(), read_back->end(), name) == read_back->end() &&
            !(exchanged && name == compiler::kLossOutput))
            continue;
        const int32_t r = s.root(s.node_value[static_cast<size_t>(id)]);
        if (impl.readback_at.count(r)) continue;
        impl.readback_at[r] = readback_bytes;
        readback_bytes += align_up(std::max<uint64_t>(s.values[static_cast<size_t>(r)].bytes(), 4), 16);
    }
    // The exchanged gradients last, end to end and in the same order in both buffers (their padding
    // zero, the memset below), so that adjacent ones reduce as one span.
    for (auto& e : impl.exchanged) {
        e.readback_at = readback_bytes;
        e.upload_at = upload_bytes;
        readback_bytes += 4 * e.floats;
        upload_bytes += 4 * e.floats;
    }
    if (impl.check_graph) {
        uint64_t snapshot_bytes = 0;
        for (size_t i = 0; i < s.steps.size(); ++i) {
            for (size_t b = 0; b < s.steps[i].values.size(); ++b) {
                if (!s.steps[i].kernel.iface.bindings[b].writes) continue;
                impl.checked_writes.push_back({i, b, snapshot_bytes});
                snapshot_bytes += align_up(impl.range(s.steps[i].values[b]).size, 16);
            }
        }
        impl.check_snapshot = rt::Buffer(impl.ctx, std::max<uint64_t>(snapshot_bytes, 4), rt::MemoryKind::Readback);
    }
    // The inputs are copied from it at every run; a data-parallel step's reduced gradients are written into it by the
    // all-reduce, which may read what it writes (slow from device memory through the BAR window): host memory then.
    impl.upload = rt::Buffer(impl.ctx, std::max<uint64_t>(upload_bytes, 4),
                             impl.exchanged.empty() ? rt::MemoryKind::Inputs : rt::MemoryKind::Upload);
    impl.readback = rt::Buffer(impl.ctx, std::max<uint64_t>(readback_bytes, 4), rt::MemoryKind::Readback);
    std::memset(impl.upload.mapped(), 0, impl.upload.size());
    std::memset(impl.readback.mapped(), 0, impl.readback.size());
}

// ---- pass: initialize (constants, and parameters and state from their Init; CompileOptions::skip_init's zero) ----
// How each value with an initial value gets it: a value that holds one word everywhere (zeros above all: the
// optimizer's state; the parameters skip_init names) is a device fill; the device draws the random values of f32
// parameters and state where it has 64-bit types (codegen::initial_values_kernel; staged, SmolLM2-135M's 135M values
// took 134-269 ms of a warm compile on the H200's host, bench/results/2026-12-03-h200-session21.md); the rest goes
// through staging, in pieces written on every core.
struct InitialValues {
    std::vector<std::pair<int32_t, uint32_t>> filled;  // value, word
    std::vector<int32_t> drawn, staged;
};

InitialValues initial_values(const Session::Impl& impl, const Graph& graph) {
    const bool draws = impl.ctx->caps().shader_int64 && impl.ctx->caps().shader_float64;
    const sched::Schedule& s = impl.schedule;
    InitialValues out;
    for (size_t v = 0; v < s.values.size(); ++v) {
        const sched::Value& val = s.values[v];
        if (val.storage == sched::Storage::Counters) out.filled.emplace_back(static_cast<int32_t>(v), 0u);
        if (val.node < 0 || (val.view_of >= 0 && val.part_at < 0)) continue;  // a leaf's part of a stack is its own
        const Node& n = graph.node(val.node);
        if (n.op != Op::Constant && n.op != Op::Parameter && n.op != Op::State) continue;
        const bool random = n.op != Op::Constant && (n.init.kind == Init::Uniform || n.init.kind == Init::Normal);
        if (n.op == Op::Parameter && impl.options.skip_init && impl.options.skip_init(n.name)) {
            out.filled.emplace_back(static_cast<int32_t>(v), 0u);  // the caller's values come next
        } else if (const std::optional<uint32_t> word = compiler::fill_word(n)) {
            out.filled.emplace_back(static_cast<int32_t>(v), *word);
        } else if (draws && random && n.dtype == DType::F32) {
            out.drawn.push_back(static_cast<int32_t>(v));
        } else {
            out.staged.push_back(static_cast<int32_t>(v));
        }
    }
    return out;
}

// The fills and the staged values (the draws wait for their pipeline: draw_on_device).
void initialize(Session::Impl& impl, const Graph& graph, const InitialValues& values) {
    constexpr int64_t kPiece = 1 << 18;  // elements: 1 MiB of f32, 515 pieces for SmolLM2's 135M
    const sched::Schedule& s = impl.schedule;
    if (!values.filled.empty()) {
        rt::Program fills(impl.ctx);
        for (const auto& [v, word] : values.filled) fills.fill(impl.range(v), word);
        fills.finish();
        fills.run();
    }
    const std::vector<int32_t>& staged = values.staged;
    impl.write_pieces(staged, kPiece, [&](size_t i, int64_t begin, int64_t end, uint8_t* dst) {
        const Node& n = graph.node(s.values[static_cast<size_t>(staged[i])].node);
        if (n.op == Op::Constant) {
            compiler::write_constant(n, begin, end, dst);
        } else {
            compiler::write_initial_values(n, impl.options.seed, begin, end, dst);
        }
    });
}

// The initial values of `drawn` (InitialValues), one dispatch each of `kernel`'s pipeline.
void draw_on_device(Session::Impl& impl, const Graph& graph, const std::vector<int32_t>& drawn,
                    const codegen::KernelSource& kernel, const rt::Pipeline& pipeline) {
    const codegen::Launch launch;
    rt::Program draws(impl.ctx);
    for (int32_t v : drawn) {
        const sched::Value& val = impl.schedule.values[static_cast<size_t>(v)];
        const compiler::DrawnValues d = compiler::drawn_values(graph.node(val.node), impl.options.seed);
        const int64_t count = numel(val.shape);
        draws.dispatch({.pipeline = &pipeline, .bindings = {impl.range(v)},
                        .groups = codegen::grid_for((static_cast<uint64_t>(count) + kernel.iface.local_size - 1) /
                                                        kernel.iface.local_size, launch.max_groups),
                        .push_constants = codegen::initial_values_push(d.key, d.normal, d.a, d.b, count),
                        .label = kernel.label});
    }
    draws.finish();
    draws.run();
}

// ---- pass: record (uploads, dispatches with the barriers their hazards need, readbacks) ----
// One recorded program: the steps [first, end), after copying `uploads` (value, offset in the upload
// buffer) to the device, and before copying `readbacks` (value, offset in the readback buffer) back.
// All of the steps; or (first = Impl::hoisted_steps) the run that skips the steps hoisted for unchanged
// parameters, whose pinned results it must not poison; or one of a data-parallel step's two programs,
// the second of which must not poison what the first computed for it; or a segment of the first
// (after_earlier: it opens with a barrier, since it reads what the earlier segments wrote).
struct ProgramPart {
    size_t first = 0, end = 0;
    std::vector<std::pair<int32_t, uint64_t>> uploads, readbacks;
    bool poison = false, after_earlier = false;
    std::vector<int32_t> poisoned;  // where poison: the outputs filled with NaN first (the readbacks of all parts)
};

std::unique_ptr<rt::Program> record_program(Session::Impl& impl, const std::vector<const rt::Pipeline*>& step_pipelines,
                                            const ProgramPart& part) {
    const sched::Schedule& s = impl.schedule;
    auto prog_ptr = std::make_unique<rt::Program>(impl.ctx);
    rt::Program& prog = *prog_ptr;
    compiler::HazardTracker hazards;
    auto command = [&](const std::vector<compiler::Access>& acc) {
        if (hazards.needs_barrier(acc)) {
            prog.barrier();
            hazards.barrier();
        }
        hazards.record(acc);
    };
    if (part.after_earlier) prog.barrier();
    for (const auto& [v, at] : part.uploads) {
        const rt::BufferRange dst = impl.range(v);
        command({{dst.buffer, dst.offset, dst.offset + dst.size, true}});
        prog.copy({&impl.upload, at, dst.size}, dst);
    }
    std::set<int32_t> kept;  // what the skipped steps computed in an earlier run
    for (size_t i = 0; i < part.first; ++i) {
        for (size_t b = 0; b < s.steps[i].values.size(); ++b)
            if (s.steps[i].kernel.iface.bindings[b].writes) kept.insert(s.root(s.steps[i].values[b]));
    }
    if (part.poison) {
        constexpr uint32_t kNaN = 0x7FC00000u;  // also a NaN pair in f16
        command({{&impl.arena, 0, impl.arena.size(), true}});
        prog.fill({&impl.arena, 0, impl.arena.size()}, kNaN);
        for (const int32_t v : part.poisoned) {
            if (s.values[static_cast<size_t>(v)].storage != sched::Storage::Transient || kept.count(v)) continue;
            const rt::BufferRange r = impl.range(v);
            command({{r.buffer, r.offset, r.offset + r.size, true}});
            prog.fill(r, kNaN);
        }
    }
    auto checked_write = impl.checked_writes.begin();
    for (size_t i = part.first; i < part.end; ++i) {
        const sched::Step& step = s.steps[i];
        const auto& k = step.kernel;
        rt::Dispatch d{.pipeline = step_pipelines[i],
                       .groups = k.groups, .label = k.label, .name = impl.dispatch_names.at(i).name};
        std::vector<compiler::Access> acc;
        for (size_t b = 0; b < step.values.size(); ++b) {
            const rt::BufferRange r = impl.range(step.values[b]);
            d.bindings.push_back(r);
            acc.push_back({r.buffer, r.offset, r.offset + r.size, k.iface.bindings[b].writes});
        }
        command(acc);
        prog.dispatch(std::move(d));
        for (; checked_write != impl.checked_writes.end() && checked_write->step == i; ++checked_write) {
            const rt::BufferRange src = impl.range(step.values[checked_write->binding]);
            const rt::BufferRange dst{&impl.check_snapshot, checked_write->at, src.size};
            command({{src.buffer, src.offset, src.offset + src.size, false}, {dst.buffer, dst.offset, dst.offset + dst.size, true}});
            prog.copy(src, dst);
        }
    }
    for (const auto& [v, at] : part.readbacks) {
        const rt::BufferRange src = impl.range(v);
        command({{src.buffer, src.offset, src.offset + src.size, false}});
        prog.copy(src, {&impl.readback, at, src.size});
    }
    prog.finish(impl.profiled);
    return prog_ptr;
}

// The programs of a data-parallel step: the forward and backward in segments, one a bucket of gradients
// (Impl::bucket_ends), each reading its bucket back, the last also the loss and the outputs; then the
// update, uploading the reduced gradients (and reading back any output it writes).
void record_data_parallel(Session::Impl& impl, const std::vector<const rt::Pipeline*>& step_pipelines) {
    const sched::Schedule& s = impl.schedule;
    std::set<int32_t> updated;
    for (size_t i = impl.first_update_step; i < s.steps.size(); ++i)
        for (size_t b = 0; b < s.steps[i].values.size(); ++b)
            if (s.steps[i].kernel.iface.bindings[b].writes) updated.insert(s.root(s.steps[i].values[b]));
    ProgramPart update{.first = impl.first_update_step, .end = s.steps.size()};
    std::vector<ProgramPart> segments;
    for (size_t k = 0, first = 0, begin = 0; k < impl.bucket_ends.size(); begin = impl.bucket_ends[k++]) {
        const bool last = k + 1 == impl.bucket_ends.size();
        const size_t end = last ? impl.first_update_step : impl.exchanged[impl.bucket_ends[k] - 1].finished;
        ProgramPart part{.first = first, .end = end, .after_earlier = k > 0};
        if (k == 0) part.uploads = {impl.upload_at.begin(), impl.upload_at.end()}, part.poison = impl.options.poison_outputs;
        for (size_t i = begin; i < impl.bucket_ends[k]; ++i) {
            part.readbacks.emplace_back(impl.exchanged[i].gradient, impl.exchanged[i].readback_at);
            update.uploads.emplace_back(impl.exchanged[i].reduced, impl.exchanged[i].upload_at);
        }
        if (last)
            for (const auto& [v, at] : impl.readback_at) (updated.count(v) ? update : part).readbacks.emplace_back(v, at);
        segments.push_back(std::move(part));
        first = end;
    }
    for (const ProgramPart& part : segments)
        for (const auto& [v, at] : part.readbacks) segments[0].poisoned.push_back(v);
    impl.program = record_program(impl, step_pipelines, segments[0]);
    impl.later_segments.clear();
    for (size_t k = 1; k < segments.size(); ++k) impl.later_segments.push_back(record_program(impl, step_pipelines, segments[k]));
    impl.update_program = record_program(impl, step_pipelines, update);
}

void record(Session::Impl& impl) {
    const sched::Schedule& s = impl.schedule;
    const auto& step_pipelines = impl.step_pipelines;
    impl.profiled = impl.options.profile && impl.ctx->caps().timestamps;
    if (!impl.exchanged.empty()) return record_data_parallel(impl, step_pipelines);
    ProgramPart whole{.first = 0, .end = s.steps.size(), .uploads = {impl.upload_at.begin(), impl.upload_at.end()},
                      .readbacks = {impl.readback_at.begin(), impl.readback_at.end()},
                      .poison = impl.options.poison_outputs};
    for (const auto& [v, at] : whole.readbacks) whole.poisoned.push_back(v);
    impl.program = record_program(impl, step_pipelines, whole);
    if (impl.hoisted_steps) {
        ProgramPart steady = whole;
        steady.first = impl.hoisted_steps;
        impl.steady_program = record_program(impl, step_pipelines, steady);
    }
}

void print_debug(const Session::Impl& impl) {
    const SessionStats& st = impl.stats;
    std::fprintf(stderr, "meganeura: %zu values, %zu dispatches, %zu barriers, %zu pipelines; arena %llu of %llu "
                 "logical bytes, pinned %llu; compiled in %.1f ms\n", impl.schedule.values.size(), st.dispatches,
                 st.barriers, st.pipelines, static_cast<unsigned long long>(st.physical_bytes),
                 static_cast<unsigned long long>(st.logical_bytes), static_cast<unsigned long long>(st.pinned_bytes),
                 st.compile_ms);
    std::fprintf(stderr, "  cooperative matrices: %s (%s)\n", sched::coop_path_name(impl.coop.path), impl.coop.why);
    for (const auto& [pass, ms] : st.pass_ms) std::fprintf(stderr, "  pass %-10s %8.1f ms\n", pass.c_str(), ms);
    std::set<const rt::Pipeline*> shown;  // a pipeline's creation time at its first step only
    for (size_t i = 0; i < impl.schedule.steps.size(); ++i) {
        const auto& step = impl.schedule.steps[i];
        const rt::Pipeline* pipeline = impl.step_pipelines[i];
        char created[48] = "";
        if (shown.insert(pipeline).second) std::snprintf(created, sizeof created, " (pipeline %.1f ms)", pipeline->create_ms);
        std::fprintf(stderr, "  %-20s groups %ux%ux%u%s%s%s\n", step.kernel.label.c_str(), step.kernel.groups[0],
                     step.kernel.groups[1], step.kernel.groups[2], created, step.kernel.choice.empty() ? "" : ": ",
                     step.kernel.choice.c_str());
        if (const std::string& s = impl.step_pipelines[i]->statistics; !s.empty())
            std::fprintf(stderr, "    driver: %s\n", s.c_str());
        if (debug_level() >= 3) std::fprintf(stderr, "%s\n", step.kernel.glsl.c_str());
    }
}

Session compile_graph(const Graph& built, const Device& device, const CompileOptions& options,
                      std::chrono::steady_clock::time_point t0) {
    auto impl = std::make_unique<Session::Impl>();
    impl->options = options;
    impl->training = options.loss.has_value();
    impl->ctx = device.context();
    const rt::DeviceCaps& caps = impl->ctx->caps();
    // Wall time per pass, in SessionStats::pass_ms (autodiff and optimizer appending count as "build"),
    // and MEGANEURA_DUMP's view of the state after the pass it names.
    const std::string dump = compiler::dump_pass();
    auto mark_time = t0;
    auto mark = [&](const char* pass, auto&& dump_text) {
        const auto now = std::chrono::steady_clock::now();
        impl->stats.pass_ms.emplace_back(pass, std::chrono::duration<double, std::milli>(now - mark_time).count());
        mark_time = now;
        if (dump == pass) std::fputs(dump_text().c_str(), stderr);
    };
    const auto nothing = [] { return std::string(); };
    mark("build", [&] { return built.str(); });

    optimize::Stats rewrites;
    const Graph graph = compiler::optimize_program(built, options, &rewrites);
    verify_graph(graph);  // autodiff, the optimizer's update and the optimize pass append through Graph::emit
    if (const optimize::SaturationReport& r = rewrites.saturation; debug_level() >= 1 && r.rounds) {
        std::fprintf(stderr, "meganeura: optimize by saturation: %zu -> %zu nodes; e-graph %zu e-nodes in %zu classes, %zu rounds, "
                     "stopped: %s, %.1f ms\n", built.nodes().size(), graph.nodes().size(), r.enodes, r.classes, r.rounds,
                     r.stop.c_str(), r.ms);
    }
    mark("optimize", [&] { return graph.str(); });
    // MEGANEURA_CHECK reads every intermediate value after the run: none may share bytes.
    if (const double limit = compiler::check_limit(options.precision); limit > 0) {
        impl->check_graph = std::make_shared<const Graph>(graph);
        impl->check_limit = limit;
    }

    sched::Tuning tuning = sched::tune_for(caps, options.precision, impl->training);
    // A device's first fast compile checks its cooperative matrices (coop_self_test.hpp): a compile and a run
    // of its own, 0.2-0.45 s of a cold compile on the H200 when it ran first. It runs beside this compile,
    // which takes the cooperative kernels as if the check had passed and, in the rare case that it fails,
    // starts again on the f32 kernels (below, "check": the wait for it).
    std::future<bool> check;
    if (tuning.matmul.coop_subgroup) {
        const std::optional<bool> known = compiler::known_cooperative_verdict(device, tuning.coop.path);
        if (known == false) {
            tuning.coop = {sched::CoopPath::None, "the device's cooperative matrices failed the start-up check"};
            tuning.matmul.coop_subgroup = 0;
            tuning.matmul.coop_declined = tuning.coop.why;
            tuning.f16_weights = false;
        } else if (!known) {
            check = std::async(std::launch::async, [&device, path = tuning.coop.path] {
                return compiler::cooperative_matrices_work(device, path);
            });
        }
    }
    impl->coop = tuning.coop;
    mark("tune", nothing);
    impl->schedule = compiler::lower_program(graph, tuning);
    sched::Schedule& s = impl->schedule;
    mark("lower", [&] { return compiler::dump_schedule(s, graph, false); });

    sched::order_by_level(s);  // independent steps share a barrier
    // Training changes the parameters every run, and MEGANEURA_CHECK needs every step in each run.
    if (!impl->training && !impl->check_graph) impl->hoisted_steps = sched::hoist_parameter_work(s);
    if (impl->training && options.data_parallel) {
        if (impl->check_graph) throw Error("compile: MEGANEURA_CHECK does not check a data-parallel step (its update is a "
                                           "second program); check the same training without data_parallel");
        impl->exchanged = compiler::exchanged_gradients(graph, s);
        std::vector<int32_t> reduced;
        for (const auto& e : impl->exchanged) reduced.push_back(e.reduced);
        impl->first_update_step = sched::split_update(s, reduced);
        compiler::order_by_completion(*impl);
    }
    mark("order", [&] { return compiler::dump_schedule(s, graph, true); });
    name_values(*impl, graph);

    const memory::Placement placement =
        memory::place_values(s, tuning.binding_alignment, options.plan_memory && !impl->check_graph);
    mark("plan", [&] {
        return compiler::dump_plan(s, placement.first, placement.last, placement.arena_values, placement.arena);
    });

    // The values are allocated and initialized on a thread of their own while the shaders and pipelines
    // compile: each keeps the cores busy only in stretches (a driver compiling one large kernel; the
    // device copying staged weights). Neither touches what the other writes; "initialize" is the wait
    // for it after the pipelines.
    require_storage_range(s, caps.max_storage_buffer_range);
    const InitialValues initial = initial_values(*impl, graph);
    std::future<void> values = std::async(std::launch::async, [&] {
        allocate(*impl, graph, placement);
        initialize(*impl, graph, initial);
    });
    const codegen::KernelSource draws = initial.drawn.empty() ? codegen::KernelSource{} : codegen::initial_values_kernel({});
    const Kernels kernels = compile_kernels(*impl, initial.drawn.empty() ? nullptr : &draws);
    impl->step_pipelines = kernels.step_pipelines;
    impl->stats.pipelines = std::set<const rt::Pipeline*>(impl->step_pipelines.begin(), impl->step_pipelines.end()).size();
    mark("kernels", nothing);
    values.get();
    if (kernels.drawing) draw_on_device(*impl, graph, initial.drawn, draws, *kernels.drawing);
    mark("initialize", nothing);
    if (check.valid() && !check.get()) {  // this compile's cooperative kernels are not to be trusted
        impl.reset();  // its buffers, before the compile that replaces it allocates its own
        return compile_graph(built, device, options, t0);  // on the f32 kernels: the verdict is known now
    }
    mark("check", nothing);

    // What each dispatch computes names it in traces and in VK_EXT_debug_utils labels.
    impl->dispatch_names = compiler::dispatch_names(graph, s);
    compiler::Trace* trace = compiler::Trace::active();
    if (trace) impl->options.profile = true;
    record(*impl);
    mark("record", nothing);

    SessionStats& st = impl->stats;
    const rt::Program& per_run = impl->steady_program ? *impl->steady_program : *impl->program;
    st.dispatches = per_run.dispatch_count() + (impl->update_program ? impl->update_program->dispatch_count() : 0);
    st.barriers = per_run.barrier_count() + (impl->update_program ? impl->update_program->barrier_count() : 0);
    for (const auto& segment : impl->later_segments) {
        st.dispatches += segment->dispatch_count();
        st.barriers += segment->barrier_count();
    }
    st.hoisted_dispatches = impl->program->dispatch_count() - per_run.dispatch_count();
    st.logical_bytes = placement.arena.logical_bytes;
    st.physical_bytes = placement.arena.physical_bytes;
    st.pinned_bytes = placement.pinned_bytes;
    st.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (debug_level() >= 1) print_debug(*impl);
    if (trace) {
        impl->trace_session = trace->session(caps.name);
        trace->compiled(impl->trace_session, st.pass_ms, std::chrono::steady_clock::now());
    }
    return Session(std::move(impl));
}

}  // namespace

Session compile(const Graph& graph, const Device& device, const CompileOptions& options) {
    compiler::Trace::active();  // a trace's clock starts before the first compile it shows
    const auto t0 = std::chrono::steady_clock::now();
    if (!options.loss && options.data_parallel) throw Error("compile: data_parallel is for training: give a loss too");
    if (!options.loss) return compile_graph(graph, device, options, t0);
    if (options.loss->graph != &graph) throw Error("compile: the loss belongs to another graph");
    Graph training = graph;  // the user's graph stays as it was
    compiler::append_training(training, training.handle(options.loss->id), options);
    CompileOptions rebound = options;
    rebound.loss = training.handle(options.loss->id);
    return compile_graph(training, device, rebound, t0);
}

}  // namespace mn
