#include "compiler/initial_values.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
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

void write_initial_values(const Node& n, uint64_t seed, int64_t begin, int64_t end, uint8_t* dst) {
    const Init& init = n.init;
    const uint64_t key = splitmix64(seed ^ std::hash<std::string>{}(n.name));
    switch (init.kind) {
        case Init::Zeros:
            std::memset(dst, 0, static_cast<size_t>(end - begin) * dtype_size(n.dtype));
            return;
        case Init::Ones:
            store_all(n.dtype, dst, begin, end, [](int64_t) { return 1.0; });
            return;
        case Init::Uniform: {
            const double scale = (init.b - init.a) / 9007199254740992.0;  // 53-bit fractions
            store_all(n.dtype, dst, begin, end, [&](int64_t i) {
                return init.a + scale * static_cast<double>(splitmix64(key + static_cast<uint64_t>(i)) >> 11);
            });
            return;
        }
        case Init::Normal: {
            // Box-Muller: elements 2j and 2j+1 share one hash, one radius and one angle (cos for 2j, sin
            // for 2j + 1). Pairs go a block at a time: each pair's libm calls wait for each other, but the
            // block's pairs are independent, so the core overlaps them (one thread writing SmolLM2's
            // embedding: 9.3 -> 7.0 ns an element on lavapipe's machine).
            constexpr int64_t kPairs = 64;
            float r[kPairs], cos[kPairs], sin[kPairs];
            for (int64_t first = begin / 2; 2 * first < end; first += kPairs) {
                const int64_t pairs = std::min(kPairs, (end + 1) / 2 - first);
                for (int64_t j = 0; j < pairs; ++j) {
                    const uint64_t h = splitmix64(key + static_cast<uint64_t>(first + j));
                    r[j] = std::sqrt(-2.0f * std::log((static_cast<float>(h >> 40) + 0.5f) * (1.0f / 16777216.0f)));
                    const float angle = 6.28318530717958647f / 4294967296.0f * static_cast<float>(h & 0xFFFFFFFFull);
                    cos[j] = std::cos(angle);
                    sin[j] = std::sin(angle);
                }
                const int64_t from = std::max(begin, 2 * first), to = std::min(end, 2 * (first + pairs));
                store_all(n.dtype, dst + (from - begin) * dtype_size(n.dtype), from, to, [&](int64_t i) {
                    const int64_t j = i / 2 - first;
                    return init.a + init.b * r[j] * (i % 2 ? sin[j] : cos[j]);
                });
            }
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
