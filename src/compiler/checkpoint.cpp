// Session checkpoints: parameters and optimizer state as safetensors, keyed by the graph's names,
// plus the step count in the metadata. Loading validates everything before writing anything, so
// a bad file leaves the session as it was.
#include <cstring>
#include <map>

#include "common/half.hpp"
#include "compiler/session_impl.hpp"
#include "io/safetensors.hpp"

namespace mn {

namespace {

const char* kStepKey = "meganeura.step";

}  // namespace

void Session::save(const std::string& path) const { save(path, {}); }

void Session::save(const std::string& path, const std::function<bool(const std::string&)>& omit) const {
    std::vector<std::string> names;
    std::vector<int32_t> values;
    for (const auto& [name, v] : impl_->names) {
        if (!impl_->checkpointed.count(name)) continue;
        if (omit && impl_->value(v).storage == sched::Storage::Parameter && omit(name)) continue;
        names.push_back(name);
        values.push_back(v);
    }
    std::vector<std::vector<uint8_t>> bytes = impl_->read_now(values);  // one transfer
    io::TensorMap tensors;
    for (size_t i = 0; i < values.size(); ++i) {
        const sched::Value& val = impl_->value(values[i]);
        tensors[names[i]] = io::TensorData{.dtype = val.dtype == DType::F16 ? "F16" : "F32", .shape = val.shape,
                                           .bytes = std::move(bytes[i])};
    }
    io::write_safetensors(path, tensors, {{kStepKey, std::to_string(impl_->steps_taken)}});
}

void Session::load(const std::string& path) { load(std::vector<std::string>{path}); }

void Session::load(const std::vector<std::string>& files, const std::function<bool(const std::string&)>& keep) {
    if (files.empty()) throw Error("load: no checkpoint files given");
    // Every tensor of every file by name, with the file it came from (for messages).
    std::vector<io::TensorMap> contents;
    std::map<std::string, std::pair<const io::TensorData*, const std::string*>> file;
    for (const std::string& path : files) contents.push_back(io::read_safetensors(path));
    for (size_t f = 0; f < files.size(); ++f) {
        for (const auto& [name, t] : contents[f]) {
            const auto [it, fresh] = file.try_emplace(name, &t, &files[f]);
            if (!fresh) throw Error(files[f] + ": tensor '" + name + "' is also in " + *it->second.second);
        }
    }
    const std::string all = files.size() == 1 ? files[0] : files[0] + " (and " + std::to_string(files.size() - 1) + " more shards)";
    std::vector<int32_t> values;
    std::vector<const io::TensorData*> sources;
    for (const auto& [name, v] : impl_->names) {
        if (!impl_->checkpointed.count(name) || (keep && keep(name))) continue;
        const sched::Value& val = impl_->value(v);
        auto it = file.find(name);
        if (it == file.end()) {
            // Optimizer state may be absent (weights exported elsewhere): it keeps its current values.
            if (val.storage == sched::Storage::State) continue;
            throw Error(all + ": missing tensor '" + name + "' (shape " + shape_str(val.shape) + ")");
        }
        const std::string& path = *it->second.second;
        const io::TensorData& t = *it->second.first;
        if (t.shape != val.shape) {
            throw Error(path + ": tensor '" + name + "' has shape " + shape_str(t.shape) + ", expected " +
                        shape_str(val.shape));
        }
        t.check_f32(path + ": tensor '" + name + "'");  // before any write
        values.push_back(v);
        sources.push_back(&t);
    }
    int64_t step = impl_->steps_taken;  // a file without a step count leaves it as it is
    for (const std::string& path : files) {
        const auto meta = io::read_safetensors_metadata(path);
        if (auto it = meta.find(kStepKey); it != meta.end()) {
            try {
                step = std::stoll(it->second);
            } catch (const std::exception&) {
                throw Error(path + ": metadata '" + kStepKey + "' is not a number: '" + it->second + "'");
            }
        }
    }
    impl_->write_many(values, [&](size_t i, uint8_t* dst) {
        const std::vector<float> f = sources[i]->to_f32();
        if (impl_->value(values[i]).dtype == DType::F32) {
            std::memcpy(dst, f.data(), f.size() * 4);
        } else {
            for (size_t k = 0; k < f.size(); ++k) {
                const uint16_t h = float_to_half(f[k]);
                std::memcpy(dst + 2 * k, &h, 2);
            }
        }
    });
    impl_->steps_taken = step;
}

}  // namespace mn
