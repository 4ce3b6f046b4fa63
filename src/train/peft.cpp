#include "train/peft.hpp"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "meganeura/error.hpp"

namespace mn::train {

namespace fs = std::filesystem;

namespace {

const std::string kPeftPrefix = "base_model.model.";

std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path.string() + ": cannot open it");
    std::stringstream all;
    all << in.rdbuf();
    return all.str();
}

void write_text(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    if (!out) throw Error(path.string() + ": cannot write it");
}

}  // namespace

std::string peft_name(const std::string& name) { return kPeftPrefix + name; }

void write_adapter(const std::string& dir, const io::TensorMap& adapter, const models::LoraConfig& lora,
                   const std::string& base_model) {
    fs::create_directories(dir);
    io::TensorMap tensors;
    for (const auto& [name, t] : adapter) tensors[peft_name(name)] = t;
    io::write_safetensors((fs::path(dir) / "adapter_model.safetensors").string(), tensors, {{"format", "pt"}});
    const nlohmann::json config = {
        {"peft_type", "LORA"}, {"task_type", "CAUSAL_LM"}, {"base_model_name_or_path", base_model},
        {"r", lora.rank}, {"lora_alpha", lora.alpha}, {"lora_dropout", 0.0}, {"target_modules", lora.targets},
        {"bias", "none"}, {"fan_in_fan_out", false}, {"inference_mode", true}, {"init_lora_weights", true},
        {"modules_to_save", nullptr}, {"use_rslora", false}, {"use_dora", false}, {"layers_to_transform", nullptr},
        {"rank_pattern", nlohmann::json::object()}, {"alpha_pattern", nlohmann::json::object()}};
    write_text(fs::path(dir) / "adapter_config.json", config.dump(2) + "\n");
}

Adapter read_adapter(const std::string& dir) {
    const fs::path config_path = fs::path(dir) / "adapter_config.json";
    const std::string what = "adapter " + config_path.string();
    std::error_code error;
    if (!fs::exists(config_path, error)) {
        // A full fine-tune's output (or --merge's) is a model folder: it runs as -m, not on top of another.
        if (fs::exists(fs::path(dir) / "config.json", error))
            throw Error("--adapter " + dir + " is a model folder, not a LoRA adapter: run it as -m " + dir);
        throw Error("--adapter " + dir + ": there is no " + config_path.string() + " (a LoRA adapter in PEFT's format, as "
                    "finetune --lora-rank writes it)");
    }
    const nlohmann::json c = io::parse_json(read_text(config_path), what);
    auto field = [&](const char* key) { return c.is_object() && c.contains(key) ? c[key] : nlohmann::json(); };
    auto require = [&](const char* key, const nlohmann::json& implemented) {
        const nlohmann::json v = field(key);
        const bool empty = v.is_null() || (v.is_object() && v.empty()) || (v.is_array() && v.empty());
        if (!empty && v != implemented) throw Error(what + ": " + key + " " + v.dump() + " is not implemented");
    };
    if (field("peft_type") != "LORA") throw Error(what + ": peft_type " + field("peft_type").dump() + " is not LORA");
    Adapter a;
    if (!field("r").is_number_unsigned() || field("r").get<int64_t>() < 1) throw Error(what + ": r is " + field("r").dump());
    a.lora.rank = field("r").get<int64_t>();
    if (!field("lora_alpha").is_number()) throw Error(what + ": lora_alpha is " + field("lora_alpha").dump());
    a.lora.alpha = field("lora_alpha").get<double>();
    const nlohmann::json targets = field("target_modules");
    if (!targets.is_array() || targets.empty())
        throw Error(what + ": target_modules " + targets.dump() + " is not a list of module names");
    a.lora.targets.clear();
    for (const nlohmann::json& t : targets) {
        if (!t.is_string()) throw Error(what + ": target_modules " + targets.dump() + " is not a list of module names");
        a.lora.targets.push_back(t.get<std::string>());
    }
    for (const char* key : {"use_rslora", "use_dora", "fan_in_fan_out"}) require(key, false);
    require("bias", "none");
    for (const char* key : {"rank_pattern", "alpha_pattern", "modules_to_save", "layers_to_transform"}) require(key, nullptr);

    const std::string weights = (fs::path(dir) / "adapter_model.safetensors").string();
    for (auto& [name, t] : io::read_safetensors(weights)) {
        if (name.rfind(kPeftPrefix, 0) != 0 || !models::is_lora_parameter(name))
            throw Error(weights + ": tensor '" + name + "' is not a LoRA weight under " + kPeftPrefix);
        a.tensors[name.substr(kPeftPrefix.size())] = std::move(t);
    }
    return a;
}

void write_model_folder(const std::string& dir, const io::TensorMap& weights, const models::ModelFolder& base) {
    fs::create_directories(dir);
    io::write_safetensors((fs::path(dir) / "model.safetensors").string(), weights, {{"format", "pt"}});
    for (const char* name : {"config.json", "tokenizer.json", "generation_config.json", "tokenizer_config.json",
                             "special_tokens_map.json"}) {
        const fs::path from = fs::path(base.dir) / name;
        if (fs::exists(from)) fs::copy_file(from, fs::path(dir) / name, fs::copy_options::overwrite_existing);
    }
}

io::TensorMap merge_adapter(const io::TensorMap& base, const Adapter& adapter) {
    io::TensorMap merged = base;
    for (const auto& [name, a] : adapter.tensors) {
        const std::string suffix = ".lora_A.weight";
        if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
        const std::string module = name.substr(0, name.size() - suffix.size());
        const auto b = adapter.tensors.find(module + ".lora_B.weight");
        const auto w = merged.find(module + ".weight");
        if (b == adapter.tensors.end() || w == merged.end())
            throw Error("merge: the adapter of " + module + " has no lora_B, or the model no " + module + ".weight");
        std::vector<float> wv = w->second.to_f32(w->first);
        const int64_t r = a.shape[0], in = a.shape[1], out = b->second.shape[0];
        if (b->second.shape != std::vector<int64_t>{out, r} || w->second.shape != std::vector<int64_t>{out, in})
            throw Error("merge: " + module + "'s weight and adapter shapes do not fit");
        models::merge_lora(wv, a.to_f32(name), b->second.to_f32(b->first), r, adapter.lora.scale());
        w->second = io::TensorData::from_f32(w->second.shape, wv);
    }
    return merged;
}

}  // namespace mn::train
