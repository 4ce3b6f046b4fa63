#include "io/tokenizer.hpp"

#include <algorithm>
#include <array>
#include <fstream>
#include <limits>
#include <map>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "io/json.hpp"
#include "io/pretokenizer.hpp"
#include "meganeura/error.hpp"

namespace mn::io {

namespace {

using nlohmann::json;

struct AddedToken {
    std::string content;
    int32_t id;
    bool special, lstrip, rstrip;
};

// The separator of a merge key: 0xFF never occurs in UTF-8, so no token contains it.
std::string merge_key(const std::string& a, const std::string& b) { return a + '\xFF' + b; }

// The UTF-8 characters of `s`, each as a string.
std::vector<std::string> characters(const std::string& s) {
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
        size_t n = 1;
        while (i + n < s.size() && (static_cast<uint8_t>(s[i + n]) & 0xC0) == 0x80) ++n;
        out.push_back(s.substr(i, n));
        i += n;
    }
    return out;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

const json& field(const json& j, const char* key) {
    static const json null;
    return j.is_object() && j.contains(key) ? j[key] : null;
}

}  // namespace

struct Tokenizer::Impl {
    std::string what;
    std::unordered_map<std::string, int32_t> vocab;
    std::vector<std::string> tokens;  // by id ("" where the vocabulary has a gap)
    std::unordered_map<std::string, int32_t> merge_rank;
    std::vector<AddedToken> added;  // longest content first: the leftmost-longest match wins
    std::vector<bool> special, is_added;  // by id
    std::array<bool, 256> starts_added{};  // the first bytes of added tokens
    std::unique_ptr<PreTokenizer> pre_tokenizer;
    bool byte_level_decoder = false, ignore_merges = false;
    std::optional<int32_t> unk;
    std::vector<int32_t> prefix_special, suffix_special;  // the post-processor's single template
    mutable std::unordered_map<std::string, std::vector<int32_t>> cache;  // word -> ids

    [[noreturn]] void fail(const std::string& m) const { throw Error(what + ": " + m); }

    void add_token(const std::string& token, int32_t id) {
        // Real vocabularies stay far below 2^24 ids; a larger one is a corrupt file, not an allocation.
        if (id < 0 || id >= (1 << 24)) fail("token " + json(token).dump() + " has the id " + std::to_string(id) + ", outside [0, 2^24)");
        if (static_cast<size_t>(id) >= tokens.size()) {
            tokens.resize(static_cast<size_t>(id) + 1);
            special.resize(tokens.size(), false);
            is_added.resize(tokens.size(), false);
        }
        tokens[static_cast<size_t>(id)] = token;
        vocab[token] = id;
    }

    void read_model(const json& m) {
        if (field(m, "type") != "BPE") fail("model type " + field(m, "type").dump() + " is not implemented (only BPE)");
        for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
            if (!field(m, key).is_null() && field(m, key) != "") fail(std::string("model.") + key + " " + field(m, key).dump() + " is not implemented");
        if (field(m, "byte_fallback") == true) fail("model.byte_fallback true is not implemented");
        if (!field(m, "dropout").is_null() && field(m, "dropout") != 0) fail("model.dropout " + field(m, "dropout").dump() + " is not implemented");
        ignore_merges = field(m, "ignore_merges") == true;
        const json& v = field(m, "vocab");
        if (!v.is_object() || v.empty()) fail("model.vocab is not an object of tokens");
        for (const auto& [token, id] : v.items()) {
            if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > std::numeric_limits<int32_t>::max())
                fail("model.vocab[" + json(token).dump() + "] is " + id.dump() + ", expected an id");
            add_token(token, id.get<int32_t>());
        }
        const json& merges = field(m, "merges");
        if (!merges.is_array()) fail("model.merges is not a list");
        for (size_t r = 0; r < merges.size(); ++r) {
            const json& e = merges[r];
            std::string a, b;
            if (e.is_string()) {  // "a b", the older format
                const std::string s = e.get<std::string>();
                const size_t space = s.find(' ');
                if (space == std::string::npos || space == 0 || space + 1 == s.size()) fail("merge " + e.dump() + " is not \"a b\"");
                a = s.substr(0, space);
                b = s.substr(space + 1);
            } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
                a = e[0].get<std::string>();
                b = e[1].get<std::string>();
            } else {
                fail("merge " + e.dump() + " is neither \"a b\" nor [\"a\", \"b\"]");
            }
            for (const std::string& token : {a, b, a + b})
                if (!vocab.count(token)) fail("merge " + e.dump() + ": " + json(token).dump() + " is not in the vocabulary");
            merge_rank.emplace(merge_key(a, b), static_cast<int32_t>(r));  // the first rank of a repeated merge
        }
        if (const json& u = field(m, "unk_token"); !u.is_null()) {
            if (!u.is_string() || !vocab.count(u.get<std::string>())) fail("model.unk_token " + u.dump() + " is not in the vocabulary");
            unk = vocab.at(u.get<std::string>());
        }
    }

    void read_added(const json& list) {
        if (list.is_null()) return;
        if (!list.is_array()) fail("added_tokens is not a list");
        for (const json& t : list) {
            const json& content = field(t, "content");
            const json& id = field(t, "id");
            if (!content.is_string() || content.get<std::string>().empty() || !id.is_number_integer() ||
                id.get<int64_t>() < 0 || id.get<int64_t>() > std::numeric_limits<int32_t>::max())
                fail("added token " + t.dump() + " needs a content and an id");
            if (field(t, "single_word") == true) fail("added token " + content.dump() + ": single_word true is not implemented");
            AddedToken a{content.get<std::string>(), id.get<int32_t>(), field(t, "special") == true,
                         field(t, "lstrip") == true, field(t, "rstrip") == true};
            add_token(a.content, a.id);
            special[static_cast<size_t>(a.id)] = a.special;
            is_added[static_cast<size_t>(a.id)] = true;
            starts_added[static_cast<uint8_t>(a.content[0])] = true;
            added.push_back(std::move(a));
        }
        std::stable_sort(added.begin(), added.end(), [](const auto& x, const auto& y) { return x.content.size() > y.content.size(); });
    }

    // The post-processor's special tokens before and after the sequence (TemplateProcessing's single).
    void read_post_processor(const json& p) {
        if (p.is_null()) return;
        const json& type = field(p, "type");
        if (type == "ByteLevel") return;  // offsets only
        if (type == "Sequence") {
            for (const json& q : field(p, "processors")) read_post_processor(q);
            return;
        }
        if (type != "TemplateProcessing") fail("post_processor " + type.dump() + " is not implemented");
        bool seen_sequence = false;
        for (const json& piece : field(p, "single")) {
            if (piece.contains("Sequence")) {
                seen_sequence = true;
                continue;
            }
            const json& name = field(field(piece, "SpecialToken"), "id");
            const json& ids = field(field(field(p, "special_tokens"), name.is_string() ? name.get<std::string>().c_str() : ""), "ids");
            if (!ids.is_array()) fail("post_processor's special token " + name.dump() + " has no ids");
            for (const json& id : ids) {
                if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= static_cast<int64_t>(tokens.size()))
                    fail("post_processor's special token " + name.dump() + " has the id " + id.dump() + ", not one of the vocabulary");
                (seen_sequence ? suffix_special : prefix_special).push_back(id.get<int32_t>());
            }
        }
    }

    std::vector<int32_t> bpe(const std::string& word) const {
        if (const auto hit = cache.find(word); hit != cache.end()) return hit->second;
        std::vector<std::string> symbols;
        if (const auto whole = vocab.find(word); ignore_merges && whole != vocab.end()) {
            symbols = {word};
        } else {
            symbols = characters(word);
            while (symbols.size() > 1) {
                int32_t best = std::numeric_limits<int32_t>::max();
                for (size_t i = 0; i + 1 < symbols.size(); ++i) {
                    const auto r = merge_rank.find(merge_key(symbols[i], symbols[i + 1]));
                    if (r != merge_rank.end()) best = std::min(best, r->second);
                }
                if (best == std::numeric_limits<int32_t>::max()) break;
                std::vector<std::string> merged;
                for (size_t i = 0; i < symbols.size(); ++i) {
                    if (i + 1 < symbols.size()) {
                        const auto r = merge_rank.find(merge_key(symbols[i], symbols[i + 1]));
                        if (r != merge_rank.end() && r->second == best) {
                            merged.push_back(symbols[i] + symbols[i + 1]);
                            ++i;
                            continue;
                        }
                    }
                    merged.push_back(symbols[i]);
                }
                symbols = std::move(merged);
            }
        }
        std::vector<int32_t> ids;
        for (const std::string& s : symbols) {
            const auto it = vocab.find(s);
            if (it != vocab.end()) ids.push_back(it->second);
            else if (unk) ids.push_back(*unk);
            else fail("the piece " + json(s).dump() + " is not in the vocabulary and there is no unk_token");
        }
        cache.emplace(word, ids);
        return ids;
    }

    // Appends the ids of `text`, which holds no added token.
    void encode_plain(std::string_view text, std::vector<int32_t>& out) const {
        if (text.empty()) return;
        std::vector<std::string> pieces = {std::string(text)};
        if (pre_tokenizer) pre_tokenizer->split(pieces);
        for (const std::string& p : pieces) {
            const std::vector<int32_t> ids = bpe(p);
            out.insert(out.end(), ids.begin(), ids.end());
        }
    }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("tokenizer " + path + ": cannot open it");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return from_json(text, "tokenizer " + path);
}

Tokenizer Tokenizer::from_json(std::string_view text, const std::string& what) {
    auto impl = std::make_unique<Impl>();
    impl->what = what;
    const json j = parse_json(text, what);
    if (!j.is_object()) impl->fail("the top level is not an object");
    if (!field(j, "normalizer").is_null())
        impl->fail("normalizer " + field(field(j, "normalizer"), "type").dump() + " is not implemented");
    impl->read_model(field(j, "model"));
    impl->read_added(field(j, "added_tokens"));
    bool byte_level = false;
    impl->pre_tokenizer = make_pre_tokenizer(field(j, "pre_tokenizer"), what + ": pre_tokenizer", byte_level);
    const json& decoder = field(j, "decoder");
    if (field(decoder, "type") == "ByteLevel") impl->byte_level_decoder = true;
    else if (!decoder.is_null()) impl->fail("decoder " + field(decoder, "type").dump() + " is not implemented");
    if (byte_level != impl->byte_level_decoder) impl->fail("a ByteLevel pre-tokenizer needs a ByteLevel decoder and back");
    impl->read_post_processor(field(j, "post_processor"));
    return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
    check_utf8(text, impl_->what + ": the text");
    std::vector<int32_t> ids;
    if (add_special_tokens) ids = impl_->prefix_special;
    size_t start = 0;  // of the text not yet encoded
    for (size_t at = 0; at < text.size();) {
        const AddedToken* hit = nullptr;
        for (const AddedToken& a : impl_->added) {
            if (!impl_->starts_added[static_cast<uint8_t>(text[at])]) break;
            if (text.compare(at, a.content.size(), a.content) == 0) {
                hit = &a;
                break;
            }
        }
        if (!hit) {
            ++at;
            continue;
        }
        size_t before = at, after = at + hit->content.size();
        if (hit->lstrip)
            while (before > start && is_space(text[before - 1])) --before;
        if (hit->rstrip)
            while (after < text.size() && is_space(text[after])) ++after;
        impl_->encode_plain(text.substr(start, before - start), ids);
        ids.push_back(hit->id);
        start = at = after;
    }
    impl_->encode_plain(text.substr(start), ids);
    if (add_special_tokens) ids.insert(ids.end(), impl_->suffix_special.begin(), impl_->suffix_special.end());
    return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
    return valid_utf8(decode_bytes(ids, skip_special));
}

std::string Tokenizer::decode_bytes(const std::vector<int32_t>& ids, bool skip_special) const {
    std::string out;
    for (const int32_t id : ids) {
        if (id < 0 || id >= vocab_size() || (impl_->tokens[static_cast<size_t>(id)].empty())) continue;
        const std::string& token = impl_->tokens[static_cast<size_t>(id)];
        if (impl_->is_added[static_cast<size_t>(id)]) {
            if (!(skip_special && impl_->special[static_cast<size_t>(id)])) out += token;
            continue;
        }
        if (!impl_->byte_level_decoder) {
            out += token;
            continue;
        }
        for (const std::string& c : characters(token)) {
            const int byte = char_byte(c);
            out += byte >= 0 ? std::string(1, static_cast<char>(byte)) : c;
        }
    }
    return out;
}

int64_t Tokenizer::vocab_size() const { return static_cast<int64_t>(impl_->tokens.size()); }

std::optional<int32_t> Tokenizer::id_of(std::string_view token) const {
    const auto it = impl_->vocab.find(std::string(token));
    return it == impl_->vocab.end() ? std::nullopt : std::optional<int32_t>(it->second);
}

bool Tokenizer::is_special(int32_t id) const {
    return id >= 0 && id < vocab_size() && impl_->special[static_cast<size_t>(id)];
}

namespace {

// The UTF-8 sequence at bytes[i], by Unicode's table 3-7 of well-formed sequences: its length when
// `valid`; else the length of its maximal ill-formed subpart (at least 1), `truncated` when that is
// a well-formed start the bytes end in.
struct Utf8Sequence {
    size_t length;
    bool valid, truncated;
};

Utf8Sequence utf8_sequence_at(std::string_view bytes, size_t i) {
    const auto b = static_cast<uint8_t>(bytes[i]);
    if (b < 0x80) return {1, true, false};
    size_t follow = 0;
    uint8_t low = 0x80, high = 0xBF;  // the range of the second byte; the later ones are 80..BF
    if (b >= 0xC2 && b <= 0xDF) follow = 1;
    else if (b == 0xE0) follow = 2, low = 0xA0;
    else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) follow = 2;
    else if (b == 0xED) follow = 2, high = 0x9F;  // no surrogates
    else if (b == 0xF0) follow = 3, low = 0x90;
    else if (b >= 0xF1 && b <= 0xF3) follow = 3;
    else if (b == 0xF4) follow = 3, high = 0x8F;  // nothing past U+10FFFF
    else return {1, false, false};              // 80..C1 (a continuation, an overlong lead), F5..FF
    for (size_t n = 1; n <= follow; ++n) {
        if (i + n == bytes.size()) return {n, false, true};
        const auto c = static_cast<uint8_t>(bytes[i + n]);
        if (c < low || c > high) return {n, false, false};
        low = 0x80, high = 0xBF;
    }
    return {follow + 1, true, false};
}

}  // namespace

std::string valid_utf8(std::string_view bytes) {
    std::string text;
    for (size_t i = 0; i < bytes.size();) {
        const Utf8Sequence s = utf8_sequence_at(bytes, i);
        if (s.valid) text.append(bytes.substr(i, s.length));
        else text += "\xEF\xBF\xBD";  // U+FFFD
        i += s.length;
    }
    return text;
}

size_t complete_utf8_prefix(std::string_view bytes) {
    for (size_t i = 0; i < bytes.size();) {
        const Utf8Sequence s = utf8_sequence_at(bytes, i);
        if (s.truncated) return i;
        i += s.length;
    }
    return bytes.size();
}

}  // namespace mn::io
