// The order of a cooperative kernel's shared variables in its SPIR-V. On NVIDIA's driver (580, H100, session 42) a
// shared variable that only scalar code touches, declared in the module after a cooperative store's target, moved the
// target's scalar reads by one float: the matmul kernels that summed their own split-K pieces read each element of an
// edge tile's staging area Cs (stored by coopMatStore, read back element by element) as its right neighbour's, with
// last_piece's flag declared after Cs. Declared before the cooperative code, the same kernels summed bit for bit what
// the sum's dispatch does (bench/results/2026-12-06-session42-h100.md). So every scalar-only shared variable of a
// cooperative kernel is declared before the first one a cooperative store writes: this checks it, on every
// cooperative kernel of the models as the H200 gets them and on the products that sum their own pieces.
#include <glslang/SPIRV/spirv.hpp>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "codegen/device_fit.hpp"
#include "common/caps_profiles.hpp"
#include "every_kernel.hpp"
#include "temp_dir.hpp"

namespace mn::test {
namespace {

using Words = std::vector<uint32_t>;

struct SharedVariable {
    uint32_t id;
    bool cooperative_store = false;  // a cooperative store writes it
    bool cooperative = false;        // a cooperative load or store reaches it
};

// The module's Workgroup variables in declaration order, and what reaches them.
std::vector<SharedVariable> shared_variables(const Words& m, std::map<uint32_t, std::string>* names) {
    std::vector<SharedVariable> vars;
    std::map<uint32_t, size_t> index;    // variable id -> vars
    std::map<uint32_t, uint32_t> root;  // pointer id -> the variable it points into
    const auto reach = [&](uint32_t pointer, bool store) {
        const auto r = root.find(pointer);
        if (r == root.end()) return;
        SharedVariable& v = vars[index.at(r->second)];
        v.cooperative = true;
        v.cooperative_store = v.cooperative_store || store;
    };
    for (size_t at = 5; at < m.size(); at += m[at] >> 16) {
        const uint32_t op = m[at] & 0xFFFFu, length = m[at] >> 16;
        if (length == 0 || at + length > m.size()) throw Error("truncated module");
        const uint32_t* w = &m[at + 1];
        if (op == spv::OpName) names->emplace(w[0], reinterpret_cast<const char*>(w + 1));
        if (op == spv::OpVariable && w[2] == spv::StorageClassWorkgroup) {
            index[w[1]] = vars.size();
            root[w[1]] = w[1];
            vars.push_back({w[1]});
        }
        if ((op == spv::OpAccessChain || op == spv::OpInBoundsAccessChain || op == spv::OpPtrAccessChain) && root.count(w[2])) {
            root[w[1]] = root[w[2]];
        }
        if (op == spv::OpCooperativeMatrixLoadNV) reach(w[2], false);
        if (op == spv::OpCooperativeMatrixStoreNV) reach(w[0], true);
    }
    return vars;
}

// The scalar-only shared variables declared after a cooperative store's target, by name.
std::vector<std::string> scalar_after_store_target(const Words& m) {
    std::map<uint32_t, std::string> names;
    std::vector<std::string> out;
    bool after_target = false;
    for (const SharedVariable& v : shared_variables(m, &names)) {
        if (after_target && !v.cooperative) out.push_back(names.count(v.id) ? names[v.id] : "%" + std::to_string(v.id));
        after_target = after_target || v.cooperative_store;
    }
    return out;
}

bool cooperative(const Words& m) {
    for (size_t at = 5; at < m.size(); at += m[at] >> 16) {
        if ((m[at] & 0xFFFFu) == spv::OpCooperativeMatrixStoreNV) return true;
    }
    return false;
}

// A split-K product and a convolution, whose kernels sum their own pieces under MEGANEURA_SPLIT_SUM=product.
std::vector<codegen::KernelSource> split_products(const rt::DeviceCaps& caps) {
    Graph g;
    const Tensor x = g.parameter("x", {24, 1024}), w = g.parameter("w", {40, 1024});
    const Tensor image = g.parameter("image", {1, 256, 6, 6}), filter = g.parameter("filter", {24, 256, 3, 3});
    g.output("y", g.linear(x, w));
    g.output("z", g.conv2d(image, filter, std::nullopt, {.padding = 1}));
    return compiler::program_kernels(g, caps, {.precision = Precision::Fast});
}

TEST(CoopSharedOrder, ScalarOnlySharedVariablesPrecedeEveryCooperativeStoreTarget) {
    const rt::DeviceCaps& h200 = rt::find_caps_profile("nvidia-h200")->caps;
    const ScopedEnv nv("MEGANEURA_COOP", "nv");
    std::vector<ProgramKernels> programs;
    {
        const ScopedEnv dispatch("MEGANEURA_SPLIT_SUM", "dispatch");
        programs = every_program(h200);
    }
    {
        const ScopedEnv summed("MEGANEURA_SPLIT_SUM", "product");  // the kernels that met the shift
        programs.push_back({"products summing their pieces", split_products(h200)});
    }
    const std::map<std::string, codegen::Spirv> spirv = compile_every_kernel(programs, h200);
    std::set<std::string> summing, seen;
    for (const ProgramKernels& program : programs) {
        for (const codegen::KernelSource& k : program.kernels) {
            const Words& words = *spirv.at(k.glsl);
            if (!cooperative(words) || !seen.insert(k.glsl).second) continue;
            if (k.glsl.find("last_piece(") != std::string::npos) summing.insert(k.label);
            for (const std::string& name : scalar_after_store_target(words)) {
                ADD_FAILURE() << program.name << ", kernel " << k.label << ": shared " << name
                              << " (scalar code alone) is declared after a cooperative store's target";
            }
        }
    }
    EXPECT_GE(seen.size(), 20u);
    EXPECT_EQ(summing, (std::set<std::string>{"matmul_coop", "conv2d_coop"}));
}

// A tile that fills the shared memory exactly (128 x 128 in two 32-deep stages: 49,152 bytes) has no room for
// last_piece's flag: its pieces are summed by a dispatch, where they are summed in the products otherwise.
TEST(CoopSharedOrder, ATileThatFillsTheSharedMemorySumsItsPiecesInADispatch) {
    const rt::DeviceCaps& h200 = rt::find_caps_profile("nvidia-h200")->caps;
    const ScopedEnv summed("MEGANEURA_SPLIT_SUM", "product"), splits("MEGANEURA_MATMUL_SPLITS", "2");
    for (const char* tile : {"128,128,64,32,32,2", "64,64,32,32,32,2"}) {
        SCOPED_TRACE(tile);
        const ScopedEnv forced("MEGANEURA_COOP_TILE", tile);
        const std::vector<codegen::KernelSource> kernels = split_products(h200);
        const std::map<std::string, codegen::Spirv> spirv = compile_every_kernel({{"split products", kernels}}, h200);
        int summing = 0, sums = 0, said = 0;
        for (const codegen::KernelSource& k : kernels) {
            for (const std::string& misfit : codegen::device_misfits(k, codegen::spirv_needs(*spirv.at(k.glsl), k.spec_values), h200))
                ADD_FAILURE() << k.label << ": " << misfit;
            summing += k.glsl.find("last_piece(") != std::string::npos;
            sums += k.label.find("split_sum") != std::string::npos;
            said += k.choice.find("summed by a dispatch: the tile leaves no shared memory for last_piece's flag") != std::string::npos;
        }
        const bool full = std::string(tile).starts_with("128");
        EXPECT_EQ(summing, full ? 0 : 2);
        EXPECT_EQ(sums, full ? 2 : 0);
        EXPECT_EQ(said, full ? 2 : 0);  // MEGANEURA_DEBUG says why the pieces are not summed where asked
    }
}

// What the rule looks at: a module whose scalar flag follows the cooperative store's target fails it.
TEST(CoopSharedOrder, AFlagDeclaredAfterTheStagingAreaIsFound) {
    const rt::DeviceCaps& h200 = rt::find_caps_profile("nvidia-h200")->caps;
    const std::string glsl = R"(#version 450
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer B_c { float d[]; } c;
shared float Cs[256];
shared bool flag;
void main() {
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(1.0);
    coopMatStoreNV(acc, Cs, 0, 16, false);
    barrier();
    if (gl_LocalInvocationID.x == 0u) flag = Cs[0] > 0.0;
    barrier();
    if (flag) c.d[gl_LocalInvocationID.x] = Cs[gl_LocalInvocationID.x];
}
)";
    codegen::ShaderOptions nv = compiler::shader_options(h200);
    nv.coop_khr = false;
    const codegen::Spirv words = codegen::compile_glsl(glsl, nv);
    EXPECT_EQ(scalar_after_store_target(*words), std::vector<std::string>{"flag"});
}

}  // namespace
}  // namespace mn::test
