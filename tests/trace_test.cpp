// MEGANEURA_TRACE=FILE (issue 18): any command writes a Chrome / Perfetto trace whose GPU events are
// one per dispatch, named by the layer and ops of the graph nodes they compute, with the nodes'
// shapes, the kernel and its GPU time; a trace file that cannot be written is a one-line error.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "compiler/trace.hpp"
#include "host_tools.hpp"
#include "io/safetensors.hpp"
#include "models/registry.hpp"
#include "temp_dir.hpp"

namespace mn::test {
namespace {

using nlohmann::json;

int traced(const std::string& trace, const std::string& args, std::string* output, const std::string& env = "") {
    int status = -1;
    *output = run_command(env + "MEGANEURA_TRACE='" + trace + "' " + cli_binary() + " " + args, &status);
    return status;
}

json events_of(const std::string& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in) << path;
    return json::parse(in)["traceEvents"];
}

TEST(Trace, ForwardWithBackwardNamesEveryDispatchByItsGraphNodes) {
    TempDir dir("trace");
    const models::ModelRequest request{.input_shapes = {{"images", {3, 784}}}};
    io::write_safetensors(dir.path("in.safetensors"), models::find_model("mlp").example_inputs(request, false, 1));
    std::string output;
    ASSERT_EQ(traced(dir.path("t.json"), "forward --model mlp --backward --inputs " + dir.path("in.safetensors") +
                                             " --out " + dir.path("out.safetensors"), &output), 0) << output;
    const json events = events_of(dir.path("t.json"));

    std::vector<json> runs, dispatches;
    std::set<std::string> passes, names;
    for (const json& e : events) {
        const std::string cat = e.value("cat", "");
        if (cat == "run") runs.push_back(e);
        if (cat == "dispatch") dispatches.push_back(e), names.insert(e["name"].get<std::string>());
        if (cat == "compile") passes.insert(e["name"].get<std::string>());
    }
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0]["args"]["dispatches"].get<size_t>(), dispatches.size());
    EXPECT_GE(dispatches.size(), 10u);
    for (const char* pass : {"compile: build", "compile: lower", "compile: kernels", "compile: record"})
        EXPECT_TRUE(passes.count(pass)) << pass;
    // Forward and backward of each of the MLP's three layers, under the layer's parameter names.
    std::string all;
    for (const std::string& n : names) all += "\n  " + n;
    // (A forward matmul stores its bias and activation through an epilogue: "fc1: matmul, relu".)
    for (const std::string name : {"fc1: matmul", "fc2: matmul", "fc3: matmul", "grad fc3: matmul", "grad fc1: matmul"}) {
        EXPECT_TRUE(std::any_of(names.begin(), names.end(), [&](const std::string& n) { return n.rfind(name, 0) == 0; }))
            << name << " begins none of the dispatch names:" << all;
    }
    double gpu_ms = 0;
    for (const json& d : dispatches) {
        const double ms = d["args"]["gpu_ms"].get<double>();
        EXPECT_GE(ms, 0);
        EXPECT_DOUBLE_EQ(d["dur"].get<double>(), ms * 1e3);
        EXPECT_EQ(d["tid"], runs[0]["tid"].get<int>() + 1);  // the session's GPU track
        EXPECT_FALSE(d["args"]["kernel"].get<std::string>().empty());
        gpu_ms += ms;
    }
    EXPECT_GT(gpu_ms, 0);
    EXPECT_NEAR(gpu_ms, runs[0]["args"]["gpu_ms"].get<double>(), 1e-9 * gpu_ms);
    // The first layer's product, stored through its bias and ReLU (whose gradient reads the ReLU's output):
    // the node it writes, with the batch of 3 the inputs file gave.
    const auto fc1 = std::find_if(dispatches.begin(), dispatches.end(), [](const json& d) { return d["name"] == "fc1: matmul, relu"; });
    ASSERT_NE(fc1, dispatches.end()) << all;
    ASSERT_EQ((*fc1)["args"]["nodes"].size(), 1u);
    const std::string node = (*fc1)["args"]["nodes"][0];
    EXPECT_NE(node.find(" relu (3,256) f32"), std::string::npos) << node;
}

// A split-K product whose pieces a dispatch of their own sums (MEGANEURA_SPLIT_SUM=dispatch) writes partial sums
// only: it is named after the sum that reads them, as a part of it (so are the loss's scratch dispatches).
TEST(Trace, AProductsPiecesAreNamedAfterTheirSum) {
    TempDir dir("trace");
    const models::ModelRequest request{.input_shapes = {{"images", {3, 784}}}};
    io::write_safetensors(dir.path("in.safetensors"), models::find_model("mlp").example_inputs(request, false, 1));
    std::string output;
    ASSERT_EQ(traced(dir.path("t.json"), "forward --model mlp --inputs " + dir.path("in.safetensors") + " --out " +
                                             dir.path("out.safetensors"),
                     &output, "MEGANEURA_MATMUL_SPLITS=2 MEGANEURA_SPLIT_SUM=dispatch "),
              0) << output;
    std::vector<std::string> names;
    for (const json& e : events_of(dir.path("t.json")))
        if (e.value("cat", "") == "dispatch") names.push_back(e["name"].get<std::string>());
    std::string all;
    for (const std::string& n : names) all += "\n  " + n;
    const std::string part = " (part)";
    size_t products = 0;
    for (auto it = names.begin(); it != names.end(); ++it) {
        if (it->size() <= part.size() || it->compare(it->size() - part.size(), part.size(), part)) continue;
        const std::string whole = it->substr(0, it->size() - part.size());  // "fc1: matmul, relu" and the like
        EXPECT_NE(std::find(it + 1, names.end(), whole), names.end()) << whole << " follows none of its parts:" << all;
        products += whole.find(": matmul") != std::string::npos;
    }
    EXPECT_EQ(products, 3u) << all;  // each layer's product, its K in two pieces
}

// A convolution whose weight is computed from parameters (a batch norm's scale folded in, as ResNet-50's are)
// is in its weight's layer, not in the layer of the activation it reads (every one was "conv1", the stem's).
TEST(Trace, AFoldedWeightNamesItsConvolutionsLayer) {
    Graph g;
    Tensor stem = g.relu(g.conv2d(g.input("x", {1, 3, 8, 8}), g.parameter("conv1.weight", {8, 3, 3, 3}), std::nullopt,
                                  {.padding = 1}));
    Tensor folded = g.parameter("layer1.conv.weight", {8, 8, 3, 3}) * g.parameter("layer1.bn.weight", {8, 1, 1, 1});
    Tensor y = g.conv2d(stem, folded, std::nullopt, {.padding = 1});
    Tensor out = g.relu(y);
    const std::vector<std::string> layer = compiler::node_layers(g);
    EXPECT_EQ(layer[static_cast<size_t>(stem.id)], "conv1");
    EXPECT_EQ(layer[static_cast<size_t>(folded.id)], "layer1.conv");
    EXPECT_EQ(layer[static_cast<size_t>(y.id)], "layer1.conv");
    EXPECT_EQ(layer[static_cast<size_t>(out.id)], "layer1.conv");
}

TEST(Trace, EverySessionHasItsTracks) {
    TempDir dir("trace");
    std::string output;
    ASSERT_EQ(traced(dir.path("t.json"), "generate --size tiny --tokens 1,2 --max-new 3", &output), 0) << output;
    std::set<int> host_tracks, gpu_tracks;
    int runs = 0;
    for (const json& e : events_of(dir.path("t.json"))) {
        if (e.value("cat", "") == "run") host_tracks.insert(e["tid"].get<int>()), ++runs;
        if (e.value("cat", "") == "dispatch") gpu_tracks.insert(e["tid"].get<int>());
    }
    EXPECT_EQ(runs, 5);  // the warm-up's prefill and decode, the prefill, then two one-token decodes
    EXPECT_EQ(host_tracks.size(), 2u);  // the prefill and the decode programs
    EXPECT_EQ(gpu_tracks.size(), 2u);
}

TEST(Trace, AnUnwritableTraceIsAOneLineError) {
    std::string output;
    const models::ModelRequest request{};
    TempDir dir("trace");
    io::write_safetensors(dir.path("in.safetensors"), models::find_model("mlp").example_inputs(request, false, 1));
    EXPECT_EQ(traced("/nonexistent/t.json", "forward --model mlp --inputs " + dir.path("in.safetensors") + " --out " +
                                                dir.path("out.safetensors"), &output), 1);
    EXPECT_NE(output.find("meganeura forward: error: MEGANEURA_TRACE /nonexistent/t.json: the folder /nonexistent does not exist"),
              std::string::npos) << output;
}

}  // namespace
}  // namespace mn::test
