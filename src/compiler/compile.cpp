// The compiler driver: a list of named passes from a graph to a recorded program.
//   lower (schedule/, with pointwise fusion) -> order by level -> plan memory (memory/) ->
//   compile shaders (codegen/) -> allocate and initialize -> record (runtime/)
// MEGANEURA_DEBUG=1 prints the plan, MEGANEURA_DEBUG=3 also every kernel's GLSL.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <unordered_map>

#include "codegen/shader_compiler.hpp"
#include "common/half.hpp"
#include "compiler/check.hpp"
#include "compiler/dump.hpp"
#include "compiler/hazards.hpp"
#include "compiler/initial_values.hpp"
#include "compiler/session_impl.hpp"
#include "memory/planner.hpp"
#include "runtime/runtime.hpp"
#include "compiler/training.hpp"

namespace mn {

namespace {

int debug_level() {
    const char* e = std::getenv("MEGANEURA_DEBUG");
    return e ? std::atoi(e) : 0;
}

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

Session compile_graph(const Graph& graph, const Device& device, const CompileOptions& options,
                      std::chrono::steady_clock::time_point t0) {
    auto impl = std::make_unique<Session::Impl>();
    impl->options = options;
    impl->training = options.loss.has_value();
    impl->ctx = device.context();
    const rt::DeviceCaps& caps = impl->ctx->caps();

    // Wall time per pass, in SessionStats::pass_ms (autodiff and optimizer appending count as "build").
    auto mark_time = t0;
    auto mark = [&](const char* pass) {
        const auto now = std::chrono::steady_clock::now();
        impl->stats.pass_ms.emplace_back(pass, std::chrono::duration<double, std::milli>(now - mark_time).count());
        mark_time = now;
    };
    const std::string dump = compiler::dump_pass();
    mark("build");
    if (dump == "build") std::fputs(graph.str().c_str(), stderr);

    // ---- pass: lower ----
    std::vector<int32_t> roots;
    for (const auto& [name, id] : graph.outputs()) roots.push_back(id);
    for (size_t i = 0; i < graph.nodes().size(); ++i) {
        if (graph.nodes()[i].op == Op::Assign) roots.push_back(static_cast<int32_t>(i));
    }
    if (roots.empty()) throw Error("compile: the graph has no outputs (mark them with graph.output(name, tensor))");
    impl->schedule = sched::lower(graph, roots, sched::tune_for(caps, options.precision));
    sched::Schedule& s = impl->schedule;

    mark("lower");
    if (dump == "lower") std::fputs(compiler::dump_schedule(s, graph, false).c_str(), stderr);

    // ---- pass: order by level (independent steps share a barrier) ----
    sched::order_by_level(s);
    mark("order");
    if (dump == "order") std::fputs(compiler::dump_schedule(s, graph, true).c_str(), stderr);
    const size_t nv = s.values.size();

    // Leaves no output depends on stay known by name (-1) so that setting them is harmless.
    for (size_t i = 0; i < graph.nodes().size(); ++i) {
        const Node& n = graph.nodes()[i];
        if (n.op == Op::Input || n.op == Op::Parameter || n.op == Op::State) impl->names[n.name] = s.node_value[i];
    }
    for (const auto& [name, id] : graph.outputs()) impl->names[name] = s.node_value[static_cast<size_t>(id)];

    // ---- pass: plan memory (lifetimes in levels, so bytes are shared only across a barrier) ----
    const uint64_t align = std::max<uint64_t>(256, caps.min_storage_buffer_offset_alignment);
    std::vector<int64_t> first(nv, -1), last(nv, -1);
    for (size_t i = 0; i < s.steps.size(); ++i) {
        for (int32_t v : s.steps[i].values) {
            const auto r = static_cast<size_t>(s.root(v));
            const int64_t level = s.step_level[i];
            if (first[r] < 0) first[r] = level;
            last[r] = level;
        }
    }
    impl->home.assign(nv, nullptr);
    impl->offset.assign(nv, 0);
    std::vector<memory::Request> requests;
    std::vector<int32_t> arena_values;
    uint64_t pinned_bytes = 0;
    for (size_t v = 0; v < nv; ++v) {
        const sched::Value& val = s.values[v];
        if (val.view_of >= 0) continue;
        if (val.pinned) {
            impl->offset[v] = pinned_bytes;
            pinned_bytes += align_up(std::max<uint64_t>(val.bytes(), 4), align);
        } else if (first[v] >= 0) {
            requests.push_back({val.bytes(), first[v], last[v]});
            arena_values.push_back(static_cast<int32_t>(v));
        }
    }
    // MEGANEURA_CHECK reads every intermediate value after the run: none may share bytes.
    const double check_limit = compiler::check_limit(options.precision);
    if (check_limit > 0) {
        impl->check_graph = std::make_shared<const Graph>(graph);
        impl->check_limit = check_limit;
    }
    const memory::Plan plan = memory::plan_arena(requests, align, options.plan_memory && check_limit == 0);

    mark("plan");
    if (dump == "plan") std::fputs(compiler::dump_plan(s, first, last, arena_values, plan).c_str(), stderr);

    // ---- pass: compile shaders (each distinct source once, in parallel) ----
    std::vector<std::string> sources;
    std::unordered_map<std::string, size_t> source_index;
    for (const auto& step : s.steps) {
        if (source_index.emplace(step.kernel.glsl, sources.size()).second) sources.push_back(step.kernel.glsl);
    }
    codegen::ShaderOptions shader_options;
    shader_options.vulkan_minor = caps.api_version >= VK_API_VERSION_1_3 ? 3 : 2;
    const auto spirv = codegen::compile_glsl_parallel(sources, shader_options);

    mark("shaders");

    // ---- pass: allocate and initialize ----
    const uint64_t max_range = caps.max_storage_buffer_range;
    for (const auto& v : s.values) {
        if (v.bytes() > max_range) {
            throw Error("compile: a tensor of shape " + shape_str(v.shape) + " (" + std::to_string(v.bytes()) +
                        " bytes) exceeds the device's storage-buffer range of " + std::to_string(max_range) + " bytes");
        }
    }
    impl->pinned = rt::Buffer(impl->ctx, std::max<uint64_t>(pinned_bytes, 4), rt::MemoryKind::DeviceLocal);
    impl->arena = rt::Buffer(impl->ctx, std::max<uint64_t>(plan.physical_bytes, 4), rt::MemoryKind::DeviceLocal);
    for (size_t v = 0; v < nv; ++v) {
        if (s.values[v].view_of < 0 && s.values[v].pinned) impl->home[v] = &impl->pinned;
    }
    for (size_t i = 0; i < arena_values.size(); ++i) {
        impl->home[static_cast<size_t>(arena_values[i])] = &impl->arena;
        impl->offset[static_cast<size_t>(arena_values[i])] = plan.offsets[i];
    }
    uint64_t upload_bytes = 0, readback_bytes = 0;
    for (size_t v = 0; v < nv; ++v) {
        if (s.values[v].storage == sched::Storage::Input && s.values[v].view_of < 0) {
            impl->upload_at[static_cast<int32_t>(v)] = upload_bytes;
            upload_bytes += align_up(std::max<uint64_t>(s.values[v].bytes(), 4), 16);
        }
    }
    for (const auto& [name, id] : graph.outputs()) {
        if (options.read_back && std::find(options.read_back->begin(), options.read_back->end(), name) ==
                                     options.read_back->end()) continue;
        const int32_t r = s.root(s.node_value[static_cast<size_t>(id)]);
        if (impl->readback_at.count(r)) continue;
        impl->readback_at[r] = readback_bytes;
        readback_bytes += align_up(std::max<uint64_t>(s.values[static_cast<size_t>(r)].bytes(), 4), 16);
    }
    if (impl->check_graph) {
        uint64_t snapshot_bytes = 0;
        for (size_t i = 0; i < s.steps.size(); ++i) {
            for (size_t b = 0; b < s.steps[i].values.size(); ++b) {
                if (!s.steps[i].kernel.iface.bindings[b].writes) continue;
                impl->checked_writes.push_back({i, b, snapshot_bytes});
                snapshot_bytes += align_up(impl->range(s.steps[i].values[b]).size, 16);
            }
        }
        impl->check_snapshot = rt::Buffer(impl->ctx, std::max<uint64_t>(snapshot_bytes, 4), rt::MemoryKind::Readback);
    }
    impl->upload = rt::Buffer(impl->ctx, std::max<uint64_t>(upload_bytes, 4), rt::MemoryKind::Upload);
    impl->readback = rt::Buffer(impl->ctx, std::max<uint64_t>(readback_bytes, 4), rt::MemoryKind::Readback);
    std::memset(impl->upload.mapped(), 0, impl->upload.size());
    std::vector<int32_t> initialized;
    for (size_t v = 0; v < nv; ++v) {
        const sched::Value& val = s.values[v];
        if (val.node < 0 || val.view_of >= 0) continue;
        const Op op = graph.node(val.node).op;
        if (op == Op::Constant || op == Op::Parameter || op == Op::State) initialized.push_back(static_cast<int32_t>(v));
    }
    impl->write_many(initialized, [&](size_t i, uint8_t* dst) {
        const Node& n = graph.node(s.values[static_cast<size_t>(initialized[i])].node);
        if (n.op == Op::Constant) {
            compiler::write_constant(n, dst);
        } else {
            compiler::write_initial_values(n, options.seed, dst);
        }
    });

    mark("initialize");

    // ---- pass: record ----
    impl->program = std::make_unique<rt::Program>(impl->ctx);
    rt::Program& prog = *impl->program;
    compiler::HazardTracker hazards;
    auto command = [&](const std::vector<compiler::Access>& acc) {
        if (hazards.needs_barrier(acc)) {
            prog.barrier();
            hazards.barrier();
        }
        hazards.record(acc);
    };
    for (const auto& [v, at] : impl->upload_at) {
        const rt::BufferRange dst = impl->range(v);
        command({{dst.buffer, dst.offset, dst.offset + dst.size, true}});
        prog.copy({&impl->upload, at, dst.size}, dst);
    }
    if (options.poison_outputs) {
        constexpr uint32_t kNaN = 0x7FC00000u;  // also a NaN pair in f16
        command({{&impl->arena, 0, impl->arena.size(), true}});
        prog.fill({&impl->arena, 0, impl->arena.size()}, kNaN);
        for (const auto& [v, at] : impl->readback_at) {
            if (s.values[static_cast<size_t>(v)].storage != sched::Storage::Transient) continue;
            const rt::BufferRange r = impl->range(v);
            command({{r.buffer, r.offset, r.offset + r.size, true}});
            prog.fill(r, kNaN);
        }
    }
    std::set<const rt::Pipeline*> pipelines;
    auto checked_write = impl->checked_writes.begin();
    for (size_t i = 0; i < s.steps.size(); ++i) {
        const sched::Step& step = s.steps[i];
        const auto& k = step.kernel;
        const auto& sp = spirv[source_index.at(k.glsl)];
        rt::Dispatch d{.pipeline = &impl->ctx->pipeline(*sp, k.spec_values, static_cast<uint32_t>(k.iface.bindings.size()), 0,
                                                      k.required_subgroup_size),
                       .groups = k.groups, .label = k.label};
        pipelines.insert(d.pipeline);
        std::vector<compiler::Access> acc;
        for (size_t b = 0; b < step.values.size(); ++b) {
            const rt::BufferRange r = impl->range(step.values[b]);
            d.bindings.push_back(r);
            acc.push_back({r.buffer, r.offset, r.offset + r.size, k.iface.bindings[b].writes});
        }
        command(acc);
        prog.dispatch(std::move(d));
        for (; checked_write != impl->checked_writes.end() && checked_write->step == i; ++checked_write) {
            const rt::BufferRange src = impl->range(step.values[checked_write->binding]);
            const rt::BufferRange dst{&impl->check_snapshot, checked_write->at, src.size};
            command({{src.buffer, src.offset, src.offset + src.size, false}, {dst.buffer, dst.offset, dst.offset + dst.size, true}});
            prog.copy(src, dst);
        }
    }
    for (const auto& [v, at] : impl->readback_at) {
        const rt::BufferRange src = impl->range(v);
        command({{src.buffer, src.offset, src.offset + src.size, false}});
        prog.copy(src, {&impl->readback, at, src.size});
    }
    prog.finish(options.profile && caps.timestamps);
    impl->profiled = options.profile && caps.timestamps;

    mark("record");
    SessionStats& st = impl->stats;
    st.dispatches = prog.dispatch_count();
    st.barriers = prog.barrier_count();
    st.pipelines = pipelines.size();
    st.logical_bytes = plan.logical_bytes;
    st.physical_bytes = plan.physical_bytes;
    st.pinned_bytes = pinned_bytes;
    st.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (debug_level() >= 1) {
        std::fprintf(stderr, "meganeura: %zu values, %zu dispatches, %zu barriers, %zu pipelines; arena %llu of %llu "
                     "logical bytes, pinned %llu; compiled in %.1f ms\n", nv, st.dispatches, st.barriers, st.pipelines,
                     static_cast<unsigned long long>(st.physical_bytes), static_cast<unsigned long long>(st.logical_bytes),
                     static_cast<unsigned long long>(pinned_bytes), st.compile_ms);
        for (const auto& [pass, ms] : st.pass_ms) std::fprintf(stderr, "  pass %-10s %8.1f ms\n", pass.c_str(), ms);
        for (const auto& step : s.steps) {
            std::fprintf(stderr, "  %-20s groups %ux%ux%u\n", step.kernel.label.c_str(), step.kernel.groups[0],
                         step.kernel.groups[1], step.kernel.groups[2]);
            if (debug_level() >= 3) std::fprintf(stderr, "%s\n", step.kernel.glsl.c_str());
        }
    }
    return Session(std::move(impl));
}

}  // namespace

Session compile(const Graph& graph, const Device& device, const CompileOptions& options) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!options.loss) return compile_graph(graph, device, options, t0);
    if (options.loss->graph != &graph) throw Error("compile: the loss belongs to another graph");
    Graph training = graph;  // the user's graph stays as it was
    compiler::append_training(training, training.handle(options.loss->id), options);
    CompileOptions rebound = options;
    rebound.loss = training.handle(options.loss->id);
    return compile_graph(training, device, rebound, t0);
}

}  // namespace mn
