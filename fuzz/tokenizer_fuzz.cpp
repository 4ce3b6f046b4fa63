// libFuzzer target: any bytes as a tokenizer.json. Loading must end in a tokenizer or an mn::Error; a
// tokenizer that loads encodes and decodes a multilingual text (or says why not, as an mn::Error).
#include "fuzz_input.hpp"
#include "io/tokenizer.hpp"
#include "meganeura/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const mn::fuzz::MemoryFile file(data, size);
    try {
        const mn::io::Tokenizer t = mn::io::Tokenizer::from_file(file.path());
        const std::vector<int32_t> ids = t.encode("Hello, world! 123 \xC3\xA4\xC3\xB6 \xE4\xB8\xAD\xE6\x96\x87 <|endoftext|>\n\n  x");
        (void)t.decode(ids);
        (void)t.decode(ids, true);
    } catch (const mn::Error&) {
    }
    return 0;
}
