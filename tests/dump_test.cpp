// MEGANEURA_DUMP=<pass>: what each pass printed for y = relu(h + b) and z = exp(h), h = x @ w.
#include "gpu_check.hpp"
#include "error_of.hpp"
#include "temp_dir.hpp"

namespace mn::test {
namespace {

using DumpTest = GpuTest;

std::string dump_of(const std::string& pass) {
    const ScopedEnv dump("MEGANEURA_DUMP", pass);
    Graph g;
    const Tensor x = g.input("x", {4, 6});
    const Tensor w = g.parameter("w", {6, 5});
    const Tensor b = g.parameter("b", {5});
    const Tensor h = g.matmul(x, w);
    g.output("y", g.relu(h + b));
    g.output("z", g.exp(h));  // h read by two kernels: the matmul stores it beside its epilogue (see FusionTest)
    testing::internal::CaptureStderr();
    compile(g, device());
    return testing::internal::GetCapturedStderr();
}

TEST_F(DumpTest, EachPassPrintsItsState) {
    const std::string build = dump_of("build");
    EXPECT_NE(build.find("%2 = parameter 'b' : f32(5)\n%3 = matmul %0, %1"), std::string::npos) << build;
    const std::string lower = dump_of("lower");
    EXPECT_EQ(lower.rfind("2 steps, ", 0), 0u) << lower;
    EXPECT_NE(lower.find("step 0: matmul+add+relu"), std::string::npos) << lower;
    EXPECT_NE(lower.find("W eo0: v"), std::string::npos) << lower;  // the matmul writes its product too
    EXPECT_NE(dump_of("order").find("step 0 level 0: matmul"), std::string::npos);
    const std::string plan = dump_of("plan");
    EXPECT_EQ(plan.rfind("arena ", 0), 0u) << plan;
    EXPECT_NE(plan.find("parameter 120 bytes, pinned"), std::string::npos) << plan;  // w: 6 x 5 f32
    EXPECT_NE(plan.find("transient 80 bytes, levels 0..1, arena offset "), std::string::npos) << plan;
}

TEST_F(DumpTest, UnknownPassIsNamed) {
    const std::string error = error_of([] { dump_of("parse"); });
    testing::internal::GetCapturedStderr();  // dump_of's, left open by the throw
    EXPECT_EQ(error, "MEGANEURA_DUMP names a pass: build, optimize, lower, order, plan; got 'parse'");
}

}  // namespace
}  // namespace mn::test
