#include "io/json.hpp"

#include "meganeura/error.hpp"

namespace mn::io {

nlohmann::json parse_json(std::string_view text, const std::string& what) {
    using json = nlohmann::json;
    // The callback sees each value as it opens, with its depth; refusing there stops the parse
    // before the deep part is built.
    const json::parser_callback_t limit_depth = [&](int depth, json::parse_event_t event, json&) {
        if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
            depth >= kMaxJsonDepth)
            throw Error(what + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
        return true;
    };
    try {
        return json::parse(text, limit_depth);
    } catch (const json::exception& error) {  // parse_error, and out_of_range for numbers like 1e999
        throw Error(what + ": not valid JSON: " + error.what());
    }
}

}  // namespace mn::io
