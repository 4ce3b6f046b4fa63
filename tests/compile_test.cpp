// The compiler driver itself: what its passes leave behind does not depend on when or how fast they ran.
// Initial values are written in pieces on several threads, or by a device fill: the bytes must be those
// of the whole value written at once. Compiling a graph twice gives the same program; MEGANEURA_DEBUG=1
// prints each pass's time and each pipeline's.
#include <cstring>

#include "common/half.hpp"
#include "compiler/initial_values.hpp"
#include "compiler/program_kernels.hpp"
#include "gpu_check.hpp"
#include "models/registry.hpp"
#include "temp_dir.hpp"

namespace mn::test {
namespace {

using CompileTest = GpuTest;

// What write_initial_values (or write_constant) gives for the whole of node n at once, as floats.
std::vector<float> whole_value(const Node& n, uint64_t seed) {
    const int64_t count = numel(n.shape);
    std::vector<uint8_t> bytes(static_cast<size_t>(count) * dtype_size(n.dtype));
    if (n.op == Op::Constant) {
        compiler::write_constant(n, 0, count, bytes.data());
    } else {
        compiler::write_initial_values(n, seed, 0, count, bytes.data());
    }
    std::vector<float> out(static_cast<size_t>(count));
    for (size_t i = 0; i < out.size(); ++i) {
        if (n.dtype == DType::F16) {
            uint16_t h;
            std::memcpy(&h, bytes.data() + 2 * i, 2);
            out[i] = half_to_float(h);
        } else {
            std::memcpy(&out[i], bytes.data() + 4 * i, 4);
        }
    }
    return out;
}

TEST_F(CompileTest, InitialValuesDoNotDependOnHowTheyAreWritten) {
    Graph g;
    // f32 random values, which a device with 64-bit types draws itself (the same bits); staged, f16 ones in several
    // pieces of 2^18 elements, the last partial; f16 values of an odd count, whose ones cannot be a fill (the
    // padding stays zero); 145 MB staged, so that the staging goes in three chunks (of 64 MiB), the third through
    // the first one's buffer, and values span chunks.
    const std::vector<Tensor> values = {
        g.parameter("normal", {3, 200001}, Init::normal(0.5, 2)),
        g.parameter("large", {12, 1000000}, Init::uniform(-1, 1)),
        g.parameter("larger_f16", {24000001}, Init::uniform(0, 1), DType::F16),
        g.parameter("largest_f16", {24000000}, Init::uniform(-4, 0), DType::F16),
        g.parameter("last_f16", {24000003}, Init::uniform(2, 3), DType::F16),
        g.parameter("normal_f16", {3, 100001}, Init::normal(-1, 0.5), DType::F16),
        g.parameter("uniform_f16", {300001}, Init::uniform(-1, 3), DType::F16),
        g.parameter("ones", {7, 9}, Init::ones()),
        g.parameter("ones_f16", {5}, Init::ones(), DType::F16),
        g.parameter("zeros_f16", {5}, Init::zeros(), DType::F16),
        g.parameter("zeros", {600001}),
        g.state("moment", {4, 6}),
    };
    const Tensor quarter = g.constant({0.25}, {4, 6});
    Tensor sum = quarter;
    for (const Tensor& t : values) sum = sum + g.sum(t.dtype() == DType::F32 ? t : g.cast(t, DType::F32));
    g.output("sum", sum);
    CompileOptions options;
    options.seed = 17;
    const Session s = compile(g, device(), options);
    for (const Tensor& t : values) {
        const Node& n = g.node(t.id);
        EXPECT_TRUE(s.get(n.name) == whole_value(n, options.seed)) << n.name;  // no listing of 24M floats
    }
    EXPECT_EQ(compiler::fill_word(g.node(values[7].id)), 0x3F800000u);
    EXPECT_EQ(compiler::fill_word(g.node(values[8].id)), std::nullopt);
    EXPECT_EQ(compiler::fill_word(g.node(values[9].id)), 0u);
    EXPECT_EQ(compiler::fill_word(g.node(quarter.id)), 0x3E800000u);
    EXPECT_EQ(compiler::fill_word(g.node(values[0].id)), std::nullopt);
}

// CompileOptions::skip_init's parameters start at zero (their values come from the caller next) and the others
// from their Init; set or loaded, the skipped ones compute as any other.
TEST_F(CompileTest, SkippedParametersStartAtZeroUntilTheCallerGivesThemValues) {
    Graph g;
    const Tensor x = g.input("x", {2, 3});
    const Tensor loaded = g.parameter("loaded", {4, 3}, Init::normal(0, 1)), fresh = g.parameter("fresh", {4}, Init::uniform(1, 2));
    const Tensor half = g.parameter("half", {5}, Init::ones(), DType::F16);
    const Tensor y = g.linear(x, loaded, fresh), h = g.cast(half, DType::F32) * 2.0;
    g.output("y", y);
    g.output("h", h);
    Session s = compile(g, device(), {.skip_init = [](const std::string& name) { return name != "fresh"; }});
    EXPECT_EQ(s.get("loaded"), std::vector<float>(12, 0.0f));
    EXPECT_EQ(s.get("half"), std::vector<float>(5, 0.0f));
    const std::vector<float> initial = s.get("fresh");
    EXPECT_EQ(initial, whole_value(g.node(fresh.id), 0));
    ref::Feeds feeds = random_feeds(g, 3);
    feeds["fresh"] = {{4}, std::vector<double>(initial.begin(), initial.end())};
    set_feeds(s, g, feeds);
    s.run();
    const std::vector<ref::Value> want = ref::evaluate(g, feeds);
    EXPECT_LT(relative_l2(s.get("y"), want[static_cast<size_t>(y.id)].data), 1e-6);
    EXPECT_LT(relative_l2(s.get("h"), want[static_cast<size_t>(h.id)].data), 1e-3);
}

// The generator's values as they have been since it was written (uniform: 6df0223 and before) or since the device
// draws them (normal: Irwin-Hall in place of Box-Muller, whose libm calls no device could repeat): a run that loads no
// checkpoint starts from the same weights in every version from then on.
TEST(CompileInitialValues, AreTheSameAsEver) {
    const auto values = [](Init init) {
        const Node n{.op = Op::Parameter, .shape = {5}, .name = "w", .init = init};
        std::vector<float> v(5);
        compiler::write_initial_values(n, 17, 0, 5, reinterpret_cast<uint8_t*>(v.data()));
        return v;
    };
    EXPECT_EQ(values(Init::uniform(-1, 3)), (std::vector<float>{1.14331126f, 0.803995967f, 1.90621018f, 2.75409794f,
                                                                 1.80752099f}));
    EXPECT_EQ(values(Init::normal(0.5, 2)), (std::vector<float>{1.57989502f, 3.20111084f, -1.00238037f, 0.8777771f,
                                                                 0.419921875f}));
}

// MEGANEURA_DUMP's text of one pass for one compile of SmolLM2's tiny training step.
std::string dump_of_step(const std::string& pass) {
    const ScopedEnv dump("MEGANEURA_DUMP", pass);
    const models::BuiltModel m = models::find_model("smollm2").build({.size = "tiny"});
    testing::internal::CaptureStderr();
    compile(*m.graph, device(), {.loss = m.loss, .optimizer = AdamW{}});
    return testing::internal::GetCapturedStderr();
}

TEST_F(CompileTest, CompilingTwiceGivesTheSameProgram) {
    for (const char* pass : {"optimize", "order", "plan"}) {
        const std::string first = dump_of_step(pass);
        EXPECT_FALSE(first.empty()) << pass;
        EXPECT_EQ(first, dump_of_step(pass)) << pass;
    }
    const models::BuiltModel m = models::find_model("smollm2").build({.size = "tiny"});
    const CompileOptions step{.loss = m.loss, .optimizer = AdamW{}};
    const auto first = compiler::program_kernels(*m.graph, device().context()->caps(), step);
    const auto second = compiler::program_kernels(*m.graph, device().context()->caps(), step);
    ASSERT_EQ(first.size(), second.size());
    for (size_t i = 0; i < first.size(); ++i) {
        EXPECT_EQ(first[i].label, second[i].label) << i;
        EXPECT_EQ(first[i].glsl, second[i].glsl) << i;
        EXPECT_EQ(first[i].spec_values, second[i].spec_values) << i;
        EXPECT_EQ(first[i].groups, second[i].groups) << i;
    }
}

TEST_F(CompileTest, DebugPrintsTheTimeOfEveryPassAndPipeline) {
    const ScopedEnv debug("MEGANEURA_DEBUG", "1");
    Graph g;
    g.output("y", g.relu(g.matmul(g.input("x", {4, 6}), g.parameter("w", {6, 5}))));
    testing::internal::CaptureStderr();
    const Session s = compile(g, device());
    const std::string text = testing::internal::GetCapturedStderr();
    ASSERT_EQ(s.stats().pass_ms.size(), 10u) << text;
    for (const auto& [pass, ms] : s.stats().pass_ms) {
        EXPECT_GE(ms, 0) << pass;
        EXPECT_NE(text.find("  pass " + pass + " "), std::string::npos) << pass << " in\n" << text;
    }
    EXPECT_NE(text.find(" (pipeline "), std::string::npos) << text;  // the driver's time at its first step
}

}  // namespace
}  // namespace mn::test
