#include "models/runner.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "meganeura/autodiff.hpp"
#include "runtime/runtime.hpp"

namespace mn::models {

namespace {

std::string gib(double bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f GiB", bytes / double(1ull << 30));
    return text;
}

// The ids an i32 input may hold, [0, limit), where it indexes rows: an embedding table's, or the
// classes of a cross-entropy (which also takes its ignore index). Reshapes, slices and concatenations
// (a causal LM's shifted labels) pass the ids through unchanged. nullopt when nothing indexes with it.
struct IndexUse {
    int64_t limit;
    const char* what;
    std::optional<int64_t> ignored;  // a cross-entropy's ignore index
};
std::optional<IndexUse> index_use(const Graph& g, int32_t input) {
    std::vector<int32_t> ids = {input};  // the input and every view of it
    std::optional<IndexUse> use;
    for (int32_t id = input; id < static_cast<int32_t>(g.nodes().size()); ++id) {
        const Node& n = g.node(id);
        auto reads = [&](size_t slot) {
            return n.inputs.size() > slot && std::find(ids.begin(), ids.end(), n.inputs[slot]) != ids.end();
        };
        const bool passes = n.op == Op::Reshape || n.op == Op::Slice || n.op == Op::Concat;
        if (passes && std::any_of(n.inputs.begin(), n.inputs.end(), [&](int32_t in) {
                return std::find(ids.begin(), ids.end(), in) != ids.end();
            }))
            ids.push_back(id);
        std::optional<IndexUse> here;
        if (n.op == Op::Embedding && reads(0)) here = IndexUse{g.node(n.inputs[1]).shape[0], "rows of the embedding table", {}};
        if (n.op == Op::CrossEntropy && reads(1)) here = IndexUse{g.node(n.inputs[0]).shape.back(), "classes of the loss", n.ints[0]};
        if (here && (!use || here->limit < use->limit)) use = here;
    }
    return use;
}

}  // namespace

void check_fits_device(const Graph& g, const Device& device, const std::string& model) {
    double bytes = 0;  // a double: a config's dimensions may multiply past 2^64
    for (const Node& n : g.nodes()) {
        if (n.op != Op::Parameter && n.op != Op::Input && n.op != Op::State) continue;
        double numel = 1;
        for (int64_t d : n.shape) numel *= static_cast<double>(d);
        bytes += numel * static_cast<double>(dtype_size(n.dtype));
    }
    double local = 0, all = 0;
    for (const rt::MemoryHeap& heap : device.context()->caps().heaps) {
        all += static_cast<double>(heap.size);
        if (heap.device_local) local += static_cast<double>(heap.size);
    }
    const double available = local > 0 ? local : all;
    if (bytes > available)
        throw Error(model + ": the parameters and inputs need " + gib(bytes) + ", the device " + device.name() +
                    " has " + gib(available));
}

std::map<std::string, Shape> shapes_of(const io::TensorMap& inputs) {
    std::map<std::string, Shape> shapes;
    for (const auto& [name, t] : inputs) shapes[name] = t.shape;
    return shapes;
}

PreparedModel prepare_model(const Device& device, const std::string& name, const ModelRequest& request, bool backward,
                            const CompileOptions& options) {
    BuiltModel model = find_model(name).build(request);
    check_fits_device(*model.graph, device, name);
    std::vector<std::string> grad_names;
    if (backward) {
        Graph& g = *model.graph;
        std::vector<Tensor> params;
        for (int32_t id = 0; id < static_cast<int32_t>(g.nodes().size()); ++id) {
            if (g.node(id).op != Op::Parameter) continue;
            params.push_back(g.handle(id));
            grad_names.push_back("grad." + g.node(id).name);
        }
        const std::vector<Tensor> grads = grad(model.loss, params);
        for (size_t i = 0; i < grads.size(); ++i) g.output(grad_names[i], grads[i]);
    }
    Session session = compile(*model.graph, device, options);
    return {std::move(model), std::move(grad_names), std::move(session)};
}

void set_inputs(Session& session, const BuiltModel& model, const io::TensorMap& inputs) {
    for (const std::string& name : model.inputs) {
        auto it = inputs.find(name);
        if (it == inputs.end()) {
            std::string wanted;
            for (const auto& n : model.inputs) wanted += " " + n;
            throw Error("the inputs have no tensor '" + name + "'; the model reads:" + wanted);
        }
        const Node& node = model.graph->node(*model.graph->find(name));
        if (it->second.shape != node.shape) {
            throw Error("input '" + name + "' has shape " + shape_str(it->second.shape) + ", the model was built for " +
                        shape_str(node.shape));
        }
        if (node.dtype == DType::I32) {
            const std::vector<int32_t> ids = it->second.to_i32("input '" + name + "'");
            if (const auto use = index_use(*model.graph, model.graph->find(name)->id)) {
                const auto bad = std::find_if(ids.begin(), ids.end(),
                                              [&](int32_t v) { return (v < 0 || v >= use->limit) && v != use->ignored; });
                if (bad != ids.end())
                    throw Error("input '" + name + "': value " + std::to_string(*bad) + " at index " +
                                std::to_string(bad - ids.begin()) + " is outside [0, " + std::to_string(use->limit) +
                                "), the " + use->what +
                                (use->ignored ? " (" + std::to_string(*use->ignored) + " is ignored)" : std::string()));
            }
            session.set(name, ids);
        } else {
            session.set(name, it->second.to_f32("input '" + name + "'"));
        }
    }
}

io::TensorMap read_outputs(const PreparedModel& p) {
    io::TensorMap out;
    auto put = [&](const std::string& name) {
        out[name] = io::TensorData::from_f32(p.session.shape(name), p.session.get(name));
    };
    put(p.model.output_name);
    put("loss");
    for (const std::string& name : p.grad_names) put(name);
    return out;
}

}  // namespace mn::models
