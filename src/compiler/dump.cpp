#include "compiler/dump.hpp"

#include <cstdlib>
#include <map>

namespace mn::compiler {
namespace {

const char* const kPasses[] = {"build", "optimize", "lower", "order", "plan"};

const char* storage_name(sched::Storage s) {
    switch (s) {
        case sched::Storage::Transient: return "transient";
        case sched::Storage::Input: return "input";
        case sched::Storage::Parameter: return "parameter";
        case sched::Storage::Constant: return "constant";
        case sched::Storage::State: return "state";
        case sched::Storage::Counters: return "counters";
    }
    return "?";
}

// "v12 = node 7 matmul (4,3) f32", the view's root where it has one.
std::string value_text(const sched::Schedule& s, const Graph& graph, int32_t v) {
    const sched::Value& val = s.values[static_cast<size_t>(v)];
    std::string t = "v" + std::to_string(v);
    if (val.view_of >= 0) t += " (view of v" + std::to_string(s.root(v)) + ")";
    if (val.node >= 0) {
        const Node& n = graph.node(val.node);
        t += " = node " + std::to_string(val.node) + " " + op_info(n.op).name + (n.name.empty() ? "" : " '" + n.name + "'");
    } else {
        t += " = scratch";
    }
    return t + " " + shape_str(val.shape) + " " + dtype_name(val.dtype);
}

}  // namespace

std::string dump_pass() {
    const char* e = std::getenv("MEGANEURA_DUMP");
    if (!e || !*e) return "";
    for (const char* p : kPasses) {
        if (std::string(e) == p) return e;
    }
    std::string known;
    for (const char* p : kPasses) known += std::string(known.empty() ? "" : ", ") + p;
    throw Error(std::string("MEGANEURA_DUMP names a pass: ") + known + "; got '" + e + "'");
}

std::string dump_schedule(const sched::Schedule& s, const Graph& graph, bool with_levels) {
    std::string out = std::to_string(s.steps.size()) + " steps, " + std::to_string(s.values.size()) + " values\n";
    for (size_t i = 0; i < s.steps.size(); ++i) {
        const sched::Step& step = s.steps[i];
        const auto& g = step.kernel.groups;
        out += "step " + std::to_string(i) + (with_levels ? " level " + std::to_string(s.step_level[i]) : "") + ": " +
               step.kernel.label + ", " + std::to_string(step.kernel.iface.local_size) + " threads x " +
               std::to_string(g[0]) + "x" + std::to_string(g[1]) + "x" + std::to_string(g[2]) + " groups\n";
        for (size_t b = 0; b < step.values.size(); ++b) {
            const auto& binding = step.kernel.iface.bindings[b];
            out += std::string("    ") + (binding.writes ? "W " : "R ") + binding.name + ": " +
                   value_text(s, graph, step.values[b]) + "\n";
        }
    }
    return out;
}

std::string dump_plan(const sched::Schedule& s, const std::vector<int64_t>& first, const std::vector<int64_t>& last,
                      const std::vector<int32_t>& arena_values, const memory::Plan& plan) {
    std::map<int32_t, uint64_t> offset;
    for (size_t i = 0; i < arena_values.size(); ++i) offset[arena_values[i]] = plan.offsets[i];
    std::string out = "arena " + std::to_string(plan.physical_bytes) + " of " + std::to_string(plan.logical_bytes) +
                      " logical bytes\n";
    for (size_t v = 0; v < s.values.size(); ++v) {
        const sched::Value& val = s.values[v];
        if (val.view_of >= 0) continue;
        out += "v" + std::to_string(v) + " " + storage_name(val.storage) + " " + std::to_string(val.bytes()) + " bytes";
        if (val.pinned) {
            out += ", pinned";
        } else if (const auto it = offset.find(static_cast<int32_t>(v)); it != offset.end()) {
            out += ", levels " + std::to_string(first[v]) + ".." + std::to_string(last[v]) + ", arena offset " +
                   std::to_string(it->second);
        } else {
            out += ", unused";
        }
        out += "\n";
    }
    return out;
}

}  // namespace mn::compiler
