// ONNX import (issue 18) against PyTorch: torch.onnx.export (Debian's python3-torch) writes an MLP,
// ResNet-50 and a transformer block at opsets 13 and 17; `meganeura forward --model FILE.onnx`
// runs them on the file's initializers, and its outputs and the gradients of their sum (under the
// initializers' ONNX names, which are PyTorch's state_dict names) are checked against PyTorch in
// float64 (tests/torch/onnx_models.py). Unsupported ops and dynamic shapes are one-line errors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "error_of.hpp"
#include "host_tools.hpp"
#include "io/safetensors.hpp"
#include "onnx.pb.h"
#include "meganeura/onnx.hpp"
#include "temp_dir.hpp"

namespace mn::test {
namespace {

double norm(const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += double(x) * x;
    return std::sqrt(s);
}

double distance(const std::vector<float>& a, const std::vector<float>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    return std::sqrt(s);
}

struct Case {
    const char* model;
    int opset;
    bool backward;  // ResNet-50's BatchNorms are folded into its convolutions: no state_dict names to compare
};

class OnnxVsTorch : public ::testing::TestWithParam<Case> {};

TEST_P(OnnxVsTorch, OutputsAndGradientsMatch) {
    MN_REQUIRE_TORCH();
    const Case c = GetParam();
    TempDir dir("onnx");
    ASSERT_EQ(exit_status(reference_python() + " " + source_dir() + "/tests/torch/onnx_models.py " + std::string(c.model) +
                          " " + dir.dir().string() + " --opset " + std::to_string(c.opset)), 0);
    int status = -1;
    const std::string output = run_command(cli_binary() + " forward --model " + dir.path("model.onnx") +
                                               " --inputs " + dir.path("inputs.safetensors") + " --out " +
                                               dir.path("out.safetensors") + (c.backward ? " --backward" : ""),
                                           &status);
    ASSERT_EQ(status, 0) << output;
    EXPECT_EQ(output.find("vulkan validation"), std::string::npos) << output;
    const io::TensorMap got = io::read_safetensors(dir.path("out.safetensors"));
    const io::TensorMap want = io::read_safetensors(dir.path("expected.safetensors"));

    const std::vector<float> out = got.at("output").to_f32(), ref = want.at("output").to_f32();
    ASSERT_EQ(got.at("output").shape, want.at("output").shape);
    EXPECT_LT(distance(out, ref) / norm(ref), 1e-5);
    if (!c.backward) return;
    double total = 0;  // the whole gradient's norm: the floor of each parameter's error
    for (const auto& [name, t] : want)
        if (name.rfind("grad.", 0) == 0) total += std::pow(norm(t.to_f32()), 2);
    total = std::sqrt(total);
    size_t compared = 0;
    for (const auto& [name, t] : want) {
        if (name.rfind("grad.", 0) != 0) continue;
        SCOPED_TRACE(name);
        ASSERT_TRUE(got.count(name)) << "the imported model has no parameter " << name.substr(5);
        const std::vector<float> g = got.at(name).to_f32(), w = t.to_f32();
        ASSERT_EQ(got.at(name).shape, t.shape);
        // Relative to the parameter's own gradient, or to a thousandth of the whole where that is ~0
        // (a key bias: softmax does not change when every key moves by the same amount).
        EXPECT_LT(distance(g, w), 1e-5 * std::max(norm(w), 1e-3 * total));
        ++compared;
    }
    EXPECT_EQ(compared + 1, got.size());  // every parameter compared, and the output
}

INSTANTIATE_TEST_SUITE_P(Models, OnnxVsTorch,
                         ::testing::Values(Case{"mlp", 13, true}, Case{"transformer", 13, true},
                                           Case{"transformer", 17, true}, Case{"resnet50", 13, false},
                                           Case{"resnet50", 17, false}),
                         [](const auto& info) {
                             return std::string(info.param.model) + "_opset" + std::to_string(info.param.opset);
                         });

// An imported graph trains as a native one: a loss on its output, compile, step.
TEST(OnnxImport, ImportedMlpTrains) {
    MN_REQUIRE_TORCH();
    TempDir dir("onnx");
    ASSERT_EQ(exit_status(reference_python() + " " + source_dir() + "/tests/torch/onnx_models.py mlp " + dir.dir().string()), 0);
    OnnxModel m = import_onnx(dir.path("model.onnx"));
    Graph& g = *m.graph;
    const Tensor labels = g.input("labels", {3}, DType::I32);
    const Tensor loss = g.cross_entropy(*g.find("output"), labels);
    Session s = compile(g, Device::open(), {.loss = loss, .optimizer = SGD{.lr = 0.1}});
    m.load_parameters(s);
    EXPECT_EQ(s.get("1.weight"), m.parameters.at("1.weight"));  // the file's weights, under their names
    s.set("x", io::read_safetensors(dir.path("inputs.safetensors")).at("x").to_f32());
    s.set("labels", std::vector<int32_t>{1, 7, 3});
    const float first = s.step();
    float last = first;
    for (int i = 0; i < 30; ++i) last = s.step();
    EXPECT_LT(last, first / 4) << first << " -> " << last;  // one batch, memorized
    EXPECT_NE(s.get("1.weight"), m.parameters.at("1.weight"));
}

// A model of one node: x [2, 3] (its first dimension the dynamic "batch" where asked) -> op -> y. Callers may add
// the node's other inputs and initializers before save() writes it.
struct OneNodeModel {
    ::onnx::ModelProto model;
    ::onnx::NodeProto* node;

    explicit OneNodeModel(const std::string& op, bool dynamic = false) {
        model.set_ir_version(8);
        model.add_opset_import()->set_version(13);
        auto* g = model.mutable_graph();
        auto* x = g->add_input();
        x->set_name("x");
        auto* type = x->mutable_type()->mutable_tensor_type();
        type->set_elem_type(::onnx::TensorProto::FLOAT);
        if (dynamic) type->mutable_shape()->add_dim()->set_dim_param("batch");
        else type->mutable_shape()->add_dim()->set_dim_value(2);
        type->mutable_shape()->add_dim()->set_dim_value(3);
        node = g->add_node();
        node->set_op_type(op);
        node->set_name("the_" + op);
        node->add_input("x");
        node->add_output("y");
        g->add_output()->set_name("y");
    }
    std::string save(const TempDir& dir, const std::string& name) const {
        const std::string path = dir.path(name);
        std::ofstream file(path, std::ios::binary);
        model.SerializeToOstream(&file);
        return path;
    }
};

std::string write_model(const TempDir& dir, const std::string& op, bool dynamic = false) {
    return OneNodeModel(op, dynamic).save(dir, op + ".onnx");
}

TEST(OnnxImport, OneNodeModelsAndTheirErrors) {
    TempDir dir("onnx");
    const OnnxModel relu = import_onnx(write_model(dir, "Relu"));
    EXPECT_EQ(relu.inputs, std::vector<std::string>{"x"});
    EXPECT_EQ(relu.outputs, std::vector<std::string>{"y"});
    EXPECT_EQ(relu.graph->find("y")->shape(), (Shape{2, 3}));

    const std::string erf = write_model(dir, "Erf");
    EXPECT_EQ(error_of([&] { import_onnx(erf); }), erf + ": op 'Erf' (node 'the_Erf') is not supported");
    const std::string dynamic = write_model(dir, "Tanh", true);
    EXPECT_EQ(error_of([&] { import_onnx(dynamic); }),
              dynamic + ": input 'x' has the dynamic dimension 'batch'; give the input's shape");
    EXPECT_EQ(import_onnx(dynamic, {{"x", {5, 3}}}).graph->find("y")->shape(), (Shape{5, 3}));
    OneNodeModel empty_initializer("Relu");  // found by fuzz_onnx: no raw bytes were copied to no values (memcpy to null)
    auto* empty = empty_initializer.model.mutable_graph()->add_initializer();
    empty->set_name("empty");
    empty->set_data_type(::onnx::TensorProto::FLOAT);
    empty->add_dims(0);
    empty->set_raw_data("");
    EXPECT_EQ(import_onnx(empty_initializer.save(dir, "empty_initializer.onnx")).graph->find("y")->shape(), (Shape{2, 3}));
    OneNodeModel no_output("Constant");  // found by fuzz_onnx: the rules define output 0 without looking
    no_output.node->clear_output();
    no_output.node->clear_name();
    const std::string silent = no_output.save(dir, "no_output.onnx");
    EXPECT_EQ(error_of([&] { import_onnx(silent); }), silent + ": op 'Constant' (node '') has no output");
    OneNodeModel huge_shape("Reshape");  // found by fuzz_onnx: a shape entry past int64's range, read as a double
    auto* shape = huge_shape.model.mutable_graph()->add_initializer();
    shape->set_name("shape");
    shape->set_data_type(::onnx::TensorProto::INT64);
    shape->add_dims(1);
    shape->add_int64_data(std::numeric_limits<int64_t>::max());
    huge_shape.node->add_input("shape");
    const std::string huge = huge_shape.save(dir, "huge_shape.onnx");
    EXPECT_EQ(error_of([&] { import_onnx(huge); }),
              huge + ": op 'Reshape' (node 'the_Reshape'): 9223372036854775808.000000 is not an integer (an axis, a size or an "
                     "index)");
    std::ofstream(dir.path("text.onnx")) << "not a model";
    EXPECT_EQ(error_of([&] { import_onnx(dir.path("text.onnx")); }),
              dir.path("text.onnx") + ": not an ONNX model (the protobuf does not parse)");
}

// x [2, 3] -> MatMul with W [3, 4], W's 12 floats in the file weights.bin beside the model, after 16 other bytes and
// before `trailing` more (as torch.onnx.export writes model.onnx.data): its external data entries are `location`,
// `offset` and, unless negative, `length`.
std::string write_external_model(const TempDir& dir, const std::string& location, int64_t offset, int64_t length,
                                 size_t trailing = 8) {
    OneNodeModel m("MatMul");
    m.node->add_input("W");
    auto* w = m.model.mutable_graph()->add_initializer();
    w->set_name("W");
    w->set_data_type(::onnx::TensorProto::FLOAT);
    w->add_dims(3);
    w->add_dims(4);
    w->set_data_location(::onnx::TensorProto::EXTERNAL);
    const auto entry = [&](const char* key, const std::string& value) {
        auto* e = w->add_external_data();
        e->set_key(key);
        e->set_value(value);
    };
    entry("location", location);
    entry("offset", std::to_string(offset));
    if (length >= 0) entry("length", std::to_string(length));
    std::vector<float> bytes_before(4, -1.0f), weights(12), bytes_after(trailing / 4, -2.0f);
    for (int i = 0; i < 12; ++i) weights[i] = 0.25f * static_cast<float>(i) - 1.0f;
    std::ofstream data(dir.path("weights.bin"), std::ios::binary);
    for (const auto* part : {&bytes_before, &weights, &bytes_after})
        data.write(reinterpret_cast<const char*>(part->data()), static_cast<std::streamsize>(part->size() * 4));
    return m.save(dir, "external.onnx");
}

// Initializers stored outside the model file (ONNX's external data) are read from their file, and run.
TEST(OnnxImport, ExternalData) {
    TempDir dir("onnx");
    for (int64_t length : {48, -1}) {  // without a length, the data runs to the file's end
        SCOPED_TRACE(length);
        OnnxModel m = import_onnx(write_external_model(dir, length < 0 ? "weights.bin" : "./weights.bin", 16, length,
                                                       length < 0 ? 0 : 8));
        const std::vector<float>& w = m.parameters.at("W");
        ASSERT_EQ(w.size(), 12u);
        for (int i = 0; i < 12; ++i) EXPECT_EQ(w[i], 0.25f * static_cast<float>(i) - 1.0f) << i;
        Session s = compile(*m.graph, Device::open());
        m.load_parameters(s);
        const std::vector<float> x = {1, 2, 3, -1, 0.5f, 2};
        s.set("x", x);
        s.run();
        const std::vector<float> y = s.get("y");
        for (int r = 0; r < 2; ++r)
            for (int c = 0; c < 4; ++c) {
                float want = 0;
                for (int k = 0; k < 3; ++k) want += x[r * 3 + k] * w[k * 4 + c];
                EXPECT_FLOAT_EQ(y[r * 4 + c], want) << r << ", " << c;
            }
    }
    const auto error = [&](const std::string& location, int64_t offset, int64_t length) {
        const std::string path = write_external_model(dir, location, offset, length);
        return error_of([&] { import_onnx(path); }).substr(path.size());
    };
    EXPECT_EQ(error("../weights.bin", 16, 48),
              ": initializer 'W': external data location '../weights.bin' is not inside the model's folder");
    EXPECT_EQ(error("/etc/passwd", 0, 48), ": initializer 'W': external data location '/etc/passwd' is not inside the model's folder");
    EXPECT_EQ(error("missing.bin", 16, 48), ": initializer 'W': cannot read its external data file " + dir.path("missing.bin"));
    EXPECT_EQ(error(".", 16, 48), ": initializer 'W': cannot read its external data file " + (dir.dir() / ".").string());
    const std::string long_name(5000, 'w');  // past PATH_MAX: the file system's error, not an exception of its own
    EXPECT_EQ(error(long_name, 16, 48), ": initializer 'W': cannot read its external data file " + dir.path(long_name));
    EXPECT_EQ(error("weights.bin", 40, 48), ": initializer 'W': external data bytes 40 to 88 are past the end of " +
                                                dir.path("weights.bin") + " (72 bytes)");
    EXPECT_EQ(error("weights.bin", 16, 46), ": initializer 'W': raw data of 46 bytes");
    EXPECT_EQ(error("weights.bin", 16, -1), ": initializer 'W': 14 values for shape (3,4)");  // to the end: 2 floats more
}

}  // namespace
}  // namespace mn::test
