// safetensors reading and writing.
//
// Reading trusts nothing: a checkpoint may be truncated by a crashed download or copy, or written
// by another tool with a bug, and the user should learn which tensor and which byte is wrong
// rather than train on garbage. The header is parsed and checked completely (dtype known, shape
// non-negative, byte range consistent with shape and dtype, inside the data section, no two
// tensors overlapping) before any tensor data is read; then each tensor is read straight into
// its own buffer, so a multi-gigabyte checkpoint is never held twice. Gaps between tensors and
// unaligned offsets are accepted: we copy, so they cost nothing, and other tools read such files.
//
// Writing never destroys the previous checkpoint: write_file_atomically (atomic_file.hpp) writes a
// temporary file in the same directory (rename is only atomic within one filesystem), syncs it and
// renames it over the target. On any failure the temporary file is removed and the old file is
// untouched. The header is padded with spaces to a multiple of 8 bytes and tensors are laid out by element size (largest first), then
// by name, contiguously, so every tensor starts naturally aligned for memory mapping, as the
// reference implementation does. The header's JSON is parsed with a depth limit (json.hpp).
#include "io/safetensors.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include "meganeura/error.hpp"

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace mn::io {
namespace {

using json = nlohmann::json;
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

size_t dtype_size(const std::string& dtype) {
    static const std::map<std::string, size_t> sizes = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
        {"I8", 1},  {"U64", 8}, {"U32", 4}, {"U16", 2},  {"U8", 1},  {"BOOL", 1}};
    auto found = sizes.find(dtype);
    return found == sizes.end() ? 0 : found->second;
}

std::string shape_string(const std::vector<int64_t>& shape) {
    std::string text = "[";
    for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
    return text + "]";
}

// numel * dtype size, or an error when the shape is negative or the product overflows.
uint64_t byte_size(const std::vector<int64_t>& shape, size_t element_size, const std::string& context) {
    uint64_t bytes = element_size;
    for (int64_t dim : shape)
        if (dim < 0 || __builtin_mul_overflow(bytes, uint64_t(dim), &bytes))
            throw Error(context + ": invalid shape " + shape_string(shape));
    return bytes;
}

using FilePtr = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

struct Entry {
    std::string name, dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;
};

struct Header {
    std::vector<Entry> entries;
    std::map<std::string, std::string> metadata;
    uint64_t data_start = 0;
};

bool is_count(const json& value) {
    return value.is_number_unsigned() || (value.is_number_integer() && value.get<int64_t>() >= 0);
}

Entry parse_entry(const std::string& name, const json& value, uint64_t data_size, const std::string& path) {
    const std::string where = path + ": tensor '" + name + "'";
    if (!value.is_object()) throw Error(where + ": header entry is not a JSON object");
    for (const char* field : {"dtype", "shape", "data_offsets"})
        if (!value.contains(field)) throw Error(where + " has no \"" + field + "\" field");

    Entry entry{name, "", {}, 0, 0};
    const json& dtype = value["dtype"];
    if (!dtype.is_string() || dtype_size(dtype.get<std::string>()) == 0)
        throw Error(where + " has unsupported dtype " + dtype.dump() +
                    " (known: F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL)");
    entry.dtype = dtype.get<std::string>();

    const json& shape = value["shape"];
    if (!shape.is_array() || !std::all_of(shape.begin(), shape.end(), is_count))
        throw Error(where + " has shape " + shape.dump() + ", expected a list of non-negative integers");
    for (const json& dim : shape) entry.shape.push_back(dim.get<int64_t>());

    const json& offsets = value["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !is_count(offsets[0]) || !is_count(offsets[1]))
        throw Error(where + " has data_offsets " + offsets.dump() + ", expected [begin, end]");
    entry.begin = offsets[0].get<uint64_t>();
    entry.end = offsets[1].get<uint64_t>();
    if (entry.begin > entry.end)
        throw Error(where + " has data_offsets [" + std::to_string(entry.begin) + ", " +
                    std::to_string(entry.end) + "] with begin after end");
    const uint64_t expected = byte_size(entry.shape, dtype_size(entry.dtype), where);
    if (entry.end - entry.begin != expected)
        throw Error(where + " has shape " + shape_string(entry.shape) + " of " + entry.dtype + " (" +
                    std::to_string(expected) + " bytes) but its data_offsets span " +
                    std::to_string(entry.end - entry.begin) + " bytes");
    if (entry.end > data_size)
        throw Error(where + " needs bytes " + std::to_string(entry.begin) + ".." + std::to_string(entry.end) +
                    " of the data section but the data section ends at byte " + std::to_string(data_size) +
                    " (the file is truncated or the header is wrong)");
    return entry;
}

Header read_header(const std::string& path, std::FILE* file) {
    if (fseeko(file, 0, SEEK_END) != 0) throw Error(path + ": cannot seek: " + std::strerror(errno));
    const uint64_t file_size = uint64_t(ftello(file));
    std::rewind(file);
    uint8_t length_bytes[8];
    if (file_size < 8 || std::fread(length_bytes, 1, 8, file) != 8)
        throw Error(path + ": file is " + std::to_string(file_size) +
                    " bytes, too short for a safetensors header (needs at least 8)");
    uint64_t header_size = 0;
    for (int i = 7; i >= 0; --i) header_size = header_size << 8 | length_bytes[i];
    if (header_size > kMaxHeaderBytes)
        throw Error(path + ": header length " + std::to_string(header_size) +
                    " exceeds the 100 MB limit (not a safetensors file?)");
    if (header_size > file_size - 8)
        throw Error(path + ": header needs bytes 8.." + std::to_string(8 + header_size) +
                    " but the file ends at byte " + std::to_string(file_size) + " (truncated?)");

    std::string text(header_size, '\0');
    if (std::fread(text.data(), 1, header_size, file) != header_size)
        throw Error(path + ": cannot read the header: " + std::strerror(errno));
    const json parsed = parse_json(text, path + ": header");
    if (!parsed.is_object())
        throw Error(path + ": header is " + parsed.type_name() + ", expected a JSON object");

    Header header;
    header.data_start = 8 + header_size;
    for (const auto& [name, value] : parsed.items()) {
        if (name != "__metadata__") {
            header.entries.push_back(parse_entry(name, value, file_size - header.data_start, path));
            continue;
        }
        if (!value.is_object()) throw Error(path + ": __metadata__ is not a JSON object");
        for (const auto& [key, item] : value.items())
            header.metadata[key] = item.is_string() ? item.get<std::string>() : item.dump();
    }
    std::vector<const Entry*> by_offset;
    for (const Entry& entry : header.entries) by_offset.push_back(&entry);
    std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
        const Entry &before = *by_offset[i - 1], &after = *by_offset[i];
        if (after.begin < before.end)
            throw Error(path + ": tensors '" + before.name + "' (bytes " + std::to_string(before.begin) +
                        ".." + std::to_string(before.end) + ") and '" + after.name + "' (bytes " +
                        std::to_string(after.begin) + ".." + std::to_string(after.end) + ") overlap");
    }
    return header;
}

FilePtr open_for_reading(const std::string& path) {
    FilePtr file(std::fopen(path.c_str(), "rb"), std::fclose);
    if (!file) throw Error("cannot open " + path + ": " + std::strerror(errno));
    struct stat st;
    if (fstat(fileno(file.get()), &st) != 0 || !S_ISREG(st.st_mode)) throw Error(path + ": not a regular file");
    return file;
}

float half_to_float(uint16_t half) {
    const uint32_t sign = uint32_t(half & 0x8000u) << 16, exponent = (half >> 10) & 0x1f,
                   mantissa = half & 0x3ff;
    if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
        const float magnitude = std::ldexp(float(mantissa), -24);
        return sign ? -magnitude : magnitude;
    }
    if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | mantissa << 13);  // inf, nan
    return std::bit_cast<float>(sign | (exponent + 112) << 23 | mantissa << 13);
}

template <typename T>
std::vector<T> elements(const TensorData& tensor) {
    std::vector<T> values(tensor.bytes.size() / sizeof(T));
    std::memcpy(values.data(), tensor.bytes.data(), values.size() * sizeof(T));
    return values;
}

void check_consistent(const TensorData& tensor, const std::string& what) {
    const size_t size = dtype_size(tensor.dtype);
    if (size == 0) throw Error(what + ": unknown dtype \"" + tensor.dtype + "\"");
    if (byte_size(tensor.shape, size, what) != tensor.bytes.size())
        throw Error(what + ": shape " + shape_string(tensor.shape) + " of " + tensor.dtype + " needs " +
                    std::to_string(byte_size(tensor.shape, size, what)) + " bytes but has " +
                    std::to_string(tensor.bytes.size()));
}

template <typename T>
TensorData from_values(const char* dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
    TensorData tensor{dtype, std::move(shape), std::vector<uint8_t>(values.size() * sizeof(T))};
    if (uint64_t(tensor.numel()) != values.size())
        throw Error(std::string(dtype) + " tensor of shape " + shape_string(tensor.shape) + " has " +
                    std::to_string(tensor.numel()) + " elements but " + std::to_string(values.size()) +
                    " values were given");
    std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
    return tensor;
}

}  // namespace

int64_t TensorData::numel() const {
    int64_t count = 1;
    for (int64_t dim : shape) count *= dim;
    return count;
}

TensorData TensorData::from_f32(std::vector<int64_t> shape, const std::vector<float>& values) {
    return from_values("F32", std::move(shape), values);
}

TensorData TensorData::from_i32(std::vector<int64_t> shape, const std::vector<int32_t>& values) {
    return from_values("I32", std::move(shape), values);
}

void TensorData::check_f32(const std::string& what) const {
    check_consistent(*this, what);
    if (dtype != "F32" && dtype != "F16" && dtype != "BF16")
        throw Error(what + ": dtype " + dtype + " cannot be read as float32 (expected F32, F16 or BF16)");
}

std::vector<float> TensorData::to_f32(const std::string& what) const {
    check_f32(what);
    if (dtype == "F32") return elements<float>(*this);
    std::vector<float> values;
    if (dtype == "F16")
        for (uint16_t half : elements<uint16_t>(*this)) values.push_back(half_to_float(half));
    else
        for (uint16_t bf16 : elements<uint16_t>(*this))
            values.push_back(std::bit_cast<float>(uint32_t(bf16) << 16));
    return values;
}

std::vector<int32_t> TensorData::to_i32(const std::string& what) const {
    check_consistent(*this, what);
    if (dtype == "I32") return elements<int32_t>(*this);
    if (dtype != "I64")
        throw Error(what + ": dtype " + dtype + " cannot be read as int32 (expected I32 or I64)");
    std::vector<int32_t> values;
    for (int64_t value : elements<int64_t>(*this)) {
        if (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max())
            throw Error(what + ": I64 value " + std::to_string(value) + " at index " +
                        std::to_string(values.size()) + " does not fit in int32");
        values.push_back(int32_t(value));
    }
    return values;
}

TensorMap read_safetensors(const std::string& path) {
    FilePtr file = open_for_reading(path);
    const Header header = read_header(path, file.get());
    TensorMap tensors;
    for (const Entry& entry : header.entries) {
        TensorData& tensor = tensors[entry.name];
        tensor.dtype = entry.dtype;
        tensor.shape = entry.shape;
        tensor.bytes.resize(entry.end - entry.begin);
        if (fseeko(file.get(), off_t(header.data_start + entry.begin), SEEK_SET) != 0 ||
            std::fread(tensor.bytes.data(), 1, tensor.bytes.size(), file.get()) != tensor.bytes.size())
            throw Error(path + ": tensor '" + entry.name + "': cannot read bytes " +
                        std::to_string(entry.begin) + ".." + std::to_string(entry.end) +
                        " of the data section (file changed while reading?)");
    }
    return tensors;
}

std::map<std::string, std::string> read_safetensors_metadata(const std::string& path) {
    FilePtr file = open_for_reading(path);
    return read_header(path, file.get()).metadata;
}

void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata) {
    std::vector<std::pair<const std::string*, const TensorData*>> order;
    for (const auto& [name, tensor] : tensors) {
        if (name == "__metadata__") throw Error(path + ": a tensor cannot be named __metadata__");
        check_consistent(tensor, path + ": tensor '" + name + "'");
        order.emplace_back(&name, &tensor);
    }
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
        return dtype_size(a.second->dtype) > dtype_size(b.second->dtype);
    });
    json header = json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    uint64_t offset = 0;
    for (const auto& [name, tensor] : order) {
        header[*name] = {{"dtype", tensor->dtype},
                         {"shape", tensor->shape},
                         {"data_offsets", {offset, offset + tensor->bytes.size()}}};
        offset += tensor->bytes.size();
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    uint8_t length_bytes[8];
    for (int i = 0; i < 8; ++i) length_bytes[i] = uint8_t(uint64_t(text.size()) >> (8 * i));

    std::vector<std::string_view> pieces = {{reinterpret_cast<const char*>(length_bytes), 8}, text};
    for (const auto& entry : order) {
        const std::vector<uint8_t>& bytes = entry.second->bytes;
        pieces.emplace_back(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    }
    write_file_atomically(path, pieces);
}

}  // namespace mn::io
