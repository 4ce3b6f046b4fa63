// The Apple path (issue 19): every kernel of every model, as an Apple GPU gets it (the apple-m2
// profile: no cooperative matrices, 32 KiB shared, subgroups of 32), converts to Metal Shading Language
// through SPIRV-Cross, as MoltenVK converts it on a Mac. A construct Metal cannot express fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <set>

#include "codegen/msl.hpp"
#include "common/caps_profiles.hpp"
#include "every_kernel.hpp"

namespace mn::test {
namespace {

// Each kernel argument is the Vulkan binding of the same number (MoltenVK's layout of one descriptor set),
// under the binding's name or its 4-wide view's, and no two arguments share a buffer index.
void expect_buffers_follow_bindings(const std::string& msl, const codegen::KernelInterface& iface) {
    const std::regex argument(R"(device B_(\w+)& (\w+) \[\[buffer\((\d+)\)\]\])");
    std::set<size_t> seen;
    for (std::sregex_iterator m(msl.begin(), msl.end(), argument), end; m != end; ++m) {
        const size_t index = std::stoul((*m)[3]);
        ASSERT_LT(index, iface.bindings.size()) << msl;
        EXPECT_TRUE(seen.insert(index).second) << "buffer(" << index << ") twice in\n" << msl;
        const std::string& name = iface.bindings[index].name;
        EXPECT_TRUE((*m)[2] == name || (*m)[2] == name + "4") << (*m)[2] << " at buffer(" << index << "), binding " << name;
    }
    EXPECT_FALSE(seen.empty()) << msl;
}

TEST(Msl, EveryKernelOfEveryModelConvertsForApple) {
    const rt::DeviceCaps& apple = rt::find_caps_profile("apple-m2")->caps;
    const std::vector<ProgramKernels> programs = every_program(apple);
    const std::map<std::string, codegen::Spirv> spirv = compile_every_kernel(programs, apple);
    EXPECT_GT(spirv.size(), 50u);  // every family, several variants each
    std::set<std::string> converted;
    for (const ProgramKernels& program : programs) {
        for (const codegen::KernelSource& k : program.kernels) {
            if (!converted.insert(k.glsl).second) continue;
            SCOPED_TRACE(program.name + ", kernel " + k.label);
            try {
                const std::string msl = codegen::spirv_to_msl(*spirv.at(k.glsl));
                EXPECT_NE(msl.find("kernel void main0("), std::string::npos) << msl;
                expect_buffers_follow_bindings(msl, k.iface);
            } catch (const Error& e) {
                ADD_FAILURE() << e.what() << "\n" << k.glsl;
            }
        }
    }
}

// A kernel Metal cannot run is an error naming SPIRV-Cross, not a crash or a silently wrong shader:
// the H200's cooperative-matrix kernels (NV SPIR-V) have no Metal form.
TEST(Msl, CooperativeMatrixKernelsAreRefused) {
    const rt::DeviceCaps& nv = rt::find_caps_profile("nvidia-h200")->caps;
    Graph g;
    g.output("y", g.matmul(g.input("x", {256, 256}), g.parameter("w", {256, 256})));
    const std::vector<codegen::KernelSource> kernels = compiler::program_kernels(g, nv, {.precision = Precision::Fast});
    const auto product = std::find_if(kernels.begin(), kernels.end(),  // not w's cast to f16 (Tuning::f16_weights)
                                      [](const codegen::KernelSource& k) { return k.label.rfind("matmul", 0) == 0; });
    ASSERT_NE(product, kernels.end());
    const codegen::KernelSource& k = *product;
    ASSERT_GT(k.required_subgroup_size, 0u) << k.choice;
    try {
        codegen::spirv_to_msl(*codegen::compile_glsl(k.glsl, compiler::shader_options(nv)));
        FAIL() << "expected mn::Error";
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).rfind("SPIRV-Cross", 0), 0u) << e.what();
    }
}

}  // namespace
}  // namespace mn::test
