// Session checkpoints: parameters and optimizer state as safetensors, keyed by the graph's names,
// plus the step count in the metadata. Loading validates everything before writing anything, so
// a bad file leaves the session as it was.
#include <cstring>

#include "common/half.hpp"
#include "compiler/session_impl.hpp"
#include "io/safetensors.hpp"

namespace mn {

namespace {

const char* kStepKey = "meganeura.step";

bool persistent(const sched::Value& v) {
    return v.storage == sched::Storage::Parameter || v.storage == sched::Storage::State;
}

}  // namespace

void Session::save(const std::string& path) const {
    io::TensorMap tensors;
    for (const auto& [name, v] : impl_->names) {
        if (v < 0 || !persistent(impl_->value(v))) continue;
        const sched::Value& val = impl_->value(v);
        io::TensorData t{.dtype = val.dtype == DType::F16 ? "F16" : "F32", .shape = val.shape};
        t.bytes = impl_->read_now(v);
        tensors[name] = std::move(t);
    }
    io::write_safetensors(path, tensors, {{kStepKey, std::to_string(impl_->steps_taken)}});
}

void Session::load(const std::string& path) {
    const io::TensorMap file = io::read_safetensors(path);
    std::vector<int32_t> values;
    std::vector<const io::TensorData*> sources;
    for (const auto& [name, v] : impl_->names) {
        if (v < 0 || !persistent(impl_->value(v))) continue;
        const sched::Value& val = impl_->value(v);
        auto it = file.find(name);
        if (it == file.end()) {
            // Optimizer state may be absent (weights exported elsewhere): it keeps its current values.
            if (val.storage == sched::Storage::State) continue;
            throw Error(path + ": missing tensor '" + name + "' (shape " + shape_str(val.shape) + ")");
        }
        if (it->second.shape != val.shape) {
            throw Error(path + ": tensor '" + name + "' has shape " + shape_str(it->second.shape) + ", expected " +
                        shape_str(val.shape));
        }
        it->second.check_f32(path + ": tensor '" + name + "'");  // before any write
        values.push_back(v);
        sources.push_back(&it->second);
    }
    int64_t step = impl_->steps_taken;  // a file without a step count leaves it as it is
    const auto meta = io::read_safetensors_metadata(path);
    if (auto it = meta.find(kStepKey); it != meta.end()) {
        try {
            step = std::stoll(it->second);
        } catch (const std::exception&) {
            throw Error(path + ": metadata '" + kStepKey + "' is not a number: '" + it->second + "'");
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
