#pragma once
// safetensors: an 8-byte little-endian header length, a JSON header
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the raw little-endian data. Reads validate everything; writes are atomic
// (temporary file, fsync, rename), so a crash mid-save leaves the previous file intact.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mn::io {

struct TensorData {
    std::string dtype;  // "F32", "F16", "BF16", "I32", "I64"
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;

    int64_t numel() const;
    static TensorData from_f32(std::vector<int64_t> shape, const std::vector<float>& values);
    static TensorData from_i32(std::vector<int64_t> shape, const std::vector<int32_t>& values);
    // Converting reads; throw mn::Error naming `what` when the dtype cannot convert
    // (to_f32 accepts F32/F16/BF16; to_i32 accepts I32/I64 with range check).
    std::vector<float> to_f32(const std::string& what = "tensor") const;
    void check_f32(const std::string& what = "tensor") const;  // throws what to_f32 would
    std::vector<int32_t> to_i32(const std::string& what = "tensor") const;
};

using TensorMap = std::map<std::string, TensorData>;

// Throws mn::Error naming the file, and the tensor and byte offset where it can, on a missing
// file, a truncated file, a bad header (not JSON, missing fields, unknown dtype, offsets out of
// range or overlapping, size != numel * dtype size). Gaps and unaligned offsets are accepted.
TensorMap read_safetensors(const std::string& path);
void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {});
// The metadata block of a file ("__metadata__"), empty when absent.
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);

}  // namespace mn::io
