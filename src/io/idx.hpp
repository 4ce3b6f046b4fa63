#pragma once
// IDX files (the MNIST / Fashion-MNIST format), plain or gzip-compressed.
#include <cstdint>
#include <string>
#include <vector>

namespace mn::io {

struct IdxArray {
    std::vector<int64_t> shape;  // e.g. {60000, 28, 28}
    std::vector<uint8_t> data;   // unsigned-byte IDX only (type 0x08)
};

// Throws mn::Error naming the file on a missing file, bad magic, wrong type or truncated data.
IdxArray read_idx(const std::string& path);

}  // namespace mn::io
