// Bad input gets a clear mn::Error whose message names the op, the shapes or the known names.
#include <map>

#include "gpu_check.hpp"
#include "error_of.hpp"
#include "runtime/runtime.hpp"

namespace mn::test {
namespace {

TEST(GraphErrorsTest, ShapeMismatchesNameTheOpAndShapes) {
    Graph g;
    auto a = g.input("a", {3, 4});
    auto b = g.input("b", {5, 6});
    EXPECT_EQ(error_of([&] { g.matmul(a, b); }), "[matmul] a is (3,4), b is (5,6): inner dims 4 != 5");
    EXPECT_EQ(error_of([&] { g.add(a, b); }), "[add] a is (3,4), b is (5,6): cannot broadcast");
    EXPECT_EQ(error_of([&] { g.reshape(a, {5, -1}); }), "[reshape] cannot reshape (3,4) to (5,-1)");
    EXPECT_EQ(error_of([&] { g.sum(a, {2}); }), "[sum] axis 2 is out of range for rank 2");
    EXPECT_EQ(error_of([&] { g.linear(a, g.parameter("w", {4, 3})); }),
              "[linear] x is (3,4), weight is (4,3): weight must be [out, 4]");
    EXPECT_EQ(error_of([&] { g.concat({a, b}, 0); }), "[concat] tensors (3,4) and (5,6) differ outside axis 0");
    EXPECT_EQ(error_of([&] { g.permute(a, {0, 0}); }), "[permute] perm (0,0) repeats an axis");
    // Shapes read from files (ONNX) may count more elements than an int64 holds, or name negative sizes.
    const int64_t huge = int64_t{1} << 62;
    EXPECT_EQ(error_of([&] { g.reshape(a, {huge, 4, -1}); }),
              "[reshape] shape (4611686018427387904,4,-1) has more elements than a 64-bit count holds");
    EXPECT_EQ(error_of([&] { g.input("big", {huge, 2, 2}); }),
              "[input] shape (4611686018427387904,2,2) has more elements than a 64-bit count holds");
    EXPECT_EQ(error_of([&] { g.input("negative", {3, -2}); }), "[input] negative dimension in (3,-2)");
}

// verify_graph checks what a pass appends through Graph::emit (which checks only that its inputs exist) against
// ops.def; every graph the builders make passes it.
TEST(GraphErrorsTest, VerifyGraphChecksArityAgainstOpsDef) {
    Graph g;
    auto x = g.input("x", {4, 3});
    auto y = g.relu(g.matmul(x, g.parameter("w", {3, 2})));
    g.output("y", y);
    EXPECT_EQ(error_of([&] { verify_graph(g); }), "");
    Graph bad_arity = g;
    bad_arity.emit({.op = Op::Add, .inputs = {y.id}, .shape = {4, 2}, .dtype = DType::F32});
    EXPECT_EQ(error_of([&] { verify_graph(bad_arity); }), "graph: node %4 (add) has 1 inputs; ops.def gives it 2");
    Graph bad_concat = g;
    bad_concat.emit({.op = Op::Concat, .shape = {4, 2}, .dtype = DType::F32, .ints = {0}});
    EXPECT_EQ(error_of([&] { verify_graph(bad_concat); }), "graph: node %4 (concat) has no inputs; ops.def gives it one or more");
}

TEST(GraphErrorsTest, DtypeAndNameErrors) {
    Graph g;
    auto x = g.input("x", {4, 3});
    auto labels = g.input("labels", {4});
    EXPECT_EQ(error_of([&] { g.cross_entropy(x, labels); }), "[cross_entropy] labels must be i32, got f32");
    EXPECT_EQ(error_of([&] { g.add(x, g.input("i", {4, 3}, DType::I32)); }), "[add] dtypes differ: a is f32, b is i32");
    EXPECT_EQ(error_of([&] { g.input("x", {1}); }), "[input] name 'x' is already used");
    EXPECT_EQ(error_of([&] { g.exp(g.find("i").value()); }), "[exp] needs a float tensor, got i32");
    EXPECT_EQ(error_of([&] { g.gelu(x, "fast"); }), "[gelu] approximate must be \"none\" or \"tanh\", got \"fast\"");
}

using SessionErrorsTest = GpuTest;

TEST_F(SessionErrorsTest, UnknownNamesListTheKnownOnes) {
    Graph g;
    auto x = g.input("x", {2, 3});
    g.output("y", g.relu(x));
    Session s = compile(g, device());
    EXPECT_EQ(error_of([&] { s.set("z", std::vector<float>(6)); }), "unknown tensor 'z'; known names: x, y");
    EXPECT_EQ(error_of([&] { s.get("w"); }), "unknown tensor 'w'; known names: x, y");
}

TEST_F(SessionErrorsTest, WrongSizesAndDtypesAreRejected) {
    Graph g;
    auto x = g.input("x", {2, 3});
    auto labels = g.input("labels", {2}, DType::I32);
    g.output("loss", g.cross_entropy(x, labels));
    Session s = compile(g, device());
    EXPECT_EQ(error_of([&] { s.set("x", std::vector<float>(5)); }), "set 'x': 5 values for shape (2,3) (6 elements)");
    EXPECT_EQ(error_of([&] { s.set("labels", std::vector<float>(2)); }), "set 'labels': the tensor is i32; pass int32 values");
    EXPECT_EQ(error_of([&] { s.set("x", std::vector<int32_t>(6)); }), "set 'x': the tensor is f32; pass float values");
    EXPECT_EQ(error_of([&] { s.set("loss", std::vector<float>(1)); }), "set 'loss': only inputs, parameters and states can be set");
    EXPECT_EQ(error_of([&] { s.get_i32("x"); }), "get_i32 'x': the tensor is not i32");
    std::vector<float> five(5);
    EXPECT_EQ(error_of([&] { s.get("x", five); }), "get 'x': 5 values for shape (2,3)");
    EXPECT_EQ(error_of([&] { s.get("labels", five); }), "get 'labels': the tensor is i32; use get_i32");
}

TEST_F(SessionErrorsTest, AGraphWithoutOutputsIsRejected) {
    Graph g;
    g.relu(g.input("x", {2}));
    EXPECT_EQ(error_of([&] { compile(g, device()); }),
              "compile: the graph has no outputs (mark them with graph.output(name, tensor))");
}

TEST_F(SessionErrorsTest, ParametersCanBeSetAndReadBack) {
    Graph g;
    auto w = g.parameter("w", {3}, Init::ones());
    g.output("y", g.mul(g.input("x", {3}), w));
    Session s = compile(g, device());
    EXPECT_EQ(s.get("w"), (std::vector<float>{1, 1, 1}));
    s.set("w", std::vector<float>{1, 2, 3});
    s.set("x", std::vector<float>{2, 2, 2});
    s.run();
    EXPECT_EQ(s.get("y"), (std::vector<float>{2, 4, 6}));
    EXPECT_EQ(s.get("w"), (std::vector<float>{1, 2, 3}));
}

// Several tensors set and read at once do what set() and get() do one at a time: inputs, parameters (one of them
// f16) and outputs in one call each; a mistake in any of them writes none.
TEST_F(SessionErrorsTest, SeveralTensorsAreSetAndReadAtOnce) {
    Graph g;
    auto w = g.parameter("w", {3}, Init::ones());
    auto h = g.parameter("h", {3}, Init::ones(), DType::F16);
    g.output("y", g.mul(g.mul(g.input("x", {3}), w), g.cast(h, DType::F32)));
    Session s = compile(g, device());
    s.set({{"w", {1, 2, 3}}, {"h", {0.5f, 2, -1}}, {"x", {2, 2, 2}}});
    s.run();
    const std::map<std::string, std::vector<float>> got = s.get({"y", "w", "h", "x"});
    EXPECT_EQ(got, (std::map<std::string, std::vector<float>>{
                       {"y", {1, 8, -6}}, {"w", {1, 2, 3}}, {"h", {0.5f, 2, -1}}, {"x", {2, 2, 2}}}));
    EXPECT_EQ(error_of([&] { s.set({{"w", {7, 7, 7}}, {"x", {1, 2}}}); }), "set 'x': 2 values for shape (3) (3 elements)");
    EXPECT_EQ(s.get("w"), (std::vector<float>{1, 2, 3}));
    EXPECT_EQ(error_of([&] { s.get(std::vector<std::string>{"w", "z"}); }), "unknown tensor 'z'; known names: h, w, x, y");
}

// A device allocation that cannot succeed is an mn::Error naming its size and kind, not an abort,
// and the device stays usable. (Compile refuses tensors past the storage-buffer range first, so
// the allocation is asked for directly, one byte past the largest buffer the device allows.)
TEST_F(SessionErrorsTest, AnAllocationTheDeviceCannotMakeIsAnError) {
    const std::shared_ptr<rt::Context> ctx = device().context();
    const uint64_t bytes = ctx->caps().max_buffer_size + 1;
    EXPECT_EQ(error_of([&] { rt::Buffer(ctx, bytes, rt::MemoryKind::DeviceLocal); }),
              "cannot allocate a " + std::to_string(bytes) + "-byte device-local buffer: the device's largest buffer is " +
                  std::to_string(bytes - 1) + " bytes");
    EXPECT_EQ(error_of([&] { rt::Buffer(ctx, 1024, rt::MemoryKind::DeviceLocal); }), "");
}

}  // namespace
}  // namespace mn::test
