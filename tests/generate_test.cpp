// `meganeura generate` and `meganeura tokenize` on a tiny random model folder, and the sampler.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <regex>

#include <nlohmann/json.hpp>

#include "gpu_check.hpp"
#include "io/safetensors.hpp"
#include "io/tokenizer.hpp"
#include "models/generation.hpp"
#include "models/model_folder.hpp"
#include "tiny_folder.hpp"

namespace mn::test {
namespace {

// The text before the closing timing line, which comes last (stderr, after stdout's final newline).
std::string generated_text(const std::string& out) {
    const size_t at = out.rfind("prompt eval: ");
    EXPECT_NE(at, std::string::npos) << out;
    return at == std::string::npos || at == 0 ? out : out.substr(0, at - 1);
}

class GenerateTest : public GpuTest {
protected:
    void SetUp() override {
        MN_REQUIRE_TORCH();
        make_tiny_folder(folder_);
    }
    // The greedy continuation's text, through the library: the prompt and max_new tokens.
    std::string greedy(const std::string& prompt, int64_t max_new) {
        return io::Tokenizer::from_file(folder_ + "/tokenizer.json").decode(greedy_ids(prompt, max_new), true);
    }
    std::vector<int32_t> greedy_ids(const std::string& prompt, int64_t max_new) {
        const models::ModelFolder m = models::open_model_folder(folder_);
        const io::Tokenizer t = io::Tokenizer::from_file(m.tokenizer);
        const models::LlamaConfig c = models::LlamaConfig::from_json(m.config);
        std::vector<int32_t> ids = t.encode(prompt);
        const auto n = static_cast<int64_t>(ids.size());
        models::Generator g(device(), c, n, n + max_new, m.weights);
        models::Sampler greedy({});
        std::vector<float> logits = g.prefill(ids);
        for (int64_t i = 0; i < max_new; ++i) {
            ids.push_back(greedy.next(logits.data(), c.vocab));
            if (i + 1 >= max_new) break;
            const std::span<const float> step = g.decode(ids.back(), n + i);
            logits.assign(step.begin(), step.end());
        }
        return ids;
    }
    // Makes the model's first greedy token after `prompt` be `id`: its row of the tied embedding
    // becomes twice the first greedy token's, so that its logit is twice the largest.
    void make_first_token(const std::string& prompt, int32_t id) {
        const int32_t first = greedy_ids(prompt, 1).back();
        io::TensorMap weights = io::read_safetensors(folder_ + "/model.safetensors");
        io::TensorData& embed = weights.at("model.embed_tokens.weight");
        std::vector<float> rows = embed.to_f32();
        const int64_t hidden = embed.shape[1];
        for (int64_t i = 0; i < hidden; ++i) rows[static_cast<size_t>(id * hidden + i)] = 2 * rows[static_cast<size_t>(first * hidden + i)];
        embed = io::TensorData::from_f32(embed.shape, rows);
        io::write_safetensors(folder_ + "/model.safetensors", weights);
        ASSERT_EQ(greedy_ids(prompt, 1).back(), id);
    }
    TempDir dir_{"generate"};
    std::string folder_ = dir_.path("tiny");
};

TEST_F(GenerateTest, StreamsTheGreedyContinuationAndTheSpeed) {
    int status = 0;
    const std::string out = meganeura("generate -m " + folder_ + " --prompt 'The quick brown fox' --max-new 12 --ignore-eos", &status);
    ASSERT_EQ(status, 0) << out;
    EXPECT_EQ(generated_text(out), greedy("The quick brown fox", 12));
    EXPECT_TRUE(std::regex_search(out, std::regex("prompt eval: [0-9]+ tokens in [0-9.]+ ms \\([0-9.]+ tokens/s\\); "
                                                  "generation: 12 tokens, 11 decoding runs in [0-9.]+ ms \\([0-9.]+ tokens/s\\)\n$")))
        << out;
    // The warm-up runs (on by default) leave nothing behind in the cache.
    const std::string cold = meganeura("generate -m " + folder_ + " --prompt 'The quick brown fox' --max-new 12 --ignore-eos --no-warmup", &status);
    ASSERT_EQ(status, 0) << cold;
    EXPECT_EQ(generated_text(cold), generated_text(out));
}

// generation_config.json's eos ends the generation: here the first greedy token is made the eos.
TEST_F(GenerateTest, StopsAtTheEndOfSequenceToken) {
    const models::ModelFolder m = models::open_model_folder(folder_);
    const io::Tokenizer t = io::Tokenizer::from_file(m.tokenizer);
    const std::string prompt = t.decode(t.encode("The dog"));
    const int32_t first = greedy_ids("The dog", 1).back();
    std::ofstream(folder_ + "/generation_config.json") << "{\"eos_token_id\": [5, " << first << "]}";
    int status = 0;
    const std::string out = meganeura("generate -m " + folder_ + " --prompt 'The dog' --max-new 12", &status);
    ASSERT_EQ(status, 0) << out;
    EXPECT_EQ(generated_text(out), prompt);
    EXPECT_NE(out.find("generation: 0 tokens"), std::string::npos) << out;
}

TEST_F(GenerateTest, SamplingIsSeededAndTopKOfOneIsGreedy) {
    int status = 0;
    auto run = [&](const std::string& flags) {
        const std::string out = meganeura("generate -m " + folder_ + " --prompt 'The fox' --max-new 16 --ignore-eos " + flags, &status);
        EXPECT_EQ(status, 0) << out;
        return generated_text(out);
    };
    const std::string a = run("--temperature 3 --seed 1");
    EXPECT_EQ(run("--temperature 3 --seed 1"), a);
    EXPECT_NE(run("--temperature 3 --seed 2"), a);
    EXPECT_EQ(run("--top-k 1 --seed 4"), greedy("The fox", 16));
    EXPECT_EQ(run("--top-p 0.000001 --temperature 2"), greedy("The fox", 16));
}

// A model with more rows than its tokenizer has tokens (Qwen2's vocab_size is padded so): an id
// the tokenizer lacks is left out of the text, as Hugging Face's decode leaves it out. Generation
// stopped at it with "id 319 is not in the vocabulary of 319", status 1. Here the tokenizer loses
// <|im_end|> (id 319) and the model is made to generate it.
TEST_F(GenerateTest, AnIdTheTokenizerLacksDecodesToNothing) {
    const std::string prompt = "The quick brown fox";
    const int32_t missing = 319;
    make_first_token(prompt, missing);
    nlohmann::json json = nlohmann::json::parse(std::ifstream(folder_ + "/tokenizer.json"));
    ASSERT_EQ(json["model"]["vocab"]["<|im_end|>"], missing);
    json["model"]["vocab"].erase("<|im_end|>");
    nlohmann::json& added = json["added_tokens"];
    added.erase(std::remove_if(added.begin(), added.end(), [](const nlohmann::json& a) { return a["content"] == "<|im_end|>"; }),
                added.end());
    std::ofstream(folder_ + "/tokenizer.json") << json.dump();

    const std::vector<int32_t> ids = greedy_ids(prompt, 8);
    ASSERT_NE(std::find(ids.begin(), ids.end(), missing), ids.end());
    std::vector<int32_t> known;
    std::copy_if(ids.begin(), ids.end(), std::back_inserter(known), [&](int32_t id) { return id != missing; });
    const io::Tokenizer t = io::Tokenizer::from_file(folder_ + "/tokenizer.json");
    EXPECT_EQ(t.vocab_size(), missing);
    int status = 0;
    const std::string out = meganeura("generate -m " + folder_ + " --prompt '" + prompt + "' --max-new 8 --ignore-eos", &status);
    EXPECT_EQ(status, 0) << out;
    EXPECT_EQ(generated_text(out), t.decode(known, true));
    std::string list;
    for (int32_t id : ids) list += (list.empty() ? "" : ",") + std::to_string(id);
    EXPECT_EQ(meganeura("tokenize -m " + folder_ + " --decode " + list, &status), t.decode(known) + "\n");
    EXPECT_EQ(status, 0);
}

// Byte-level ids decode to any bytes, and a model produces ill-formed UTF-8 (here the byte 0xFF,
// made the first token): the text is Hugging Face's decode of the ids, each ill-formed sequence one
// U+FFFD, in generate's stream and in tokenize --decode. Both wrote the bytes as they were.
TEST_F(GenerateTest, IllFormedUtf8IsTextAsHuggingFaceDecodesIt) {
    const std::string prompt = "The quick brown fox";
    make_first_token(prompt, 0xFF);
    int status = 0;
    const std::string out = meganeura("generate -m " + folder_ + " --prompt '" + prompt + "' --max-new 8 --ignore-eos", &status);
    EXPECT_EQ(status, 0) << out;
    const std::string text = generated_text(out);
    EXPECT_EQ(text.find('\xFF'), std::string::npos) << text;
    EXPECT_EQ(text.substr(0, prompt.size() + 3), prompt + "\xEF\xBF\xBD") << text;
    EXPECT_EQ(io::valid_utf8(text), text);
    const io::Tokenizer t = io::Tokenizer::from_file(folder_ + "/tokenizer.json");
    EXPECT_EQ(text, t.decode(greedy_ids(prompt, 8), true));
    // Hugging Face's decode of these ids (the tokenizers npm package): E2 82 stops short of a character.
    EXPECT_EQ(meganeura("tokenize -m " + folder_ + " --decode 226,130,97,255", &status), "\xEF\xBF\xBD" "a" "\xEF\xBF\xBD\n");
    EXPECT_EQ(status, 0);
}

TEST_F(GenerateTest, TokenizeEncodesAndDecodesAsTheLibrary) {
    const io::Tokenizer t = io::Tokenizer::from_file(folder_ + "/tokenizer.json");
    const std::string text = "The lazy dog<|im_end|> 42";
    std::string want;
    for (int32_t id : t.encode(text)) want += (want.empty() ? "" : ",") + std::to_string(id);
    int status = 0;
    EXPECT_EQ(meganeura("tokenize -m " + folder_ + " --text '" + text + "'", &status), want + "\n");
    EXPECT_EQ(status, 0);
    EXPECT_EQ(meganeura("tokenize -m " + folder_ + " --decode " + want, &status), text + "\n");
    EXPECT_EQ(meganeura("tokenize --tokenizer " + folder_ + "/tokenizer.json --decode " + want + " --no-special", &status),
              "The lazy dog 42\n");
    const std::string both = meganeura("tokenize -m " + folder_ + " --text a --decode 1", &status);
    EXPECT_EQ(status, 1);
    EXPECT_NE(both.find("give one of --text, --file and --decode"), std::string::npos) << both;
    const std::string bad = meganeura("tokenize -m " + folder_ + " --decode 1,x", &status);
    EXPECT_EQ(status, 1);
    EXPECT_NE(bad.find("--decode must be comma-separated token ids, got 'x'"), std::string::npos) << bad;
}

// Frequencies of 40,000 draws against the probabilities each option leaves, to within 0.01.
TEST(Sampler, DrawsFromTheTemperedTopKTopPDistribution) {
    const float logits[] = {std::log(0.5f), std::log(0.3f), std::log(0.2f), -INFINITY};
    auto frequencies = [&](models::SamplingOptions o) {
        models::Sampler s(o);
        std::map<int32_t, double> f;
        for (int i = 0; i < 40000; ++i) f[s.next(logits, 4)] += 1.0 / 40000;
        return f;
    };
    auto expect_near = [](std::map<int32_t, double> got, std::map<int32_t, double> want) {
        for (const auto& [id, p] : want) EXPECT_NEAR(got[id], p, 0.01) << id;
        for (const auto& [id, p] : got) EXPECT_TRUE(want.count(id)) << "drew " << id;
    };
    expect_near(frequencies({.temperature = 1, .seed = 1}), {{0, 0.5}, {1, 0.3}, {2, 0.2}});
    expect_near(frequencies({.temperature = 1, .top_k = 2, .seed = 2}), {{0, 0.625}, {1, 0.375}});
    expect_near(frequencies({.temperature = 1, .top_p = 0.6, .seed = 3}), {{0, 0.625}, {1, 0.375}});
    expect_near(frequencies({.temperature = 1, .top_p = 0.5, .seed = 4}), {{0, 1.0}});
    // temperature 2: probabilities proportional to sqrt(0.5), sqrt(0.3), sqrt(0.2)
    const double z = std::sqrt(0.5) + std::sqrt(0.3) + std::sqrt(0.2);
    expect_near(frequencies({.temperature = 2, .seed = 5}), {{0, std::sqrt(0.5) / z}, {1, std::sqrt(0.3) / z}, {2, std::sqrt(0.2) / z}});
    models::Sampler greedy({});
    const float tie[] = {1, 3, 3, 2};
    EXPECT_EQ(greedy.next(tie, 4), 1);  // the first of equal logits
    // Greedy over a vocabulary of lanes and a tail: the first index of the largest, as std::max_element finds it.
    std::mt19937 rng(7);
    for (const int64_t vocab : {1, 15, 16, 17, 49152, 49157}) {
        std::vector<float> logits(static_cast<size_t>(vocab));
        for (float& l : logits) l = static_cast<float>(rng() % 1000) - 500.0f;  // ties among the largest too
        EXPECT_EQ(greedy.next(logits.data(), vocab), std::max_element(logits.begin(), logits.end()) - logits.begin()) << vocab;
        logits.back() = 1e6f;
        EXPECT_EQ(greedy.next(logits.data(), vocab), vocab - 1) << vocab;
    }
}

}  // namespace
}  // namespace mn::test
