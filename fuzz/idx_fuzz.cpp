// libFuzzer target: any bytes as an IDX file, plain or gzip. Reading must end in an array whose
// size its header states, or an mn::Error.
#include <cstdlib>

#include "fuzz_input.hpp"
#include "io/idx.hpp"
#include "meganeura/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const mn::fuzz::MemoryFile file(data, size);
    try {
        const mn::io::IdxArray array = mn::io::read_idx(file.path());
        uint64_t count = 1;
        for (int64_t dim : array.shape) count *= uint64_t(dim);
        if (count != array.data.size()) std::abort();
    } catch (const mn::Error&) {
    }
    return 0;
}
