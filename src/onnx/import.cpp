// ONNX import (meganeura/onnx.hpp): the model file parsed with protobuf against Debian's onnx.proto, the
// initializers decoded, then every node lowered in file order (ONNX requires topological order)
// by the rule for its op type (ops.cpp).
#include "meganeura/onnx.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "onnx/lowering.hpp"

namespace mn::onnx {

std::string where(const ::onnx::NodeProto& node) {
    const std::string& name = node.name().empty() && node.output_size() ? node.output(0) : node.name();
    return "op '" + node.op_type() + "' (node '" + name + "')";
}

namespace {

const ::onnx::AttributeProto* find_attr(const ::onnx::NodeProto& node, const std::string& name) {
    for (const auto& a : node.attribute())
        if (a.name() == name) return &a;
    return nullptr;
}

template <class T>
std::vector<double> widen(const T& values) {
    return std::vector<double>(values.begin(), values.end());
}

template <class T>
std::vector<double> from_raw(const std::string& raw, const std::string& what) {
    if (raw.size() % sizeof(T)) throw Error(what + ": raw data of " + std::to_string(raw.size()) + " bytes");
    std::vector<T> values(raw.size() / sizeof(T));
    if (!raw.empty()) std::memcpy(values.data(), raw.data(), raw.size());  // an empty vector's data() may be null
    return widen(values);
}

}  // namespace

bool has_attr(const ::onnx::NodeProto& node, const std::string& name) { return find_attr(node, name) != nullptr; }

int64_t attr_int(const ::onnx::NodeProto& node, const std::string& name, int64_t fallback) {
    const auto* a = find_attr(node, name);
    if (!a) return fallback;
    if (a->type() != ::onnx::AttributeProto::INT) throw Error(where(node) + ": attribute " + name + " is not an integer");
    return a->i();
}

double attr_float(const ::onnx::NodeProto& node, const std::string& name, double fallback) {
    const auto* a = find_attr(node, name);
    if (!a) return fallback;
    if (a->type() != ::onnx::AttributeProto::FLOAT) throw Error(where(node) + ": attribute " + name + " is not a float");
    return a->f();
}

std::vector<int64_t> attr_ints(const ::onnx::NodeProto& node, const std::string& name, std::vector<int64_t> fallback) {
    const auto* a = find_attr(node, name);
    if (!a) return fallback;
    if (a->type() != ::onnx::AttributeProto::INTS) throw Error(where(node) + ": attribute " + name + " is not a list of integers");
    return {a->ints().begin(), a->ints().end()};
}

std::string attr_string(const ::onnx::NodeProto& node, const std::string& name, const std::string& fallback) {
    const auto* a = find_attr(node, name);
    if (!a) return fallback;
    if (a->type() != ::onnx::AttributeProto::STRING) throw Error(where(node) + ": attribute " + name + " is not a string");
    return a->s();
}

namespace {

// The bytes of a tensor stored outside the model (ONNX's external data: torch.onnx.export writes
// model.onnx.data beside model.onnx by default since PyTorch 2.9): `location` relative to the model's
// folder, from `offset`, `length` bytes (else to the file's end). As the onnx checker does, a location
// that is absolute or climbs out of the folder is refused.
std::string external_bytes(const ::onnx::TensorProto& t, const std::string& what, const std::filesystem::path& dir) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto& entry : t.external_data()) {
        const auto number = [&](const std::string& text) {
            size_t used = 0;
            int64_t v = -1;
            try {
                v = std::stoll(text, &used);
            } catch (const std::exception&) {
            }
            if (used != text.size() || v < 0)
                throw Error(what + ": external data " + entry.key() + " '" + text + "' is not a byte count");
            return v;
        };
        if (entry.key() == "location") location = entry.value();
        else if (entry.key() == "offset") offset = number(entry.value());
        else if (entry.key() == "length") length = number(entry.value());
    }
    if (location.empty()) throw Error(what + ": external data without a location");
    const std::filesystem::path relative(location);
    const bool climbs = std::any_of(relative.begin(), relative.end(), [](const auto& part) { return part == ".."; });
    if (relative.is_absolute() || relative.has_root_name() || climbs)
        throw Error(what + ": external data location '" + location + "' is not inside the model's folder");
    const std::filesystem::path file = dir / relative;
    std::error_code unreadable;  // a name too long, a folder we may not search: as a missing file
    std::ifstream in(file, std::ios::binary | std::ios::ate);
    if (!std::filesystem::is_regular_file(file, unreadable) || !in)
        throw Error(what + ": cannot read its external data file " + file.string());
    const auto size = static_cast<int64_t>(in.tellg());
    if (length < 0) length = std::max<int64_t>(0, size - offset);
    if (offset > size || length > size - offset)
        throw Error(what + ": external data bytes " + std::to_string(offset) + " to " + std::to_string(offset + length) +
                    " are past the end of " + file.string() + " (" + std::to_string(size) + " bytes)");
    std::string bytes(static_cast<size_t>(length), '\0');
    in.seekg(offset);
    if (!in.read(bytes.data(), length)) throw Error(what + ": cannot read its external data file " + file.string());
    return bytes;
}

}  // namespace

Constant decode(const ::onnx::TensorProto& t, const std::string& what, const std::filesystem::path& dir) {
    const bool external = t.data_location() == ::onnx::TensorProto::EXTERNAL;
    const std::string outside = external ? external_bytes(t, what, dir) : std::string();
    const std::string& bytes = external ? outside : t.raw_data();
    Constant c{.shape = Shape(t.dims().begin(), t.dims().end())};
    const bool raw = external || t.has_raw_data();
    switch (t.data_type()) {
        case ::onnx::TensorProto::FLOAT: c.values = raw ? from_raw<float>(bytes, what) : widen(t.float_data()); break;
        case ::onnx::TensorProto::DOUBLE: c.values = raw ? from_raw<double>(bytes, what) : widen(t.double_data()); break;
        case ::onnx::TensorProto::INT64:
            c.values = raw ? from_raw<int64_t>(bytes, what) : widen(t.int64_data());
            c.integer = true;
            break;
        case ::onnx::TensorProto::INT32:
            c.values = raw ? from_raw<int32_t>(bytes, what) : widen(t.int32_data());
            c.integer = true;
            break;
        default:
            throw Error(what + ": tensor type " + ::onnx::TensorProto::DataType_Name(
                                                      static_cast<::onnx::TensorProto::DataType>(t.data_type())) +
                        " is not supported (FLOAT, DOUBLE, INT32, INT64)");
    }
    if (static_cast<int64_t>(c.values.size()) != numel(c.shape))
        throw Error(what + ": " + std::to_string(c.values.size()) + " values for shape " + shape_str(c.shape));
    return c;
}

bool Lowering::has_input(const ::onnx::NodeProto& node, int i) const {
    return i < node.input_size() && !node.input(i).empty();
}

const Constant* Lowering::constant(const ::onnx::NodeProto& node, int i) const {
    if (!has_input(node, i) || float_initializers_.count(node.input(i))) return nullptr;
    auto it = constants_.find(node.input(i));
    return it == constants_.end() ? nullptr : &it->second;
}

const Constant& Lowering::required_constant(const ::onnx::NodeProto& node, int i) const {
    auto it = has_input(node, i) ? constants_.find(node.input(i)) : constants_.end();
    const Constant* c = it == constants_.end() ? nullptr : &it->second;
    if (!c) throw Error(where(node) + ": input " + std::to_string(i) + " must be known at import time (a constant)");
    return *c;
}

std::optional<Tensor> Lowering::find_tensor(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) return std::nullopt;
    return it->second;
}

Tensor Lowering::tensor(const ::onnx::NodeProto& node, int i) {
    if (!has_input(node, i)) throw Error(where(node) + ": input " + std::to_string(i) + " is missing");
    const std::string& name = node.input(i);
    if (auto t = find_tensor(name)) return *t;
    auto it = constants_.find(name);
    if (it == constants_.end()) throw Error(where(node) + ": input '" + name + "' is defined by no earlier node");
    const Constant& c = it->second;
    Tensor t;
    if (float_initializers_.count(name)) {
        t = graph_.parameter(name, c.shape);
        parameters_[name] = std::vector<float>(c.values.begin(), c.values.end());
    } else {
        t = graph_.constant(c.values, c.shape, c.integer ? DType::I32 : DType::F32);
    }
    tensors_[name] = t;
    return t;
}

Shape Lowering::shape(const ::onnx::NodeProto& node, int i) const {
    if (has_input(node, i))
        if (auto it = constants_.find(node.input(i)); it != constants_.end()) return it->second.shape;
    if (!has_input(node, i)) throw Error(where(node) + ": input " + std::to_string(i) + " is missing");
    if (auto t = find_tensor(node.input(i))) return t->shape();
    throw Error(where(node) + ": input '" + node.input(i) + "' is defined by no earlier node");
}

}  // namespace mn::onnx

namespace mn {

OnnxModel import_onnx(const std::string& path, const std::map<std::string, Shape>& input_shapes) {
    using onnx::Lowering, onnx::where, onnx::decode, onnx::rules;
    std::ifstream file(path, std::ios::binary);
    if (!file) throw Error("cannot read " + path);
    ::onnx::ModelProto proto;
    if (!proto.ParseFromIstream(&file)) throw Error(path + ": not an ONNX model (the protobuf does not parse)");
    for (const auto& opset : proto.opset_import()) {
        if ((opset.domain().empty() || opset.domain() == "ai.onnx") && (opset.version() < 7 || opset.version() > 18))
            throw Error(path + ": opset " + std::to_string(opset.version()) + " is not supported (7 to 18)");
    }
    OnnxModel m;
    Lowering lowering(*m.graph, m.parameters, std::filesystem::path(path).parent_path());
    const ::onnx::GraphProto& g = proto.graph();
    for (const auto& init : g.initializer())
        lowering.initializer(init.name(), decode(init, path + ": initializer '" + init.name() + "'", lowering.model_dir()),
                             init.data_type() == ::onnx::TensorProto::FLOAT || init.data_type() == ::onnx::TensorProto::DOUBLE);
    for (const auto& input : g.input()) {
        if (lowering.known(input.name())) continue;  // an initializer listed as an input (IR version < 4)
        const auto& type = input.type().tensor_type();
        if (type.elem_type() != ::onnx::TensorProto::FLOAT)
            throw Error(path + ": input '" + input.name() + "' is not float32; only float inputs are supported");
        Shape shape;
        auto given = input_shapes.find(input.name());
        for (const auto& dim : type.shape().dim()) {
            if (dim.has_dim_value()) {
                shape.push_back(dim.dim_value());
            } else if (given == input_shapes.end()) {
                throw Error(path + ": input '" + input.name() + "' has the dynamic dimension '" + dim.dim_param() +
                            "'; give the input's shape");
            }
        }
        if (given != input_shapes.end()) {
            if (!shape.empty() && shape.size() == given->second.size() && shape != given->second)
                throw Error(path + ": input '" + input.name() + "' is " + shape_str(shape) + ", the data " +
                            shape_str(given->second));
            shape = given->second;
        }
        lowering.define(input.name(), m.graph->input(input.name(), shape));
        m.inputs.push_back(input.name());
    }
    for (const auto& node : g.node()) {
        if (!node.domain().empty() && node.domain() != "ai.onnx")
            throw Error(path + ": " + where(node) + " is in the domain '" + node.domain() + "', which is not supported");
        auto rule = rules().find(node.op_type());
        if (rule == rules().end()) throw Error(path + ": " + where(node) + " is not supported");
        // Every op has an output; the rules define output 0 without looking.
        if (!node.output_size() || node.output(0).empty()) throw Error(path + ": " + where(node) + " has no output");
        try {
            rule->second(lowering, node);
        } catch (const Error& e) {
            const std::string text = e.what();
            throw Error(path + ": " + (text.rfind("op '", 0) == 0 ? text : where(node) + ": " + text));
        }
    }
    for (const auto& output : g.output()) {
        ::onnx::NodeProto use;  // the graph's output as a reader, for the errors of Lowering::tensor
        use.set_op_type("graph output");
        use.add_input(output.name());
        m.graph->output(output.name(), lowering.tensor(use, 0));
        m.outputs.push_back(output.name());
    }
    return m;
}

}  // namespace mn
