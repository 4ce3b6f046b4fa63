// IDX reader. zlib's gzread passes plain files through unchanged, so one code path reads both
// "train-images-idx3-ubyte" and its ".gz"; the file is small (47 MB at most for Fashion-MNIST)
// and read whole. The format: two zero bytes, a type byte, a rank byte, `rank` big-endian
// uint32 dimensions, then the elements. Only unsigned bytes (0x08) occur in the datasets we
// load, so other types are rejected by name rather than half-supported.
#include "io/idx.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "meganeura/error.hpp"

namespace mn::io {
namespace {

std::vector<uint8_t> read_all(const std::string& path) {
    std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), gzclose);
    if (!file) throw Error("cannot open " + path + ": " + std::strerror(errno));
    std::vector<uint8_t> bytes;
    uint8_t chunk[1 << 16];
    for (int got; (got = gzread(file.get(), chunk, sizeof chunk)) != 0;) {
        if (got < 0) {
            int code = 0;
            throw Error(path + ": cannot read: " + gzerror(file.get(), &code));
        }
        bytes.insert(bytes.end(), chunk, chunk + got);
    }
    return bytes;
}

const char* type_name(uint8_t type) {
    switch (type) {
        case 0x09: return "signed byte";
        case 0x0B: return "int16";
        case 0x0C: return "int32";
        case 0x0D: return "float32";
        case 0x0E: return "float64";
    }
    return "unknown";
}

}  // namespace

IdxArray read_idx(const std::string& path) {
    const std::vector<uint8_t> bytes = read_all(path);
    if (bytes.size() < 4 || bytes[0] != 0 || bytes[1] != 0)
        throw Error(path + ": not an IDX file (the first two bytes must be zero)");
    if (bytes[2] != 0x08) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", bytes[2]);
        throw Error(path + ": IDX element type " + hex + " (" + type_name(bytes[2]) +
                    ") is not supported; only unsigned byte (0x08) is");
    }
    const size_t rank = bytes[3], header_size = 4 + 4 * rank;
    if (bytes.size() < header_size)
        throw Error(path + ": truncated: the header needs " + std::to_string(header_size) + " bytes, got " +
                    std::to_string(bytes.size()));

    IdxArray array;
    uint64_t count = 1;
    for (size_t i = 0; i < rank; ++i) {
        const uint8_t* p = &bytes[4 + 4 * i];
        const uint32_t dim = uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
        array.shape.push_back(dim);
        if (__builtin_mul_overflow(count, dim, &count))
            count = UINT64_MAX;  // saturates; a later 0 still wins
    }
    const uint64_t got = bytes.size() - header_size;
    if (count != got)
        throw Error(path + (count > got ? ": truncated: expected " : ": trailing data: expected ") +
                    std::to_string(count) + " data bytes, got " + std::to_string(got));
    array.data.assign(bytes.begin() + header_size, bytes.end());
    return array;
}

}  // namespace mn::io
