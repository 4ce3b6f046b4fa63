#include "compiler/check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

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

// Ops each of whose output elements is a sum of products of input elements (or one input element):
// evaluated on the inputs' absolute values, with a difference taken as a sum, they give the sum of
// the terms' magnitudes, to which the rounding of that element is proportional.
bool sums_products(Op op) {
    switch (op) {
        case Op::Add: case Op::Sub: case Op::Neg: case Op::Mul: case Op::Relu: case Op::Cast:
        case Op::Sum: case Op::Mean: case Op::MatMul:
        case Op::Conv2d: case Op::Conv2dGradInput: case Op::Conv2dGradWeight:
        case Op::Reshape: case Op::Permute: case Op::Slice: case Op::Concat: case Op::Expand: case Op::Assign:
        case Op::Embedding: case Op::EmbeddingGrad: case Op::SliceScatter:
            return true;
        // the rest: not sums of products
        case Op::Input: case Op::Parameter: case Op::Constant: case Op::State: case Op::Exp: case Op::Log:
        case Op::Sqrt: case Op::Rsqrt: case Op::Abs: case Op::Sigmoid: case Op::Tanh: case Op::Silu:
        case Op::GeluErf: case Op::GeluTanh: case Op::Sign: case Op::GeluErfDeriv: case Op::GeluTanhDeriv:
        case Op::Div: case Op::Maximum: case Op::Minimum: case Op::Pow: case Op::Greater: case Op::Equal:
        case Op::Max: case Op::Softmax: case Op::LogSoftmax: case Op::CrossEntropy: case Op::MseLoss:
        case Op::CrossEntropyGrad: case Op::Attention: case Op::AttentionLse: case Op::AttentionGradQ:
        case Op::AttentionGradK: case Op::AttentionGradV: case Op::RmsNorm: case Op::LayerNorm: case Op::RmsNormGrad:
        case Op::LayerNormGrad: case Op::GroupNorm: case Op::GroupNormGrad: case Op::Rope: case Op::MaxPool2d:
        case Op::MaxPool2dGrad:
            break;
    }
    return false;
}

std::vector<double> magnitudes(const Node& n, const std::vector<const ref::Value*>& inputs, const ref::Feeds& feeds) {
    std::vector<ref::Value> abs_inputs;
    for (const ref::Value* in : inputs) {
        ref::Value a = *in;
        for (double& x : a.data) x = std::fabs(x);
        abs_inputs.push_back(std::move(a));
    }
    std::vector<const ref::Value*> pointers;
    for (const ref::Value& a : abs_inputs) pointers.push_back(&a);
    Node as_sum = n;
    if (as_sum.op == Op::Sub) as_sum.op = Op::Add;
    std::vector<double> m = ref::evaluate_node(as_sum, pointers, feeds).data;
    for (double& x : m) x = std::fabs(x);
    return m;
}

}  // namespace

NodeError node_error(const Node& n, const std::vector<double>& got, const std::vector<const ref::Value*>& inputs,
                     const ref::Feeds& feeds, double unit_roundoff) {
    const std::vector<double> want = ref::evaluate_node(n, inputs, feeds).data;
    NodeError e;
    double num = 0, den = 0, input_rms = 0;
    for (const ref::Value* in : inputs) input_rms = std::max(input_rms, rms(in->data));
    for (size_t i = 0; i < want.size(); ++i) {
        if (std::isnan(got[i]) && !std::isnan(want[i])) return {INFINITY, INFINITY, i};
        if (std::isnan(want[i])) continue;
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    // L2, relative to the larger of the result and what it would be were every element as large as the
    // node's largest input: a sum that cancels to ~0 carries rounding errors of its terms' size.
    den = std::max(den, input_rms * input_rms * static_cast<double>(want.size()));
    e.relative_l2 = den == 0 ? std::sqrt(num) : std::sqrt(num / den);
    if (!sums_products(n.op)) return e;
    // Element by element, so that one wrong element among many is not averaged away: the error beyond
    // what rounding its terms allows (16 units of roundoff of their magnitude), relative to the
    // result's RMS.
    const std::vector<double> mag = magnitudes(n, inputs, feeds);
    const double scale = rms(want) > 0 ? rms(want) : rms(mag);
    if (scale == 0) return e;
    for (size_t i = 0; i < want.size(); ++i) {
        if (std::isnan(want[i])) continue;
        const double beyond = (std::fabs(got[i] - want[i]) - 16 * unit_roundoff * mag[i]) / scale;
        if (beyond > e.worst_element) e.worst_element = beyond, e.worst_at = i;
    }
    return e;
}

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
                : std::move(impl.read_now({v}).front());
        feeds[n.name] = {n.shape, widen(bytes.data(), val)};
    }
    return feeds;
}

namespace {

// Node values as the run produced them: what the last dispatch that wrote each node's value wrote
// (from the snapshot taken right after it, so later writes into the same bytes do not hide it);
// leaves as the run read them (`feeds`); constants from the device; and nodes no dispatch wrote (fused
// into a kernel, views) by the reference from those.
class DeviceValues {
public:
    DeviceValues(const Session::Impl& impl, const Graph& graph, const ref::Feeds& feeds) : impl_(impl), graph_(graph), feeds_(feeds) {
        for (const auto& w : impl.checked_writes) {
            const int32_t v = impl.schedule.steps[w.step].values[w.binding];
            if (const int32_t node = impl.value(v).node; node >= 0) last_write_[node] = &w;
        }
    }

    // The last write that stands for node `id`, or null.
    const Session::Impl::CheckedWrite* write_of(int32_t id) const {
        const auto it = last_write_.find(id);
        return it == last_write_.end() ? nullptr : it->second;
    }
    const std::map<int32_t, const Session::Impl::CheckedWrite*>& writes() const { return last_write_; }

    const ref::Value& operator()(int32_t id) {
        if (auto it = memo_.find(id); it != memo_.end()) return it->second;
        const Node& n = graph_.node(id);
        const int32_t v = impl_.schedule.node_value[static_cast<size_t>(id)];
        ref::Value value;
        if (n.op == Op::Input || n.op == Op::Parameter || n.op == Op::State) {
            value = feeds_.at(n.name);
        } else if (const auto* w = write_of(id)) {
            const sched::Value& written = impl_.value(impl_.schedule.steps[w->step].values[w->binding]);
            value = {n.shape, widen(static_cast<const uint8_t*>(impl_.check_snapshot.mapped()) + w->at, written)};
        } else if (v >= 0 && impl_.value(impl_.schedule.root(v)).storage == sched::Storage::Constant) {
            value = {n.shape, widen(impl_.read_now({v}).front().data(), impl_.value(v))};
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
    std::map<int32_t, const Session::Impl::CheckedWrite*> last_write_;  // node -> its value's last write
    std::map<int32_t, ref::Value> memo_;
};

std::string format(const char* pattern, double a, double b = 0, double c = 0) {
    char text[160];
    std::snprintf(text, sizeof text, pattern, a, b, c);
    return text;
}

// Decisions (greater, equal, sign) that the device took on the other side of the threshold from
// the float64 run of the whole graph. Every kernel can be right and still do this: float32 rounding
// upstream moves an argument that float64 puts just above zero to just below it, and what follows
// from the decision (a ReLU's gradient, a max-pool's route) takes float32's side. Reported, not
// failed: it is how float32 arithmetic behaves, and PyTorch's float32 does it at other elements.
void report_decision_flips(const Graph& graph, DeviceValues& device, const ref::Feeds& feeds) {
    const std::vector<ref::Value> exact = ref::evaluate(graph, feeds);
    for (int32_t id = 0; id < static_cast<int32_t>(graph.nodes().size()); ++id) {
        const Node& n = graph.node(id);
        if (n.op != Op::Greater && n.op != Op::Equal && n.op != Op::Sign) continue;
        const auto& want = exact[static_cast<size_t>(id)].data;
        const auto& got = device(id).data;
        size_t flips = 0, first = 0;
        for (size_t i = 0; i < want.size(); ++i) {
            if (got[i] != want[i] && !(std::isnan(got[i]) && std::isnan(want[i])) && flips++ == 0) first = i;
        }
        if (flips == 0) continue;
        std::string where = "element " + std::to_string(first);
        const int32_t arg = n.inputs[0];
        if (graph.node(arg).shape == n.shape) {
            double largest = 0;
            for (double x : exact[static_cast<size_t>(arg)].data) largest = std::max(largest, std::fabs(x));
            where += format("'s argument is %.3g in float64 and %.3g on the device (largest |argument| %.3g)",
                            exact[static_cast<size_t>(arg)].data[first], device(arg).data[first], largest);
        }
        std::fprintf(stderr,
                     "MEGANEURA_CHECK: node %d (%s, %s) decided %zu of %zu elements differently from float64 end to end; "
                     "%s. No kernel is at fault: float32 rounding upstream carried the argument across the threshold, "
                     "and what depends on the decision (a ReLU's gradient) follows float32's side.\n",
                     id, op_info(n.op).name, shape_str(n.shape).c_str(), flips, want.size(), where.c_str());
    }
}

}  // namespace

void check_against_reference(const Session::Impl& impl, const Graph& graph, const ref::Feeds& feeds, double limit) {
    const sched::Schedule& s = impl.schedule;
    DeviceValues device(impl, graph, feeds);
    const double strict_roundoff = std::ldexp(1.0, -24), half_roundoff = std::ldexp(1.0, -11);
    // Nodes in the order of the dispatches that last wrote them.
    std::vector<std::pair<const Session::Impl::CheckedWrite*, int32_t>> order;
    for (const auto& [node, w] : device.writes()) order.emplace_back(w, node);
    std::sort(order.begin(), order.end());
    for (const auto& [w, id] : order) {
        const Node& n = graph.node(id);
        // The node from the device's own inputs: a kernel's error, not its inputs' accumulated rounding.
        std::vector<const ref::Value*> inputs;
        for (int32_t in : n.inputs) inputs.push_back(&device(in));
        const double roundoff =
            n.dtype == DType::F16 || impl.options.precision == Precision::Fast ? half_roundoff : strict_roundoff;
        NodeError e;
        try {
            e = node_error(n, device(id).data, inputs, feeds, roundoff);
        } catch (const Error& err) {
            throw Error(std::string("MEGANEURA_CHECK: the reference cannot evaluate node ") + std::to_string(id) + ": " +
                        err.what());
        }
        if (e.relative_l2 <= limit && e.worst_element <= limit) continue;
        const std::string label = s.steps[w->step].kernel.label;
        throw Error("MEGANEURA_CHECK: node " + std::to_string(id) + " (" + op_info(n.op).name +
                    (n.name.empty() ? "" : " '" + n.name + "'") + ", " + shape_str(n.shape) + "), written by dispatch " +
                    std::to_string(w->step) + " '" + label + "', is the first to diverge from the reference: " +
                    format("relative L2 %.3g, element ", e.relative_l2) + std::to_string(e.worst_at) +
                    format(" off by %.3g of the RMS beyond rounding; limit %.3g", e.worst_element, limit));
    }
    report_decision_flips(graph, device, feeds);
}

}  // namespace mn::compiler
