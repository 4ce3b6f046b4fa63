// Hugging Face model folders as `-m DIR` (models/model_folder.hpp): config.json, the weights in one
// file or in shards, tokenizer.json and generation_config.json, each checked when the folder opens.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "error_of.hpp"
#include "gpu_check.hpp"
#include "io/safetensors.hpp"
#include "models/model_folder.hpp"
#include "tiny_folder.hpp"

namespace mn::test {
namespace {

namespace fs = std::filesystem;

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

class ModelFolderTest : public GpuTest {};

// A sharded Qwen2 folder runs as the same model given by flags, with the shards merged into one file.
TEST_F(ModelFolderTest, ShardedFolderRunsLikeTheFlagsWithOneFile) {
    MN_REQUIRE_TORCH();
    TempDir dir("folder");
    const std::string folder = dir.path("qwen2");
    make_tiny_folder(folder, "--shards 2 --qwen2");
    const models::ModelFolder m = models::open_model_folder(folder);
    ASSERT_EQ(m.weights.size(), 2u);
    EXPECT_EQ(m.tokenizer, folder + "/tokenizer.json");
    EXPECT_EQ(m.generation.eos_token_ids, (std::vector<int64_t>{317}));
    io::TensorMap merged;
    for (const std::string& shard : m.weights) merged.merge(io::read_safetensors(shard));
    EXPECT_TRUE(merged.count("model.layers.1.self_attn.v_proj.bias"));
    io::write_safetensors(dir.path("merged.safetensors"), merged);
    io::write_safetensors(dir.path("inputs.safetensors"), {{"input_ids", io::TensorData::from_i32({1, 5}, {3, 290, 7, 100, 316})},
                                                           {"labels", io::TensorData::from_i32({1, 5}, {3, 290, 7, 100, 316})}});
    int status = 0;
    const std::string inputs = " --inputs " + dir.path("inputs.safetensors") + " --backward --out ";
    const std::string a = meganeura("forward -m " + folder + inputs + dir.path("a.safetensors"), &status);
    ASSERT_EQ(status, 0) << a;
    const std::string b = meganeura("forward --model smollm2 --config " + folder + "/config.json --weights " +
                                        dir.path("merged.safetensors") + inputs + dir.path("b.safetensors"), &status);
    ASSERT_EQ(status, 0) << b;
    const io::TensorMap got = io::read_safetensors(dir.path("a.safetensors")), want = io::read_safetensors(dir.path("b.safetensors"));
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [name, t] : want) EXPECT_EQ(got.at(name).bytes, t.bytes) << name;
}

// Each way a folder can be wrong, named before anything is compiled.
TEST(ModelFolder, WhatIsWrongIsNamed) {
    TempDir dir("folder");
    const fs::path f = dir.dir() / "m";
    fs::create_directories(f);
    auto error = [&] { return error_of([&] { models::open_model_folder(f.string()); }); };
    EXPECT_EQ(error(), "model folder " + f.string() + ": no config.json");
    write_text(f / "config.json", R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4})");
    EXPECT_EQ(error(), "model folder " + f.string() + ": no model.safetensors or model.safetensors.index.json");
    write_text(f / "model.safetensors.index.json", R"({"weight_map": {"a": "model-1.safetensors"}})");
    EXPECT_EQ(error(), (f / "model.safetensors.index.json").string() + ": shard " + (f / "model-1.safetensors").string() + " is missing");
    write_text(f / "model.safetensors.index.json", R"({"weight_map": {"a": "../../etc/passwd"}})");
    EXPECT_NE(error().find("weight_map['a'] is '../../etc/passwd', not a file of the folder"), std::string::npos) << error();
    write_text(f / "model.safetensors.index.json", R"({"weight_map": {"a": "model-1.safetensors", "b": "model-1.safetensors"}})");
    write_text(f / "model-1.safetensors", "");
    EXPECT_EQ(models::open_model_folder(f.string()).weights, std::vector<std::string>{(f / "model-1.safetensors").string()});
    write_text(f / "generation_config.json", R"({"eos_token_id": [2, 7], "do_sample": true, "temperature": 0.7, "top_k": 0})");
    const models::ModelFolder m = models::open_model_folder(f.string());
    EXPECT_EQ(m.generation.eos_token_ids, (std::vector<int64_t>{2, 7}));
    EXPECT_TRUE(m.generation.do_sample);
    EXPECT_EQ(m.generation.temperature, 0.7);
    EXPECT_EQ(m.generation.top_k, 0);
    write_text(f / "generation_config.json", R"({"eos_token_id": "</s>"})");
    EXPECT_EQ(error(), "generation config " + (f / "generation_config.json").string() +
                           ": eos_token_id is \"</s>\", expected a token id or a list of them");
    write_text(f / "config.json", R"({"model_type": "llama", "rope_scaling": {"type": "dynamic", "factor": 2}})");
    EXPECT_NE(error().find("rope_scaling.type is \"dynamic\""), std::string::npos) << error();
    EXPECT_EQ(error_of([&] { models::open_model_folder((f / "config.json").string()); }),
              "model folder " + (f / "config.json").string() + ": not a directory");
}

// A folder brings its own config and weights; naming others beside it is refused, and a path that is
// no folder is not mistaken for a model name.
TEST(ModelFolder, FolderFlagsConflictsAreRefused) {
    TempDir dir("folder");
    fs::create_directories(dir.dir() / "m");
    int status = 0;
    std::string out = meganeura("forward -m " + dir.path("m") + " --weights w.safetensors --inputs i --out o", &status);
    EXPECT_EQ(status, 1);
    EXPECT_NE(out.find("--weights cannot be combined with the model folder"), std::string::npos) << out;
    out = meganeura("forward -m " + dir.path("nothing/here") + " --inputs i --out o", &status);
    EXPECT_EQ(status, 1);
    EXPECT_NE(out.find("no such model folder"), std::string::npos) << out;
}

}  // namespace
}  // namespace mn::test
