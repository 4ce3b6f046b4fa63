// libFuzzer target: any bytes as a safetensors file. Reading must end in tensors or an mn::Error.
#include "fuzz_input.hpp"
#include "io/safetensors.hpp"
#include "meganeura/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const mn::fuzz::MemoryFile file(data, size);
    try {
        for (const auto& [name, tensor] : mn::io::read_safetensors(file.path())) {
            if (tensor.dtype == "F32" || tensor.dtype == "F16" || tensor.dtype == "BF16") (void)tensor.to_f32(name);
            if (tensor.dtype == "I32" || tensor.dtype == "I64") (void)tensor.to_i32(name);
        }
        (void)mn::io::read_safetensors_metadata(file.path());
    } catch (const mn::Error&) {
    }
    return 0;
}
