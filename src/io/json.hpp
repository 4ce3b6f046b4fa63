#pragma once
// JSON from untrusted files (safetensors headers, config.json): nlohmann's parser with the limits
// those files need, so every malformed input is an mn::Error naming the file. The parser itself is
// iterative, but dump() and our readers recurse, so nesting is bounded at parse time; a number
// outside double's range ("1e999"), which nlohmann reports as out_of_range rather than as a parse
// error, is a malformed file like any other.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace mn::io {

// Deeper than any file we read needs (a safetensors header is 3 levels, a Hugging Face config.json
// rarely more than 5), far below what would exhaust the stack.
constexpr int kMaxJsonDepth = 64;

// Parses `text`; throws mn::Error "<what>: ..." when it is not valid JSON, nests deeper than
// kMaxJsonDepth or holds a number outside double's range.
nlohmann::json parse_json(std::string_view text, const std::string& what);

}  // namespace mn::io
