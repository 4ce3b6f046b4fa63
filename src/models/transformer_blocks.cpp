#include "models/transformer_blocks.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>

#include "io/json.hpp"

namespace mn::models {

Tensor linear(Graph& g, Tensor x, const std::string& name, int64_t in, int64_t out, bool bias) {
    const Tensor w = g.parameter(name + ".weight", {out, in}, Init::normal(0, 0.02));
    if (!bias) return g.linear(x, w);
    return g.linear(x, w, g.parameter(name + ".bias", {out}));
}

Tensor norm_weight(Graph& g, const std::string& name, int64_t dim) { return g.parameter(name + ".weight", {dim}, Init::ones()); }
Tensor norm_bias(Graph& g, const std::string& name, int64_t dim) { return g.parameter(name + ".bias", {dim}); }

Tensor split_heads(Graph& g, Tensor x, int64_t heads, int64_t head_dim) {
    const Shape s = x.shape();
    return g.permute(g.reshape(x, {s[0], s[1], heads, head_dim}), {0, 2, 1, 3});
}

Tensor merge_heads(Graph& g, Tensor x) {
    const Shape s = x.shape();
    return g.reshape(g.permute(x, {0, 2, 1, 3}), {s[0], s[2], s[1] * s[3]});
}

Tensor swiglu_mlp(Graph& g, Tensor x, const std::string& prefix, int64_t hidden, int64_t ffn) {
    const Tensor gate = linear(g, x, prefix + ".gate_proj", hidden, ffn);
    const Tensor up = linear(g, x, prefix + ".up_proj", hidden, ffn);
    return linear(g, g.silu(gate) * up, prefix + ".down_proj", ffn, hidden);
}

ConfigJson::ConfigJson(const std::string& path) : path_(path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
        fail(std::filesystem::exists(path, ec) ? "not a regular file" : "no such file");
    std::ifstream in(path, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) fail("cannot read it");
    auto parsed = std::make_shared<const nlohmann::json>(io::parse_json(text, "config " + path));
    if (!parsed->is_object()) fail(std::string("the top level is ") + parsed->type_name() + ", expected an object");
    json_ = std::move(parsed);
}

bool ConfigJson::has(const char* key) const { return json_->contains(key) && !(*json_)[key].is_null(); }

std::string ConfigJson::value_of(const char* key) const { return has(key) ? (*json_)[key].dump() : "absent"; }

void ConfigJson::fail(const std::string& what) const { throw Error("config " + path_ + ": " + what); }

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

bool ConfigJson::boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = (*json_)[key];
    if (!v.is_boolean()) fail(std::string(key) + " is " + v.dump() + ", expected true or false");
    return v.get<bool>();
}

Shape checked_input_shape(const ModelRequest& r, const std::string& model, const std::string& name, Shape fallback,
                          const Shape& expected) {
    const auto it = r.input_shapes.find(name);
    if (it == r.input_shapes.end()) return fallback;
    const Shape& got = it->second;
    bool ok = got.size() == expected.size();
    for (size_t d = 0; ok && d < got.size(); ++d) ok = expected[d] < 0 || expected[d] == got[d];
    if (!ok) {
        std::string want = "(";
        for (size_t d = 0; d < expected.size(); ++d) want += (d ? "," : "") + (expected[d] < 0 ? std::string("*") : std::to_string(expected[d]));
        throw Error(model + ": input '" + name + "' is " + shape_str(got) + ", expected " + want + ")");
    }
    return got;
}

}  // namespace mn::models
