#pragma once
// A Hugging Face config.json (or generation_config.json), read field by field with validation: every
// value is checked before a model sees it, and a wrong one is an mn::Error naming the file, the field
// and the value ("config c.json: hidden_size is 64.7, expected an integer from 1 to 2147483647"). A
// missing or null field takes the caller's default.
//
// The reader remembers which fields were read, so a builder can refuse the ones it does not implement
// (refuse_unread): a field that changes the model and is silently dropped gives wrong results with no
// error, which is worse than no support.
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace mn::models {

class ConfigJson {
public:
    // An mn::Error when it cannot be read or parsed; `what` names the file in messages.
    explicit ConfigJson(const std::string& path, const std::string& what = "config");

    bool has(const char* key) const;  // present and not null (and marks it read)
    // An integer from 1 to 2^31 - 1 (tensor dimensions are int32 on the device).
    int64_t count(const char* key, int64_t fallback) const;
    double positive(const char* key, double fallback) const;  // a finite number above 0
    double number(const char* key, double lo, double hi, double fallback) const;  // finite, in [lo, hi]
    bool boolean(const char* key, bool fallback) const;
    std::string text(const char* key, const std::string& fallback) const;
    // Token ids: one integer or a list of them, each from 0 to 2^31 - 1 (eos_token_id is either).
    std::vector<int64_t> ids(const char* key) const;
    // The field, when present, must equal `implemented` (the one value the builder has): anything
    // else is an error saying so ("hidden_act is \"gelu\"; only \"silu\" is implemented").
    void require(const char* key, const char* implemented_json) const;
    // The object `key` holds (rope_scaling), read the same way; its messages name "key.field".
    ConfigJson object(const char* key) const;
    // An error naming every field that was neither read nor listed in `ignored` (metadata that does
    // not change the computation), as not implemented by `builder`.
    void refuse_unread(const std::string& builder, const std::vector<std::string>& ignored) const;
    // An error naming the file and `what` (a field and its value, or a relation between fields).
    [[noreturn]] void fail(const std::string& what) const;
    std::string value_of(const char* key) const;  // the field's JSON text, for messages

private:
    ConfigJson(std::string path, std::string what, std::string prefix, std::shared_ptr<const nlohmann::json> json);
    std::string path_, what_, prefix_;  // prefix_: "key." of a nested object
    std::shared_ptr<const nlohmann::json> json_;
    mutable std::set<std::string> read_;
};

}  // namespace mn::models
