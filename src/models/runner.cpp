#include "models/runner.hpp"

#include "meganeura/autodiff.hpp"

namespace mn::models {

std::map<std::string, Shape> shapes_of(const io::TensorMap& inputs) {
    std::map<std::string, Shape> shapes;
    for (const auto& [name, t] : inputs) shapes[name] = t.shape;
    return shapes;
}

PreparedModel prepare_model(const Device& device, const std::string& name, const ModelRequest& request, bool backward,
                            const CompileOptions& options) {
    BuiltModel model = find_model(name).build(request);
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
            session.set(name, it->second.to_i32("input '" + name + "'"));
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
