// MEGANEURA_TRACE (trace.hpp): the events, kept in memory under a lock (sessions may run on several
// threads) and written once, when the process exits, atomically.
//
// A dispatch is named after the layer its nodes belong to. A node that reads a parameter belongs to
// that parameter's layer (its name without ".weight" / ".bias"), as PyTorch's profiler names a
// backward product after the forward op whose weight it reads. Otherwise a forward node inherits the
// layer of its first input computed from parameters alone that has one (a convolution reading a weight with
// a batch norm folded in), else of its first input that has one (a ReLU after fc1 is in fc1), and a gradient node (past the
// graph's gradient start) takes the layer of what it feeds: the first consumer with a layer, or the
// parameter of a "grad.<parameter>" output, so fc1's weight gradient is in fc1.
#include "compiler/trace.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

#include <nlohmann/json.hpp>

#include "io/atomic_file.hpp"

namespace mn::compiler {

namespace {

// A trace of a long training run stays below a few hundred MB: later events are counted, not kept.
constexpr size_t kMaxEvents = 2'000'000;

std::string layer_of_parameter(const std::string& name) {
    for (const char* suffix : {".weight", ".bias"}) {
        const std::string s = suffix;
        if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0)
            return name.substr(0, name.size() - s.size());
    }
    return name;
}

}  // namespace

std::vector<std::string> node_layers(const Graph& graph) {
    const size_t count = graph.nodes().size();
    std::vector<std::string> direct(count), layer(count);
    std::vector<std::vector<int32_t>> consumers(count);
    const std::vector<bool> weights = sched::parameter_only_nodes(graph);  // computed from parameters alone
    for (size_t i = 0; i < count; ++i) {
        const Node& n = graph.nodes()[i];
        if (n.op == Op::Parameter || n.op == Op::State) direct[i] = layer_of_parameter(n.name);
        for (int32_t in : n.inputs) {
            consumers[static_cast<size_t>(in)].push_back(static_cast<int32_t>(i));
            const Op op = graph.node(in).op;
            if (direct[i].empty() && (op == Op::Parameter || op == Op::State)) direct[i] = layer_of_parameter(graph.node(in).name);
        }
    }
    // A weight computed from parameters (ResNet-50's batch norms folded into its convolutions' weights) names
    // the layer of what reads it before an activation does: else every folded convolution took the stem's.
    auto inherit = [&](size_t i, bool from_weights) {
        for (size_t k = 0; layer[i].empty() && k < graph.nodes()[i].inputs.size(); ++k) {
            const auto in = static_cast<size_t>(graph.nodes()[i].inputs[k]);
            if (!from_weights || weights[in]) layer[i] = layer[in];
        }
    };
    for (size_t i = 0; i < count; ++i) {
        layer[i] = direct[i];
        inherit(i, true);
        inherit(i, false);
    }
    std::vector<std::string> fed(count);  // gradient nodes: the layer of what they feed
    for (const auto& [name, id] : graph.outputs())
        if (name.rfind("grad.", 0) == 0 && fed[static_cast<size_t>(id)].empty()) fed[static_cast<size_t>(id)] = layer_of_parameter(name.substr(5));
    for (size_t i = count; i-- > 0;) {
        if (!graph.nodes()[i].gradient) continue;
        if (!direct[i].empty()) fed[i] = direct[i];
        for (size_t k = 0; fed[i].empty() && k < consumers[i].size(); ++k) fed[i] = fed[static_cast<size_t>(consumers[i][k])];
        if (!fed[i].empty()) layer[i] = fed[i];
    }
    return layer;
}

std::vector<DispatchName> dispatch_names(const Graph& graph, const sched::Schedule& schedule) {
    const std::vector<std::string> layer = node_layers(graph);
    std::vector<DispatchName> names;
    for (const sched::Step& step : schedule.steps) {
        DispatchName d{.kernel = step.kernel.label};
        std::string ops, where;
        bool gradient = false;
        for (size_t b = 0; b < step.values.size(); ++b) {
            const int32_t node = schedule.values[static_cast<size_t>(step.values[b])].node;
            if (!step.kernel.iface.bindings[b].writes || node < 0) continue;
            const Node& n = graph.node(node);
            const char* op = op_info(n.op).name;
            std::string described = "%";  // not "%" + to_string: GCC 12 warns of a memcpy overlap there (-Wrestrict, a false positive)
            described += std::to_string(node) + " " + op + " " + shape_str(n.shape) + " " + dtype_name(n.dtype);
            d.nodes.push_back(std::move(described));
            if (ops.find(op) == std::string::npos) ops += (ops.empty() ? "" : ", ") + std::string(op);
            if (where.empty()) where = layer[static_cast<size_t>(node)];
            gradient = gradient || n.gradient;
        }
        if (d.nodes.empty()) ops = step.kernel.label;  // scratch only (a split-K partial sum)
        // A product or norm storing through an epilogue writes only the epilogue's value, and a product storing
        // its column slices (q, k and v) only those: it is named first.
        for (const std::string product : {"matmul", "conv2d", "rms_norm", "layer_norm", "group_norm"}) {
            const std::string& label = step.kernel.label;
            if (label.rfind(product, 0) == 0 && ops.find(product) == std::string::npos) {
                ops = product + ", " + ops;
            }
        }
        d.name = (gradient ? "grad " : "") + (where.empty() ? "" : where + ": ") + ops;
        names.push_back(std::move(d));
    }
    // A dispatch that writes scratch only (a split-K product's partial sums, a loss's row terms) takes
    // the name of the first one that reads it (the sum with its epilogue), marked as a part of it.
    const std::string part = " (part)";
    for (size_t i = names.size(); i-- > 0;) {
        if (!names[i].nodes.empty()) continue;
        std::set<int32_t> written;
        for (size_t b = 0; b < schedule.steps[i].values.size(); ++b)
            if (schedule.steps[i].kernel.iface.bindings[b].writes) written.insert(schedule.steps[i].values[b]);
        for (size_t j = i + 1; j < names.size(); ++j) {
            const sched::Step& reader = schedule.steps[j];
            bool reads = false;
            for (size_t b = 0; b < reader.values.size() && !reads; ++b)
                reads = !reader.kernel.iface.bindings[b].writes && written.count(reader.values[b]);
            if (!reads) continue;
            const std::string& whole = names[j].name;  // already named: a part of a part keeps one mark
            const bool marked = whole.size() > part.size() && !whole.compare(whole.size() - part.size(), part.size(), part);
            names[i].name = marked ? whole : whole + part;
            break;
        }
    }
    return names;
}

struct Trace::Events {
    std::mutex lock;
    nlohmann::json list = nlohmann::json::array();
    size_t dropped = 0;
    int sessions = 0;

    void add(nlohmann::json event) {
        if (list.size() < kMaxEvents) list.push_back(std::move(event));
        else ++dropped;
    }
};

Trace* Trace::active() {
    static Trace* trace = [] () -> Trace* {
        const char* path = std::getenv("MEGANEURA_TRACE");
        if (!path || !*path) return nullptr;
        io::check_can_write(path, "MEGANEURA_TRACE");
        static Trace instance(path);
        return &instance;
    }();
    return trace;
}

Trace::Trace(std::string path) : path_(std::move(path)), origin_(Clock::now()), events_(std::make_unique<Events>()) {}

Trace::~Trace() {
    nlohmann::json trace = {{"traceEvents", std::move(events_->list)}, {"displayTimeUnit", "ms"}};
    if (events_->dropped) trace["otherData"] = {{"dropped_events", events_->dropped}};
    try {
        io::write_file_atomically(path_, {trace.dump(), "\n"});
    } catch (const std::exception& e) {
        std::fprintf(stderr, "meganeura: MEGANEURA_TRACE: %s\n", e.what());
    }
}

int Trace::session(const std::string& device) {
    std::lock_guard<std::mutex> guard(events_->lock);
    const int id = ++events_->sessions;
    for (const auto& [tid, track] : {std::pair{2 * id, "host"}, std::pair{2 * id + 1, "GPU"}}) {
        events_->add({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", tid},
                      {"args", {{"name", "session " + std::to_string(id) + " " + track + " (" + device + ")"}}}});
    }
    return id;
}

void Trace::compiled(int session, const std::vector<std::pair<std::string, double>>& pass_ms, Clock::time_point end) {
    double total_ms = 0;
    for (const auto& [pass, ms] : pass_ms) total_ms += ms;
    double at_us = std::chrono::duration<double, std::micro>(end - origin_).count() - total_ms * 1e3;
    std::lock_guard<std::mutex> guard(events_->lock);
    for (const auto& [pass, ms] : pass_ms) {
        events_->add({{"name", "compile: " + pass}, {"cat", "compile"}, {"ph", "X"}, {"ts", at_us}, {"dur", ms * 1e3},
                      {"pid", 1}, {"tid", 2 * session}});
        at_us += ms * 1e3;
    }
}

void Trace::ran(int session, Clock::time_point start, Clock::time_point end, const std::vector<DispatchName>& names,
                size_t first, const std::vector<std::pair<std::string, double>>& gpu_ms) {
    const double start_us = std::chrono::duration<double, std::micro>(start - origin_).count();
    const double wall_us = std::chrono::duration<double, std::micro>(end - start).count();
    double gpu_total_ms = 0;
    for (const auto& [label, ms] : gpu_ms) gpu_total_ms += ms;
    std::lock_guard<std::mutex> guard(events_->lock);
    events_->add({{"name", "run"}, {"cat", "run"}, {"ph", "X"}, {"ts", start_us}, {"dur", wall_us}, {"pid", 1},
                  {"tid", 2 * session}, {"args", {{"dispatches", gpu_ms.size()}, {"gpu_ms", gpu_total_ms}}}});
    double at_us = start_us;
    for (size_t d = 0; d < gpu_ms.size() && d < names.size(); ++d) {
        const double dur_us = gpu_ms[d].second * 1e3;
        events_->add({{"name", names[d].name}, {"cat", "dispatch"}, {"ph", "X"}, {"ts", at_us}, {"dur", dur_us},
                      {"pid", 1}, {"tid", 2 * session + 1},
                      {"args", {{"index", first + d}, {"kernel", names[d].kernel}, {"nodes", names[d].nodes},
                                {"gpu_ms", gpu_ms[d].second}}}});
        at_us += dur_us;
    }
}

}  // namespace mn::compiler
