// libFuzzer target: any bytes as an ONNX model, imported (parsed, its initializers decoded, its nodes lowered into
// the graph) once as it is and once with its inputs' shapes given. Each import must end in a model or an mn::Error.
#include "fuzz_input.hpp"
#include "meganeura/error.hpp"
#include "meganeura/onnx.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const mn::fuzz::MemoryFile file(data, size);
    try {
        (void)mn::import_onnx(file.path());
    } catch (const mn::Error&) {
    }
    try {
        (void)mn::import_onnx(file.path(), {{"x", {2, 3}}});
    } catch (const mn::Error&) {
    }
    return 0;
}
