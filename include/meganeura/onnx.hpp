#pragma once
// ONNX import: a model file lowered into the graph IR, so it compiles, runs, differentiates and
// trains like a native model.
//
//   mn::OnnxModel m = mn::import_onnx("model.onnx");
//   mn::Session s = mn::compile(*m.graph, mn::Device::open());
//   m.load_parameters(s);  s.set("x", input);  s.run();  auto y = s.get(m.outputs[0]);
//
// Float initializers become parameters under their ONNX names (torch.onnx.export keeps the
// state_dict names), their data inside the file or in external data files beside it (torch.onnx.export's
// m.onnx.data); the graph's inputs and outputs keep theirs. Shapes are static: a dynamic
// dimension takes its size from `input_shapes`. An op without a rule (src/onnx/ops.cpp lists them),
// or an attribute a rule does not implement, is an mn::Error naming the op and the node.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "meganeura/graph.hpp"
#include "meganeura/session.hpp"

namespace mn {

struct OnnxModel {
    std::unique_ptr<Graph> graph = std::make_unique<Graph>();  // on the heap: Tensors point at it
    std::vector<std::string> inputs;   // the ONNX graph's inputs that are not initializers
    std::vector<std::string> outputs;  // the ONNX graph's outputs
    std::map<std::string, std::vector<float>> parameters;  // every initializer the graph reads as a tensor
    // Sets every parameter of a session compiled from `graph` to the file's values.
    void load_parameters(Session& session) const;
};

OnnxModel import_onnx(const std::string& path, const std::map<std::string, Shape>& input_shapes = {});

}  // namespace mn
