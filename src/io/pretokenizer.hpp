#pragma once
// tokenizer.json's pre-tokenizers (and the byte-level alphabet they map into): each one turns the
// pieces of a text into smaller pieces, in Hugging Face's semantics. Regexes are PCRE2's, in UTF
// mode with Unicode properties (\p{L}, \s over all of Unicode), which reads the patterns GPT-2,
// SmolLM2, Llama 3 and Qwen2 ship as Hugging Face's Oniguruma does.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace mn::io {

// GPT-2's byte-to-unicode table: printable bytes stand for themselves, the others (space, control,
// 127-160, 173) for the characters from U+0100 up, in byte order, so every byte is a visible
// character and a token is a string.
const std::string& byte_char(uint8_t byte);  // UTF-8 of the character byte stands for
// The byte a character of the byte-level alphabet stands for, or -1.
int char_byte(std::string_view utf8_char);

class PreTokenizer {
public:
    virtual ~PreTokenizer() = default;
    // Replaces `pieces` by their pieces.
    virtual void split(std::vector<std::string>& pieces) const = 0;
};

// The pre_tokenizer object of tokenizer.json (null: none); `what` names it in errors. `byte_level`
// is set when a ByteLevel pre-tokenizer is among them (its decoder must then be ByteLevel too).
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& config, const std::string& what, bool& byte_level);

// Throws an mn::Error naming the byte when `text` is not UTF-8.
void check_utf8(std::string_view text, const std::string& what);

}  // namespace mn::io
