#include "compiler/check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "common/half.hpp"

namespace mn::compiler {
namespace {

std::vector<double> widen(const uint8_t* bytes, const sched::Value& v) {
    const auto count = static_cast<size_t>(numel(v.shape));
    std::vector<double> out(count);
    for (size_t i = 0; i < count; ++i) {
        if (v.dtype == DType::F32) {
            float x;
            std::memcpy(&x, bytes + 4 * i, 4);
            out[i] = x;
        } else if (v.dtype == DType::F16) {
            uint16_t h;
            std::memcpy(&h, bytes + 2 * i, 2);
            out[i] = half_to_float(h);
        } else {
            int32_t x;
            std::memcpy(&x, bytes + 4 * i, 4);
            out[i] = x;
        }
    }
    return out;
}

double rms(const std::vector<double>& x) {
    double sum = 0;
    for (double v : x) sum += std::isfinite(v) ? v * v : 0;
    return x.empty() ? 0 : std::sqrt(sum / static_cast<double>(x.size()));
}

// ||got - want|| relative to the larger of ||want|| and what it would be if every element were as
// large as the node's inputs (RMS of the largest input, `input_rms`): a sum that cancels to ~0 (a
// batch norm's mean gradient) carries rounding errors of its terms' size, not of its own. Infinite
// when `got` has a NaN that `want` does not.
double divergence(const std::vector<double>& got, const std::vector<double>& want, double input_rms) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        if (std::isnan(got[i]) && !std::isnan(want[i])) return INFINITY;
        if (std::isnan(want[i])) continue;
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    den = std::max(den, input_rms * input_rms * static_cast<double>(want.size()));
    return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

}  // namespace

double check_limit(Precision precision) {
    const char* e = std::getenv("MEGANEURA_CHECK");
    if (!e || !*e || std::strcmp(e, "0") == 0) return 0;
    if (std::strcmp(e, "1") == 0) return precision == Precision::Fast ? 3e-2 : 1e-3;
    char* end = nullptr;
    const double limit = std::strtod(e, &end);
    if (*end || !(limit > 0)) throw Error(std::string("MEGANEURA_CHECK must be 1 or a positive limit such as 1e-5, got '") + e + "'");
    return limit;
}

ref::Feeds feeds_for_check(const Session::Impl& impl, const Graph& graph) {
    ref::Feeds feeds;
    for (size_t id = 0; id < graph.nodes().size(); ++id) {
        const Node& n = graph.nodes()[id];
        if (n.op != Op::Input && n.op != Op::Parameter && n.op != Op::State) continue;
        const int32_t v = impl.schedule.node_value[id];
        if (v < 0) {  // nothing the program computes reads it; the reference evaluates every node
            feeds[n.name] = {n.shape, std::vector<double>(static_cast<size_t>(numel(n.shape)), 0.0)};
            continue;
        }
        const sched::Value& val = impl.value(v);
        const auto up = impl.upload_at.find(impl.schedule.root(v));
        const std::vector<uint8_t> bytes =
            up != impl.upload_at.end()
                ? std::vector<uint8_t>(static_cast<const uint8_t*>(impl.upload.mapped()) + up->second,
                                       static_cast<const uint8_t*>(impl.upload.mapped()) + up->second + val.bytes())
                : impl.read_now(v);
        feeds[n.name] = {n.shape, widen(bytes.data(), val)};
    }
    return feeds;
}

namespace {

// Node values as the run left them on the device, for the nodes the program holds, and otherwise
// (nodes fused into a kernel) the reference's computation from those. Leaves are the values the
// run read: parameters and optimizer state an update overwrote in place come from `feeds`.
class DeviceValues {
public:
    DeviceValues(const Session::Impl& impl, const Graph& graph, const ref::Feeds& feeds) : impl_(impl), graph_(graph), feeds_(feeds) {
        for (const sched::Step& step : impl.schedule.steps) {
            for (size_t b = 0; b < step.values.size(); ++b) {
                if (step.kernel.iface.bindings[b].writes) written_.insert(impl.schedule.root(step.values[b]));
            }
        }
    }

    const ref::Value& operator()(int32_t id) {
        if (auto it = memo_.find(id); it != memo_.end()) return it->second;
        const Node& n = graph_.node(id);
        const int32_t v = impl_.schedule.node_value[static_cast<size_t>(id)];
        ref::Value value;
        if (n.op == Op::Input || n.op == Op::Parameter || n.op == Op::State) {
            value = feeds_.at(n.name);
        } else if (v >= 0 && (written_.count(impl_.schedule.root(v)) ||
                              impl_.value(impl_.schedule.root(v)).storage == sched::Storage::Constant)) {
            value = {n.shape, widen(impl_.read_now(v).data(), impl_.value(v))};
        } else {
            std::vector<const ref::Value*> inputs;
            for (int32_t in : n.inputs) inputs.push_back(&(*this)(in));
            value = ref::evaluate_node(n, inputs, feeds_);
        }
        return memo_.emplace(id, std::move(value)).first->second;
    }

private:
    const Session::Impl& impl_;
    const Graph& graph_;
    const ref::Feeds& feeds_;
    std::set<int32_t> written_;  // value roots some dispatch writes
    std::map<int32_t, ref::Value> memo_;
};

}  // namespace

void check_against_reference(const Session::Impl& impl, const Graph& graph, const ref::Feeds& feeds, double limit) {
    const sched::Schedule& s = impl.schedule;
    DeviceValues device(impl, graph, feeds);
    std::set<int32_t> checked;
    for (size_t i = 0; i < s.steps.size(); ++i) {
        const sched::Step& step = s.steps[i];
        for (size_t b = 0; b < step.values.size(); ++b) {
            const int32_t v = step.values[b];
            const sched::Value& val = impl.value(v);
            // Written by this dispatch and standing for a graph node; parameters and optimizer state
            // that an update overwrites in place hold the new values, which their nodes do not.
            if (!step.kernel.iface.bindings[b].writes || val.node < 0 || !checked.insert(val.node).second) continue;
            const Node& n = graph.node(val.node);
            if (n.op == Op::Assign || impl.value(s.root(v)).storage != sched::Storage::Transient) continue;
            // The node from the device's own inputs: a kernel's error, not its inputs' accumulated rounding.
            std::vector<const ref::Value*> inputs;
            double input_rms = 0;
            for (int32_t in : n.inputs) {
                inputs.push_back(&device(in));
                input_rms = std::max(input_rms, rms(inputs.back()->data));
            }
            ref::Value want;
            try {
                want = ref::evaluate_node(n, inputs, feeds);
            } catch (const Error& e) {
                throw Error(std::string("MEGANEURA_CHECK: the reference cannot evaluate node ") + std::to_string(val.node) +
                            ": " + e.what());
            }
            const double d = divergence(device(val.node).data, want.data, input_rms);
            if (d <= limit) continue;
            char text[64];
            std::snprintf(text, sizeof text, "%.3g > %.3g", d, limit);
            throw Error("MEGANEURA_CHECK: node " + std::to_string(val.node) + " (" + op_info(n.op).name +
                        (n.name.empty() ? "" : " '" + n.name + "'") + ", " + shape_str(n.shape) + "), written by dispatch " +
                        std::to_string(i) + " '" + step.kernel.label + "', is the first to diverge from the reference: " +
                        "relative L2 " + text);
        }
    }
}

}  // namespace mn::compiler
