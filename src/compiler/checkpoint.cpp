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
    std::vector<std::pair<int32_t, std::vector<uint8_t>>> writes;
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
        const std::vector<float> values = it->second.to_f32(path + ": tensor '" + name + "'");
        std::vector<uint8_t> bytes(val.bytes());
        if (val.dtype == DType::F32) {
            std::memcpy(bytes.data(), values.data(), bytes.size());
        } else {
            for (size_t i = 0; i < values.size(); ++i) {
                const uint16_t h = float_to_half(values[i]);
                std::memcpy(bytes.data() + 2 * i, &h, 2);
            }
        }
        writes.emplace_back(v, std::move(bytes));
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
    for (const auto& [v, bytes] : writes) impl_->write_now(v, bytes.data());
    impl_->steps_taken = step;
}

}  // namespace mn
