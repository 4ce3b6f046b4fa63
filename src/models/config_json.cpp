#include "models/config_json.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "io/json.hpp"
#include "meganeura/error.hpp"

namespace mn::models {

ConfigJson::ConfigJson(const std::string& path, const std::string& what) : path_(path), what_(what) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
        fail(std::filesystem::exists(path, ec) ? "not a regular file" : "no such file");
    std::ifstream in(path, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) fail("cannot read it");
    auto parsed = std::make_shared<const nlohmann::json>(io::parse_json(text, what_ + " " + path));
    if (!parsed->is_object()) fail(std::string("the top level is ") + parsed->type_name() + ", expected an object");
    json_ = std::move(parsed);
}

ConfigJson::ConfigJson(std::string path, std::string what, std::string prefix, std::shared_ptr<const nlohmann::json> json)
    : path_(std::move(path)), what_(std::move(what)), prefix_(std::move(prefix)), json_(std::move(json)) {}

ConfigJson ConfigJson::object(const char* key) const {
    if (!has(key) || !(*json_)[key].is_object()) fail(std::string(key) + " is " + value_of(key) + ", expected an object");
    return ConfigJson(path_, what_, prefix_ + key + ".", std::make_shared<const nlohmann::json>((*json_)[key]));
}

bool ConfigJson::has(const char* key) const {
    read_.insert(key);
    return json_->contains(key) && !(*json_)[key].is_null();
}

std::string ConfigJson::value_of(const char* key) const { return has(key) ? (*json_)[key].dump() : "absent"; }

void ConfigJson::fail(const std::string& what) const { throw Error(what_ + " " + path_ + ": " + prefix_ + what); }

int64_t ConfigJson::count(const char* key, int64_t fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = (*json_)[key];
    constexpr uint64_t kMax = INT32_MAX;
    // nlohmann stores non-negative integers as unsigned (up to 2^64 - 1), negative ones as signed
    if (!v.is_number_unsigned() || v.get<uint64_t>() < 1 || v.get<uint64_t>() > kMax)
        fail(std::string(key) + " is " + v.dump() + ", expected an integer from 1 to " + std::to_string(kMax));
    return static_cast<int64_t>(v.get<uint64_t>());
}

double ConfigJson::positive(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = (*json_)[key];
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
        fail(std::string(key) + " is " + v.dump() + ", expected a finite number above 0");
    return v.get<double>();
}

double ConfigJson::number(const char* key, double lo, double hi, double fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = (*json_)[key];
    if (!v.is_number() || !(v.get<double>() >= lo && v.get<double>() <= hi))
        fail(std::string(key) + " is " + v.dump() + ", expected a number from " + nlohmann::json(lo).dump() + " to " +
             nlohmann::json(hi).dump());
    return v.get<double>();
}

bool ConfigJson::boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = (*json_)[key];
    if (!v.is_boolean()) fail(std::string(key) + " is " + v.dump() + ", expected true or false");
    return v.get<bool>();
}

std::string ConfigJson::text(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = (*json_)[key];
    if (!v.is_string()) fail(std::string(key) + " is " + v.dump() + ", expected a string");
    return v.get<std::string>();
}

std::vector<int64_t> ConfigJson::ids(const char* key) const {
    if (!has(key)) return {};
    const nlohmann::json& v = (*json_)[key];
    const nlohmann::json list = v.is_array() ? v : nlohmann::json::array({v});
    std::vector<int64_t> out;
    for (const nlohmann::json& id : list) {
        if (!id.is_number_unsigned() || id.get<uint64_t>() > INT32_MAX)
            fail(std::string(key) + " is " + v.dump() + ", expected a token id or a list of them");
        out.push_back(static_cast<int64_t>(id.get<uint64_t>()));
    }
    return out;
}

void ConfigJson::require(const char* key, const char* implemented_json) const {
    if (!has(key)) return;
    const nlohmann::json implemented = nlohmann::json::parse(implemented_json);
    const nlohmann::json& v = (*json_)[key];
    // 0 and 0.0 are one value to a config's author
    const bool same = v.is_number() && implemented.is_number() ? v.get<double>() == implemented.get<double>() : v == implemented;
    if (!same) fail(std::string(key) + " is " + v.dump() + "; only " + implemented.dump() + " is implemented");
}

void ConfigJson::refuse_unread(const std::string& builder, const std::vector<std::string>& ignored) const {
    std::string unknown;
    for (const auto& [key, value] : json_->items()) {
        if (read_.count(key) || std::find(ignored.begin(), ignored.end(), key) != ignored.end()) continue;
        unknown += (unknown.empty() ? "" : ", ") + prefix_ + key + " = " + value.dump();
    }
    if (!unknown.empty()) throw Error(what_ + " " + path_ + ": not implemented by the " + builder + " builder: " + unknown);
}

}  // namespace mn::models
