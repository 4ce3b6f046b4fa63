// IDX reader. zlib's gzread passes plain files through unchanged, so one code path reads both
// "train-images-idx3-ubyte" and its ".gz". The format: two zero bytes, a type byte, a rank byte,
// `rank` big-endian uint32 dimensions, then the elements. Only unsigned bytes (0x08) occur in the
// datasets we load, so other types are rejected by name rather than half-supported.
//
// The header is read and checked first, and then exactly the data it announces: a file that
// inflates to far more than its header implies (a gzip bomb, or a wrong file) costs one extra byte
// of inflation to detect, never the whole stream, and a header announcing more than the file holds
// costs no more memory than the file's own bytes, since the data is read in pieces.
#include "io/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "meganeura/error.hpp"

namespace mn::io {
namespace {

using GzFile = std::unique_ptr<gzFile_s, int (*)(gzFile)>;

// Reads up to `count` bytes into `out` (appending); returns how many it got before the end.
size_t read_some(gzFile file, const std::string& path, uint8_t* out, size_t count) {
    size_t got = 0;
    while (got < count) {
        const unsigned piece = unsigned(std::min<size_t>(count - got, 1u << 20));
        const int n = gzread(file, out + got, piece);
        if (n < 0) {
            int code = 0;
            throw Error(path + ": cannot read: " + gzerror(file, &code));
        }
        if (n == 0) break;
        got += size_t(n);
    }
    return got;
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
    GzFile file(gzopen(path.c_str(), "rb"), gzclose);
    if (!file) throw Error("cannot open " + path + ": " + std::strerror(errno));
    uint8_t magic[4];
    if (read_some(file.get(), path, magic, 4) < 4 || magic[0] != 0 || magic[1] != 0)
        throw Error(path + ": not an IDX file (the first two bytes must be zero)");
    if (magic[2] != 0x08) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", magic[2]);
        throw Error(path + ": IDX element type " + hex + " (" + type_name(magic[2]) +
                    ") is not supported; only unsigned byte (0x08) is");
    }
    const size_t rank = magic[3], header_size = 4 + 4 * rank;
    std::vector<uint8_t> dims(4 * rank);
    if (const size_t got = read_some(file.get(), path, dims.data(), dims.size()); got < dims.size())
        throw Error(path + ": truncated: the header needs " + std::to_string(header_size) + " bytes, got " +
                    std::to_string(4 + got));

    IdxArray array;
    uint64_t count = 1;
    bool overflow = false, empty = false;
    for (size_t i = 0; i < rank; ++i) {
        const uint8_t* p = &dims[4 * i];
        const uint32_t dim = uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
        array.shape.push_back(dim);
        overflow |= __builtin_mul_overflow(count, dim, &count);
        empty |= dim == 0;
    }
    if (empty) count = 0;  // however large the other dimensions
    else if (overflow) throw Error(path + ": the header's dimensions multiply to more than 2^64 bytes");

    // Grows with what actually arrives, so a header that lies about the size allocates nothing extra.
    constexpr uint64_t kPiece = 1u << 20;
    uint64_t got = 0;
    while (got < count) {
        const size_t want = size_t(std::min(count - got, kPiece));
        array.data.resize(size_t(got) + want);
        const size_t n = read_some(file.get(), path, array.data.data() + got, want);
        got += n;
        if (n < want) break;
    }
    if (got < count)
        throw Error(path + ": truncated: expected " + std::to_string(count) + " data bytes, got " + std::to_string(got));
    array.data.resize(size_t(count));
    uint8_t extra;
    if (read_some(file.get(), path, &extra, 1) != 0)
        throw Error(path + ": trailing data: expected " + std::to_string(count) + " data bytes, the file holds more");
    return array;
}

}  // namespace mn::io
