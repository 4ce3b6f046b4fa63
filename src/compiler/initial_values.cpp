#include "compiler/initial_values.hpp"

#include <cmath>
#include <cstring>
#include <functional>

#include "common/half.hpp"

namespace mn::compiler {

namespace {

uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// Calls value(i) for every element and stores it at dst in `dtype`; the dtype switch is outside the loop.
template <typename F>
void store_all(DType dtype, uint8_t* dst, int64_t count, F value) {
    switch (dtype) {
        case DType::F32:
            for (int64_t i = 0; i < count; ++i) {
                const float f = static_cast<float>(value(i));
                std::memcpy(dst + 4 * i, &f, 4);
            }
            return;
        case DType::F16:
            for (int64_t i = 0; i < count; ++i) {
                const uint16_t h = float_to_half(static_cast<float>(value(i)));
                std::memcpy(dst + 2 * i, &h, 2);
            }
            return;
        case DType::I32:
            for (int64_t i = 0; i < count; ++i) {
                const int32_t n = static_cast<int32_t>(value(i));
                std::memcpy(dst + 4 * i, &n, 4);
            }
            return;
    }
}

}  // namespace

void write_initial_values(const Node& n, uint64_t seed, uint8_t* dst) {
    const int64_t count = numel(n.shape);
    const Init& init = n.init;
    const uint64_t key = splitmix64(seed ^ std::hash<std::string>{}(n.name));
    switch (init.kind) {
        case Init::Zeros:
            std::memset(dst, 0, static_cast<size_t>(count) * dtype_size(n.dtype));
            return;
        case Init::Ones:
            store_all(n.dtype, dst, count, [](int64_t) { return 1.0; });
            return;
        case Init::Uniform: {
            const double scale = (init.b - init.a) / 9007199254740992.0;  // 53-bit fractions
            store_all(n.dtype, dst, count, [&](int64_t i) {
                return init.a + scale * static_cast<double>(splitmix64(key + static_cast<uint64_t>(i)) >> 11);
            });
            return;
        }
        case Init::Normal: {
            // Box-Muller: elements 2j and 2j+1 share one hash, one radius and one angle.
            int64_t pair = -1;
            float r = 0, angle = 0;
            store_all(n.dtype, dst, count, [&](int64_t i) {
                if (i / 2 != pair) {
                    pair = i / 2;
                    const uint64_t h = splitmix64(key + static_cast<uint64_t>(pair));
                    r = std::sqrt(-2.0f * std::log((static_cast<float>(h >> 40) + 0.5f) * (1.0f / 16777216.0f)));
                    angle = 6.28318530717958647f / 4294967296.0f * static_cast<float>(h & 0xFFFFFFFFull);
                }
                return init.a + init.b * r * (i % 2 ? std::sin(angle) : std::cos(angle));
            });
            return;
        }
    }
}

void write_constant(const Node& n, uint8_t* dst) {
    store_all(n.dtype, dst, numel(n.shape),
              [&](int64_t i) { return n.data.size() == 1 ? n.data[0] : n.data[static_cast<size_t>(i)]; });
}

}  // namespace mn::compiler
