#pragma once
// Token ids on the command line: "1,2,3" (what `meganeura tokenize` prints and `generate --tokens`
// and `tokenize --decode` read).
#include <cstdint>
#include <string>
#include <vector>

namespace mn::cli {

// An mn::Error naming `option` and the bad item unless `text` is comma-separated ids from 0 to 2^31 - 1.
std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& option);
std::string format_token_ids(const std::vector<int32_t>& ids);

}  // namespace mn::cli
