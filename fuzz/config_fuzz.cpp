// libFuzzer target: any bytes as a Hugging Face config.json, read as SmolLM2's and as Whisper's.
// Each read must end in a configuration whose values the builders can use, or an mn::Error.
#include <cstdlib>

#include "fuzz_input.hpp"
#include "meganeura/error.hpp"
#include "models/smollm2.hpp"
#include "models/whisper.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const mn::fuzz::MemoryFile file(data, size);
    try {
        const mn::models::LlamaConfig c = mn::models::LlamaConfig::from_json(file.path());
        if (c.heads < 1 || c.kv_heads < 1 || c.heads % c.kv_heads || c.head_dim % 2 || c.hidden < 1 || c.vocab < 1)
            std::abort();
    } catch (const mn::Error&) {
    }
    try {
        const mn::models::WhisperConfig c = mn::models::WhisperConfig::from_json(file.path());
        if (c.heads < 1 || c.d % c.heads || c.frames < 2 || c.mels < 1) std::abort();
    } catch (const mn::Error&) {
    }
    return 0;
}
