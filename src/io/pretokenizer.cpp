#include "io/pretokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <map>

#include <nlohmann/json.hpp>

#include "meganeura/error.hpp"

namespace mn::io {

namespace {

// GPT-2's split regex, which ByteLevel applies when use_regex is true.
const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string utf8_of(uint32_t c) {
    std::string s;
    if (c < 0x80) {
        s += static_cast<char>(c);
    } else if (c < 0x800) {
        s += static_cast<char>(0xC0 | c >> 6);
        s += static_cast<char>(0x80 | (c & 0x3F));
    } else {
        s += static_cast<char>(0xE0 | c >> 12);
        s += static_cast<char>(0x80 | (c >> 6 & 0x3F));
        s += static_cast<char>(0x80 | (c & 0x3F));
    }
    return s;
}

const std::array<std::string, 256>& byte_chars() {
    static const std::array<std::string, 256> table = [] {
        std::array<std::string, 256> t;
        uint32_t next = 256;
        for (uint32_t b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
            t[b] = utf8_of(printable ? b : next++);
        }
        return t;
    }();
    return table;
}

// A compiled PCRE2 pattern and the non-empty matches of it in a string.
class Regex {
public:
    Regex(const std::string& pattern, bool literal, const std::string& what) {
        int error = 0;
        PCRE2_SIZE offset = 0;
        const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : 0);
        code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset, nullptr);
        if (!code_) {
            PCRE2_UCHAR message[256];
            pcre2_get_error_message(error, message, sizeof message);
            throw Error(what + ": the pattern " + nlohmann::json(pattern).dump() + " does not compile at offset " +
                        std::to_string(offset) + ": " + reinterpret_cast<const char*>(message));
        }
        pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // an interpreter fallback when there is no JIT
        match_ = pcre2_match_data_create_from_pattern(code_, nullptr);
    }
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;
    ~Regex() {
        pcre2_match_data_free(match_);
        pcre2_code_free(code_);
    }

    // [begin, end) of every non-empty match, left to right (an empty match advances one character).
    std::vector<std::pair<size_t, size_t>> matches(const std::string& s) const {
        std::vector<std::pair<size_t, size_t>> found;
        size_t at = 0;
        while (at <= s.size()) {
            const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), at,
                                       PCRE2_NO_UTF_CHECK, match_, nullptr);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) throw Error("tokenizer: regex match failed with PCRE2 error " + std::to_string(rc));
            const PCRE2_SIZE* v = pcre2_get_ovector_pointer(match_);
            if (v[1] > v[0]) {
                found.emplace_back(v[0], v[1]);
                at = v[1];
            } else {
                at = v[0] + 1;
                while (at < s.size() && (static_cast<uint8_t>(s[at]) & 0xC0) == 0x80) ++at;
            }
        }
        return found;
    }

private:
    pcre2_code* code_ = nullptr;
    pcre2_match_data* match_ = nullptr;
};

enum class Behavior { Isolated, Removed, MergedWithPrevious, MergedWithNext };

// Each piece cut at a regex's matches, the matches kept by `behavior` (Hugging Face's Split).
class RegexSplit : public PreTokenizer {
public:
    RegexSplit(const std::string& pattern, bool literal, Behavior behavior, const std::string& what)
        : regex_(pattern, literal, what), behavior_(behavior) {}

    void split(std::vector<std::string>& pieces) const override {
        std::vector<std::string> out;
        for (const std::string& piece : pieces) {
            std::string pending;  // a gap waiting for the match that follows it (MergedWithNext)
            size_t at = 0;
            auto emit = [&](std::string s) {
                if (!s.empty()) out.push_back(std::move(s));
            };
            for (const auto& [begin, end] : regex_.matches(piece)) {
                std::string gap = piece.substr(at, begin - at), match = piece.substr(begin, end - begin);
                switch (behavior_) {
                    case Behavior::Isolated: emit(std::move(gap)); emit(std::move(match)); break;
                    case Behavior::Removed: emit(std::move(gap)); break;
                    case Behavior::MergedWithPrevious: emit(gap + match); break;
                    case Behavior::MergedWithNext: emit(std::move(pending) + gap); pending = std::move(match); break;
                }
                at = end;
            }
            emit(std::move(pending) + piece.substr(at));
        }
        pieces = std::move(out);
    }

private:
    Regex regex_;
    Behavior behavior_;
};

// ByteLevel: an optional leading space, GPT-2's split, then every byte as its character.
class ByteLevel : public PreTokenizer {
public:
    ByteLevel(bool add_prefix_space, bool use_regex, const std::string& what) : add_prefix_space_(add_prefix_space) {
        if (use_regex) split_ = std::make_unique<RegexSplit>(kGpt2Pattern, false, Behavior::Isolated, what);
    }

    void split(std::vector<std::string>& pieces) const override {
        if (add_prefix_space_)
            for (std::string& p : pieces)
                if (p.empty() || p[0] != ' ') p = " " + p;
        if (split_) split_->split(pieces);
        for (std::string& p : pieces) {
            std::string mapped;
            for (const char c : p) mapped += byte_char(static_cast<uint8_t>(c));
            p = std::move(mapped);
        }
    }

private:
    bool add_prefix_space_;
    std::unique_ptr<RegexSplit> split_;
};

class Sequence : public PreTokenizer {
public:
    explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
    void split(std::vector<std::string>& pieces) const override {
        for (const auto& s : steps_) s->split(pieces);
    }

private:
    std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

[[noreturn]] void refuse(const std::string& what, const std::string& field, const nlohmann::json& value) {
    throw Error(what + ": " + field + " " + value.dump() + " is not implemented");
}

bool flag(const nlohmann::json& c, const char* key, bool fallback, const std::string& what) {
    if (!c.contains(key) || c[key].is_null()) return fallback;
    if (!c[key].is_boolean()) throw Error(what + ": " + key + " is " + c[key].dump() + ", expected true or false");
    return c[key].get<bool>();
}

}  // namespace

const std::string& byte_char(uint8_t byte) { return byte_chars()[byte]; }

int char_byte(std::string_view utf8_char) {
    static const std::map<std::string, int, std::less<>> inverse = [] {
        std::map<std::string, int, std::less<>> m;
        for (int b = 0; b < 256; ++b) m[byte_chars()[static_cast<size_t>(b)]] = b;
        return m;
    }();
    const auto it = inverse.find(utf8_char);
    return it == inverse.end() ? -1 : it->second;
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& c, const std::string& what, bool& byte_level) {
    if (c.is_null()) return nullptr;
    if (!c.is_object() || !c.contains("type") || !c["type"].is_string()) throw Error(what + ": expected an object with a type");
    const std::string type = c["type"].get<std::string>();
    if (type == "Sequence") {
        if (!c.contains("pretokenizers") || !c["pretokenizers"].is_array()) throw Error(what + ": Sequence without pretokenizers");
        std::vector<std::unique_ptr<PreTokenizer>> steps;
        for (size_t i = 0; i < c["pretokenizers"].size(); ++i)
            steps.push_back(make_pre_tokenizer(c["pretokenizers"][i], what + ".pretokenizers[" + std::to_string(i) + "]", byte_level));
        return std::make_unique<Sequence>(std::move(steps));
    }
    if (type == "ByteLevel") {
        byte_level = true;
        return std::make_unique<ByteLevel>(flag(c, "add_prefix_space", true, what), flag(c, "use_regex", true, what), what);
    }
    if (type == "Digits") {
        const bool individual = flag(c, "individual_digits", false, what);
        return std::make_unique<RegexSplit>(individual ? "[0-9]" : "[0-9]+", false, Behavior::Isolated, what);
    }
    if (type == "Split") {
        if (flag(c, "invert", false, what)) refuse(what, "Split invert", true);
        const nlohmann::json& pattern = c.value("pattern", nlohmann::json());
        const bool literal = pattern.contains("String");
        const char* key = literal ? "String" : "Regex";
        if (!pattern.is_object() || !pattern.contains(key) || !pattern[key].is_string())
            throw Error(what + ": Split pattern " + pattern.dump() + " is neither {\"Regex\": ...} nor {\"String\": ...}");
        static const std::map<std::string, Behavior> behaviors = {
            {"Isolated", Behavior::Isolated}, {"Removed", Behavior::Removed},
            {"MergedWithPrevious", Behavior::MergedWithPrevious}, {"MergedWithNext", Behavior::MergedWithNext}};
        const nlohmann::json& behavior = c.value("behavior", nlohmann::json());
        if (!behavior.is_string() || !behaviors.count(behavior.get<std::string>())) refuse(what, "Split behavior", behavior);
        return std::make_unique<RegexSplit>(pattern[key].get<std::string>(), literal, behaviors.at(behavior.get<std::string>()), what);
    }
    refuse(what, "pre-tokenizer", c["type"]);
}

void check_utf8(std::string_view text, const std::string& what) {
    size_t i = 0;
    while (i < text.size()) {
        const auto b = static_cast<uint8_t>(text[i]);
        const size_t n = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 && b >= 0xC2 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 && b <= 0xF4 ? 4 : 0;
        bool ok = n != 0 && i + n <= text.size();
        for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<uint8_t>(text[i + k]) & 0xC0) == 0x80;
        if (ok && n == 3) {  // no overlong forms, no surrogates
            const auto b1 = static_cast<uint8_t>(text[i + 1]);
            ok = !(b == 0xE0 && b1 < 0xA0) && !(b == 0xED && b1 >= 0xA0);
        }
        if (ok && n == 4) {
            const auto b1 = static_cast<uint8_t>(text[i + 1]);
            ok = !(b == 0xF0 && b1 < 0x90) && !(b == 0xF4 && b1 >= 0x90);
        }
        if (!ok) throw Error(what + ": not UTF-8 at byte " + std::to_string(i));
        i += n;
    }
}

}  // namespace mn::io
