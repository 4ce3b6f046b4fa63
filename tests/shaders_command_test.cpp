// `meganeura shaders` (issue 19): a model's kernels written as SPIR-V and Metal, for the device here or
// a device profile; bad input is one error line with exit status 1.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "host_tools.hpp"
#include "temp_dir.hpp"

namespace mn::test {
namespace {

namespace fs = std::filesystem;

std::string shaders(const std::string& args, int* status) {
    return run_command(cli_binary() + " shaders " + args, status);
}

size_t count(const fs::path& dir, const std::string& extension) {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir)) n += e.path().extension() == extension;
    return n;
}

TEST(ShadersCommand, WritesEveryKernelAsSpirvAndMetal) {
    TempDir tmp("shaders");
    int status = -1;
    const std::string out = shaders("--model mlp --size=tiny --caps apple-m2 --msl --out " + tmp.dir().string(), &status);
    ASSERT_EQ(status, 0) << out;
    for (const char* program : {"inference", "training"}) {
        SCOPED_TRACE(program);
        const fs::path dir = tmp.dir() / program;
        const size_t kernels = count(dir, ".spv");
        EXPECT_GT(kernels, 2u);
        EXPECT_EQ(count(dir, ".metal"), kernels);
        // dispatches.txt: a line per dispatch (as many as the summary says), the kernel's number, grid and
        // workgroup size, level (or hoisted), label, and its family's choice (the matmuls': tiled, as an M2 has no
        // cooperative matrices).
        std::ifstream list(dir / "dispatches.txt");
        size_t dispatches = 0, matmuls = 0, hoisted = 0;
        std::set<std::string> levels;
        for (std::string line; std::getline(list, line); ++dispatches) {
            EXPECT_LT(std::stoul(line.substr(0, 3)), kernels) << line;
            EXPECT_NE(line.find(" x "), std::string::npos) << line;
            std::istringstream fields(line);
            std::string number, grid, x, size, level;
            fields >> number >> grid >> x >> size >> level;
            if (level == "hoisted") {
                ++hoisted;
            } else {
                EXPECT_EQ(level[0], 'L') << line;
                levels.insert(level);
            }
            if (line.find("  matmul:") != std::string::npos || line.find("  matmul+") != std::string::npos) {
                ++matmuls;
                EXPECT_NE(line.find(": tiled f32 (cooperative declined: "), std::string::npos) << line;
            }
        }
        EXPECT_GT(matmuls, 0u);
        const std::string head = "mlp " + std::string(program) + " for Apple M2 (profile): " + std::to_string(kernels) + " kernels (";
        const size_t at = out.find(head);
        ASSERT_NE(at, std::string::npos) << out;
        const size_t pipelines = std::stoul(out.substr(at + head.size()));  // at least a pipeline a kernel
        EXPECT_GE(pipelines, kernels) << out;
        EXPECT_NE(out.find(" pipelines), " + std::to_string(dispatches - hoisted) + " dispatches a run in " +
                           std::to_string(levels.size()) + " levels (" + std::to_string(hoisted) + " hoisted)"),
                  std::string::npos)
            << out;
        for (const auto& e : fs::directory_iterator(dir)) {
            if (e.path().filename() == "dispatches.txt") continue;
            // Labels with spaces ("sgd x 2 tensors", the batched updates of training) are written with underscores.
            EXPECT_EQ(e.path().filename().string().find(' '), std::string::npos) << e.path();
            std::ifstream in(e.path(), std::ios::binary);
            if (e.path().extension() == ".spv") {
                uint32_t magic = 0;
                in.read(reinterpret_cast<char*>(&magic), 4);
                EXPECT_EQ(magic, 0x07230203u) << e.path();
            } else {
                const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
                EXPECT_NE(text.find("#include <metal_stdlib>"), std::string::npos) << e.path();
            }
        }
    }
    // The default is the device here; without --msl only SPIR-V is written.
    TempDir here("shaders-device");
    ASSERT_EQ(exit_status(cli_binary() + " shaders --model mlp --size tiny --out " + here.dir().string() +
                          " > /dev/null 2>&1"), 0);
    EXPECT_GT(count(here.dir() / "training", ".spv"), 2u);
    EXPECT_EQ(count(here.dir() / "training", ".metal"), 0u);
}

// --decode writes generate's one-token step too (a causal LM's): its attention over the cache split into chunks of keys
// (flash-decoding, key lanes) where one workgroup a kv head would leave the device idle, and merged by a combine dispatch; with
// MEGANEURA_SPLIT_SUM=attention by the chunk kernel itself.
TEST(ShadersCommand, DecodeWritesGeneratesStepOverTheCache) {
    for (const bool merged : {false, true}) {
        SCOPED_TRACE(merged ? "merged in the chunk kernel" : "combined");
        TempDir tmp("shaders-decode");
        int status = -1;
        const std::string out = run_command(std::string(merged ? "MEGANEURA_SPLIT_SUM=attention " : "MEGANEURA_SPLIT_SUM=dispatch ") + cli_binary() +
                                                " shaders --model smollm2 --size tiny --caps nvidia-h200 --decode 2048 --out " +
                                                tmp.dir().string(), &status);
        ASSERT_EQ(status, 0) << out;
        EXPECT_NE(out.find("smollm2 decode for NVIDIA H200 (profile): "), std::string::npos) << out;
        std::ifstream list(tmp.dir() / "decode" / "dispatches.txt");
        const std::string text((std::istreambuf_iterator<char>(list)), std::istreambuf_iterator<char>());
        EXPECT_NE(text.find("attention_chunks: key lanes"), std::string::npos) << text;
        EXPECT_NE(text.find("(flash-decoding)"), std::string::npos) << text;
        EXPECT_EQ(text.find("attention_combine") != std::string::npos, !merged) << text;
    }
}

TEST(ShadersCommand, BadInputIsAUserError) {
    TempDir tmp("shaders-errors");
    const std::string dir = tmp.dir().string();
    const std::pair<std::string, std::string> cases[] = {
        {"--model mlp --size tiny --caps nope --out " + dir, "no device profile 'nope'; profiles: device, nvidia-h200, amd-wave64"},
        {"--model mlp --size tiny", "option --out is required"},
        {"--model nope --out " + dir, "nope"},
        {"--model mlp --size huge --out " + dir, "option --size is 'huge'"},
        {"extra --model mlp --out " + dir, "shaders takes no arguments"},
        {"--model mlp --size tiny --decode 64 --out " + dir, "--decode is for a causal LM (smollm2), not mlp"},
        {"--model smollm2 --size tiny --decode -3 --out " + dir, "--decode"},
    };
    for (const auto& [args, part] : cases) {
        SCOPED_TRACE(args);
        int status = -1;
        const std::string out = shaders(args, &status);
        EXPECT_EQ(status, 1) << out;
        EXPECT_NE(out.find("meganeura shaders: error: "), std::string::npos) << out;
        EXPECT_NE(out.find(part), std::string::npos) << out;
    }
}

}  // namespace
}  // namespace mn::test
