#pragma once
// What the op rules (ops.cpp) see while import.cpp walks an ONNX graph in order: the value of every
// name so far, either a graph Tensor or a constant known at import time (initializers, Constant
// nodes, and shape arithmetic folded on them), and the node's attributes.
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "meganeura/graph.hpp"
#include "onnx.pb.h"

namespace mn::onnx {

struct Constant {
    Shape shape;
    std::vector<double> values;
    bool integer = false;  // INT64/INT32: arithmetic on it stays integral
};

class Lowering {
public:
    // model_dir: the model file's folder, where the locations of its tensors' external data start.
    Lowering(Graph& graph, std::map<std::string, std::vector<float>>& parameters, std::filesystem::path model_dir)
        : graph_(graph), parameters_(parameters), model_dir_(std::move(model_dir)) {}
    Graph& graph() { return graph_; }
    const std::filesystem::path& model_dir() const { return model_dir_; }

    // Operand `i` of the node as a graph tensor: a constant becomes a node (a float initializer a
    // parameter under its name); an error names the node when it is missing or not float.
    Tensor tensor(const ::onnx::NodeProto& node, int i);
    // Operand `i` when it is a constant, else null; and whether the node has operand i at all. A float
    // initializer is a parameter, a tensor: only required_constant (a Pow's exponent) reads its value.
    const Constant* constant(const ::onnx::NodeProto& node, int i) const;
    bool has_input(const ::onnx::NodeProto& node, int i) const;
    const Constant& required_constant(const ::onnx::NodeProto& node, int i) const;
    // The shape of operand i, tensor or constant.
    Shape shape(const ::onnx::NodeProto& node, int i) const;

    void define(const std::string& name, Tensor t) { tensors_[name] = t; }
    void define(const std::string& name, Constant c) { constants_[name] = std::move(c); }
    void initializer(const std::string& name, Constant c, bool is_float) {
        if (is_float) float_initializers_.insert(name);
        define(name, std::move(c));
    }
    bool known(const std::string& name) const { return tensors_.count(name) || constants_.count(name); }
    std::optional<Tensor> find_tensor(const std::string& name) const;

private:
    Graph& graph_;
    std::map<std::string, std::vector<float>>& parameters_;
    std::filesystem::path model_dir_;
    std::map<std::string, Tensor> tensors_;
    std::map<std::string, Constant> constants_;
    std::set<std::string> float_initializers_;
};

// "op 'Conv' (node 'conv1'): ..." for errors.
std::string where(const ::onnx::NodeProto& node);

// Attributes, with defaults; a wrong type is an error naming the node.
int64_t attr_int(const ::onnx::NodeProto& node, const std::string& name, int64_t fallback);
double attr_float(const ::onnx::NodeProto& node, const std::string& name, double fallback);
std::vector<int64_t> attr_ints(const ::onnx::NodeProto& node, const std::string& name, std::vector<int64_t> fallback = {});
std::string attr_string(const ::onnx::NodeProto& node, const std::string& name, const std::string& fallback);
bool has_attr(const ::onnx::NodeProto& node, const std::string& name);
// A TensorProto's values (FLOAT, DOUBLE, INT32, INT64; raw or typed fields, or external data in a file under dir).
Constant decode(const ::onnx::TensorProto& t, const std::string& what, const std::filesystem::path& dir);

// One rule per ONNX op type: lowers the node, defining its outputs.
using Rule = std::function<void(Lowering&, const ::onnx::NodeProto&)>;
const std::map<std::string, Rule>& rules();

}  // namespace mn::onnx
