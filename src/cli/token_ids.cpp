#include "cli/token_ids.hpp"

#include <charconv>
#include <sstream>

#include "meganeura/error.hpp"

namespace mn::cli {

std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& option) {
    std::vector<int32_t> ids;
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        int32_t v = -1;
        const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), v);
        if (item.empty() || error != std::errc() || end != item.data() + item.size() || v < 0)
            throw Error(option + " must be comma-separated token ids, got '" + item + "'");
        ids.push_back(v);
    }
    if (ids.empty()) throw Error(option + " needs at least one token id");
    return ids;
}

std::string format_token_ids(const std::vector<int32_t>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
    return s;
}

}  // namespace mn::cli
