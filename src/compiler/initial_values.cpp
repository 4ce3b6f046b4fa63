#include "compiler/initial_values.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <optional>

#include "common/half.hpp"

namespace mn::compiler {

namespace {

uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// Calls value(i) for every element i in [begin, end) and stores it at dst + (i - begin) elements in
// `dtype`; the dtype switch is outside the loop.
template <typename F>
void store_all(DType dtype, uint8_t* dst, int64_t begin, int64_t end, F value) {
    switch (dtype) {
        case DType::F32:
            for (int64_t i = begin; i < end; ++i) {
                const float f = static_cast<float>(value(i));
                std::memcpy(dst + 4 * (i - begin), &f, 4);
            }
            return;
        case DType::F16:
            for (int64_t i = begin; i < end; ++i) {
                const uint16_t h = float_to_half(static_cast<float>(value(i)));
                std::memcpy(dst + 2 * (i - begin), &h, 2);
            }
            return;
        case DType::I32:
            for (int64_t i = begin; i < end; ++i) {
                const int32_t n = static_cast<int32_t>(value(i));
                std::memcpy(dst + 4 * (i - begin), &n, 4);
            }
            return;
    }
}

// The value every element of n holds, where there is one.
std::optional<double> one_value(const Node& n) {
    if (n.op == Op::Constant) return n.data.size() == 1 ? std::optional<double>(n.data[0]) : std::nullopt;
    if (n.init.kind == Init::Zeros) return 0.0;
    if (n.init.kind == Init::Ones) return 1.0;
    return std::nullopt;
}

}  // namespace

DrawnValues drawn_values(const Node& n, uint64_t seed) {
    const Init& init = n.init;
    const uint64_t key = splitmix64(seed ^ std::hash<std::string>{}(n.name));
    if (init.kind == Init::Uniform) return {key, false, init.a, (init.b - init.a) / 9007199254740992.0};  // 53-bit fractions
    return {key, true, static_cast<float>(init.a), static_cast<float>(init.b)};
}

float draw(const DrawnValues& d, uint64_t i) {
    if (!d.normal) return static_cast<float>(d.a + d.b * static_cast<double>(splitmix64(d.key + i) >> 11));
    int64_t sum = 0;  // 12 uniform 16-bit integers
    for (uint64_t k = 0; k < 3; ++k) {
        const uint64_t h = splitmix64(d.key + 3 * i + k);
        for (int shift = 0; shift < 64; shift += 16) sum += static_cast<int64_t>((h >> shift) & 0xFFFF);
    }
    const float z = static_cast<float>(sum - 6 * 65535) * 0x1p-16f;  // exact: |sum - 393210| < 2^19
    return static_cast<float>(d.a) + static_cast<float>(d.b) * z;
}

void write_initial_values(const Node& n, uint64_t seed, int64_t begin, int64_t end, uint8_t* dst) {
    const Init& init = n.init;
    switch (init.kind) {
        case Init::Zeros:
            std::memset(dst, 0, static_cast<size_t>(end - begin) * dtype_size(n.dtype));
            return;
        case Init::Ones:
            store_all(n.dtype, dst, begin, end, [](int64_t) { return 1.0; });
            return;
        case Init::Uniform:
        case Init::Normal: {
            const DrawnValues d = drawn_values(n, seed);
            store_all(n.dtype, dst, begin, end, [&](int64_t i) { return draw(d, static_cast<uint64_t>(i)); });
            return;
        }
    }
}

void write_constant(const Node& n, int64_t begin, int64_t end, uint8_t* dst) {
    store_all(n.dtype, dst, begin, end,
              [&](int64_t i) { return n.data.size() == 1 ? n.data[0] : n.data[static_cast<size_t>(i)]; });
}

std::optional<uint32_t> fill_word(const Node& n) {
    const std::optional<double> value = one_value(n);
    // Where the bytes end inside a word (an odd count of f16), the word's rest is the zero padding.
    if (!value || (*value != 0 && static_cast<size_t>(numel(n.shape)) * dtype_size(n.dtype) % 4)) return std::nullopt;
    switch (n.dtype) {  // each element encoded as store_all encodes it
        case DType::F32: return std::bit_cast<uint32_t>(static_cast<float>(*value));
        case DType::F16: {
            const uint32_t h = float_to_half(static_cast<float>(*value));
            return h | h << 16;
        }
        case DType::I32: return static_cast<uint32_t>(static_cast<int32_t>(*value));
    }
    return std::nullopt;
}

}  // namespace mn::compiler
