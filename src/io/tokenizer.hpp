#pragma once
// Hugging Face's tokenizer.json, byte-level BPE as GPT-2, SmolLM2, Llama 3 and Qwen2 use it, in
// Hugging Face's order: the added (special) tokens split the text first; each piece between them is
// pre-tokenized (the split regex, digits, the byte-to-unicode mapping) and each word is merged by
// rank into vocabulary tokens; the post-processor adds a template's special tokens. Decoding maps
// the tokens' characters back to bytes.
//
// Anything tokenizer.json can say that this does not implement (a normalizer, another model or
// decoder, byte fallback, dropout, ...) is an mn::Error naming it when the file is loaded: a
// tokenizer that silently differs from Hugging Face's trains and generates on the wrong ids.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mn::io {

class Tokenizer {
public:
    // An mn::Error naming the file and the field on anything unreadable or not implemented.
    static Tokenizer from_file(const std::string& path);
    static Tokenizer from_json(std::string_view json, const std::string& what);
    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    // Hugging Face's encode(text, add_special_tokens): the post-processor's special tokens (a BOS)
    // only with add_special_tokens. `text` must be UTF-8 (an mn::Error names the byte otherwise).
    std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
    // Hugging Face's decode(ids, skip_special_tokens): the text of `ids`, valid UTF-8, each ill-formed
    // sequence of their bytes one U+FFFD (valid_utf8); special added tokens are left out with
    // skip_special. An id that names no token (past the vocabulary, as in a model whose vocab_size is
    // padded beyond its tokenizer's, or a gap in it) is left out, as Hugging Face's decode does.
    std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
    // The bytes decode() makes its text of, which may be ill-formed UTF-8 and end inside a character
    // when the ids do (a streaming decoder turns them into text as they become whole).
    std::string decode_bytes(const std::vector<int32_t>& ids, bool skip_special = false) const;

    int64_t vocab_size() const;  // the largest id + 1
    std::optional<int32_t> id_of(std::string_view token) const;  // a vocabulary or added token
    bool is_special(int32_t id) const;

private:
    struct Impl;
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// `bytes` as Hugging Face's byte-level decoder makes them text (Rust's String::from_utf8_lossy):
// well-formed UTF-8 as it is, each maximal ill-formed subsequence (Unicode's table 3-7: a byte that
// begins no character, or the bytes of one that stops short) one U+FFFD. Byte-level BPE ids decode
// to any bytes, and a random or sampled model produces ill-formed ones.
std::string valid_utf8(std::string_view bytes);

// The longest prefix of `bytes` that no byte after it can change the text of: all but a trailing
// well-formed start of a character (a streaming decoder prints valid_utf8 of that much and keeps
// the rest for the next token, so that it prints valid_utf8 of all the bytes in the end).
size_t complete_utf8_prefix(std::string_view bytes);

}  // namespace mn::io
