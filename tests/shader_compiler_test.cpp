// The shader compiler: GLSL -> SPIR-V, error reporting, and both cache levels. Every test points
// MEGANEURA_CACHE_DIR at its own fresh folder, and compares stats as deltas (they are global).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "temp_dir.hpp"
#include "codegen/shader_compiler.hpp"
#include "meganeura/error.hpp"

namespace fs = std::filesystem;
using namespace mn::codegen;

namespace {

constexpr uint32_t kMagic = 0x07230203;

// A compute shader that writes VALUE; `tag` makes the source unique to one test.
std::string shader(const std::string& tag, uint32_t value = 7) {
    return "#version 450\n"
           "// " +
           tag +
           "\n"
           "#define VALUE " +
           std::to_string(value) +
           "u\n"
           "layout(local_size_x = 64) in;\n"
           "layout(set = 0, binding = 0) buffer Out { uint data[]; } out_buf;\n"
           "void main() { out_buf.data[gl_GlobalInvocationID.x] = VALUE; }\n";
}

bool contains_word(const Spirv& spirv, uint32_t word) {
    return std::find(spirv->begin() + 5, spirv->end(), word) != spirv->end();
}

class ShaderCompiler : public ::testing::Test {
protected:
    fs::path only_cache_file() const {
        std::vector<fs::path> files;
        for (auto& entry : fs::directory_iterator(dir_ / "spirv")) files.push_back(entry.path());
        EXPECT_EQ(files.size(), 1u);
        return files.empty() ? fs::path() : files[0];
    }
    mn::test::TempDir tmp_{"shader-cache"};
    const fs::path& dir_ = tmp_.dir();
    mn::test::ScopedEnv cache_env_{"MEGANEURA_CACHE_DIR", tmp_.dir().string()};
};

}  // namespace

TEST_F(ShaderCompiler, CompilesToSpirv) {
    Spirv spirv = compile_glsl(shader("compiles"));
    ASSERT_GE(spirv->size(), 5u);
    EXPECT_EQ((*spirv)[0], kMagic);
    EXPECT_EQ((*spirv)[1], 0x00010500u);  // Vulkan 1.2 -> SPIR-V 1.5
    EXPECT_EQ((*compile_glsl(shader("vk13"), {.vulkan_minor = 3}))[1], 0x00010600u);
    EXPECT_EQ((*compile_glsl(shader("optimized"), {.optimize = true}))[0], kMagic);
    EXPECT_EQ(cache_dir(), dir_.string());
}

TEST_F(ShaderCompiler, SecondCompileIsMemoryHit) {
    Spirv first = compile_glsl(shader("memory"));
    const ShaderCacheStats before = shader_cache_stats();
    Spirv second = compile_glsl(shader("memory"));
    const ShaderCacheStats after = shader_cache_stats();
    EXPECT_EQ(after.memory_hits, before.memory_hits + 1);
    EXPECT_EQ(after.compiled, before.compiled);
    EXPECT_EQ(first, second);
}

TEST_F(ShaderCompiler, DiskHitAfterClearingMemory) {
    Spirv first = compile_glsl(shader("disk"));
    EXPECT_EQ(only_cache_file().extension(), ".spv");
    clear_shader_memory_cache();
    const ShaderCacheStats before = shader_cache_stats();
    Spirv second = compile_glsl(shader("disk"));
    const ShaderCacheStats after = shader_cache_stats();
    EXPECT_EQ(after.disk_hits, before.disk_hits + 1);
    EXPECT_EQ(after.compiled, before.compiled);
    EXPECT_EQ(*first, *second);
}

TEST_F(ShaderCompiler, OptionsArePartOfTheKey) {
    compile_glsl(shader("options"));
    const ShaderCacheStats before = shader_cache_stats();
    compile_glsl(shader("options"), {.vulkan_minor = 3});
    EXPECT_EQ(shader_cache_stats().compiled, before.compiled + 1);
}

TEST_F(ShaderCompiler, CorruptDiskFileIsRecompiled) {
    Spirv good = compile_glsl(shader("corrupt"));
    const fs::path file = only_cache_file();
    for (const std::string& junk : {std::string("1234567"), std::string(64, 'x')}) {  // short; bad magic
        std::ofstream(file, std::ios::binary | std::ios::trunc) << junk;
        clear_shader_memory_cache();
        const ShaderCacheStats before = shader_cache_stats();
        Spirv again = compile_glsl(shader("corrupt"));
        const ShaderCacheStats after = shader_cache_stats();
        EXPECT_EQ(after.compiled, before.compiled + 1);
        EXPECT_EQ(after.disk_hits, before.disk_hits);
        EXPECT_EQ(*again, *good);
        EXPECT_EQ(fs::file_size(file), good->size() * 4);  // rewritten
    }
}

TEST_F(ShaderCompiler, EmptyCacheDirDisablesDisk) {
    setenv("MEGANEURA_CACHE_DIR", "", 1);
    compile_glsl(shader("nodisk"));
    clear_shader_memory_cache();
    const ShaderCacheStats before = shader_cache_stats();
    compile_glsl(shader("nodisk"));
    EXPECT_EQ(shader_cache_stats().compiled, before.compiled + 1);
    EXPECT_FALSE(fs::exists(dir_ / "spirv"));
}

TEST_F(ShaderCompiler, SyntaxErrorShowsLogAndNumberedSource) {
    const std::string source =
        "#version 450\n"
        "layout(local_size_x = 1) in;\n"
        "layout(set = 0, binding = 0) buffer Out { float data[]; } out_buf;\n"
        "void main() {\n"
        "    out_buf.data[0] = undefined_name + 1.0;\n"
        "}\n";
    try {
        compile_glsl(source);
        FAIL() << "expected mn::Error";
    } catch (const mn::Error& error) {
        const std::string message = error.what();
        EXPECT_NE(message.find("undefined_name"), std::string::npos) << message;
        EXPECT_NE(message.find("ERROR: 0:5:"), std::string::npos) << message;
        EXPECT_NE(message.find("   5|     out_buf.data[0] = undefined_name + 1.0;"), std::string::npos)
            << message;
        EXPECT_NE(message.find("   1| #version 450"), std::string::npos) << message;
    }
}

TEST_F(ShaderCompiler, UnknownVulkanVersionIsAnError) {
    EXPECT_THROW(compile_glsl(shader("vk19"), {.vulkan_minor = 9}), mn::Error);
}

TEST_F(ShaderCompiler, ParallelCompileKeepsOrder) {
    std::vector<std::string> sources;
    for (uint32_t i = 0; i < 8; ++i) sources.push_back(shader("parallel", 0x5eed00 + i));
    const std::vector<Spirv> results = compile_glsl_parallel(sources);
    ASSERT_EQ(results.size(), 8u);
    for (uint32_t i = 0; i < 8; ++i) {
        EXPECT_TRUE(contains_word(results[i], 0x5eed00 + i)) << i;
        EXPECT_FALSE(contains_word(results[i], 0x5eed00 + (i + 1) % 8)) << i;
        EXPECT_EQ(results[i], compile_glsl(sources[i]));  // the same cached object
    }
}

TEST_F(ShaderCompiler, ParallelCompileRethrowsAfterJoining) {
    std::vector<std::string> sources;
    for (uint32_t i = 0; i < 6; ++i) sources.push_back(shader("parallel-error", i));
    sources[3] = "#version 450\nvoid main() { this is not glsl }\n";
    EXPECT_THROW(compile_glsl_parallel(sources), mn::Error);
    EXPECT_TRUE(compile_glsl_parallel({}).empty());
}

TEST_F(ShaderCompiler, CompilesNvCooperativeMatrix) {
    const std::string source = R"(#version 450
#extension GL_NV_cooperative_matrix : enable
#extension GL_KHR_memory_scope_semantics : enable
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable
layout(local_size_x = 32) in;
layout(set = 0, binding = 0) buffer A { float16_t a[]; };
layout(set = 0, binding = 1) buffer B { float16_t b[]; };
layout(set = 0, binding = 2) buffer C { float16_t c[]; };
void main() {
    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> ma, mb, acc;
    coopMatLoadNV(ma, a, 0, 16, false);
    coopMatLoadNV(mb, b, 0, 16, false);
    acc = fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>(0.0);
    acc = coopMatMulAddNV(ma, mb, acc);
    coopMatStoreNV(acc, c, 0, 16, false);
}
)";
    for (uint32_t minor : {2u, 3u}) EXPECT_EQ((*compile_glsl(source, {.vulkan_minor = minor}))[0], kMagic);
}
