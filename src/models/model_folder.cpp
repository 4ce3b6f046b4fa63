#include "models/model_folder.hpp"

#include <filesystem>
#include <fstream>
#include <set>

#include "io/json.hpp"
#include "meganeura/error.hpp"
#include "models/config_json.hpp"
#include "models/smollm2.hpp"

namespace mn::models {

namespace fs = std::filesystem;

namespace {

bool is_file(const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec);
}

// The shard files of model.safetensors.index.json's weight_map, each once, in the index's order.
std::vector<std::string> shards_of(const fs::path& index) {
    std::ifstream in(index, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) throw Error(index.string() + ": cannot read it");
    const nlohmann::json j = io::parse_json(text, index.string());
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        throw Error(index.string() + ": no weight_map object");
    std::vector<std::string> shards;
    std::set<std::string> seen;
    for (const auto& [tensor, file] : j["weight_map"].items()) {
        if (!file.is_string()) throw Error(index.string() + ": weight_map['" + tensor + "'] is not a file name");
        const std::string name = file.get<std::string>();
        // A shard is a file of this folder, never a path that leaves it.
        if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
            throw Error(index.string() + ": weight_map['" + tensor + "'] is '" + name + "', not a file of the folder");
        const fs::path shard = index.parent_path() / name;
        if (!seen.insert(name).second) continue;
        if (!is_file(shard)) throw Error(index.string() + ": shard " + shard.string() + " is missing");
        shards.push_back(shard.string());
    }
    if (shards.empty()) throw Error(index.string() + ": weight_map lists no tensors");
    return shards;
}

GenerationDefaults generation_defaults(const fs::path& dir, const ConfigJson& config) {
    GenerationDefaults d;
    d.eos_token_ids = config.ids("eos_token_id");
    const fs::path path = dir / "generation_config.json";
    if (!is_file(path)) return d;
    const ConfigJson j(path.string(), "generation config");
    if (j.has("eos_token_id")) d.eos_token_ids = j.ids("eos_token_id");
    d.do_sample = j.boolean("do_sample", d.do_sample);
    d.temperature = j.positive("temperature", d.temperature);
    d.top_p = j.number("top_p", 0, 1, d.top_p);
    d.top_k = static_cast<int64_t>(j.number("top_k", 0, INT32_MAX, static_cast<double>(d.top_k)));  // 0: off
    if (j.has("max_new_tokens")) d.max_new_tokens = j.count("max_new_tokens", 1);
    return d;
}

}  // namespace

bool is_directory(const std::string& path) {
    std::error_code ec;
    return fs::is_directory(path, ec);
}

ModelFolder open_model_folder(const std::string& dir) {
    if (!is_directory(dir)) throw Error("model folder " + dir + ": not a directory");
    ModelFolder m{.dir = dir, .model = "smollm2", .config = (fs::path(dir) / "config.json").string()};
    if (!is_file(m.config)) throw Error("model folder " + dir + ": no config.json");
    (void)LlamaConfig::from_json(m.config);  // model_type and every field checked now
    const fs::path single = fs::path(dir) / "model.safetensors", index = fs::path(dir) / "model.safetensors.index.json";
    if (is_file(single)) m.weights = {single.string()};
    else if (is_file(index)) m.weights = shards_of(index);
    else throw Error("model folder " + dir + ": no model.safetensors or model.safetensors.index.json");
    if (const fs::path t = fs::path(dir) / "tokenizer.json"; is_file(t)) m.tokenizer = t.string();
    m.generation = generation_defaults(dir, ConfigJson(m.config));
    return m;
}

}  // namespace mn::models
