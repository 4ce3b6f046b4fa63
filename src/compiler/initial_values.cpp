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

void store(DType dtype, uint8_t* dst, int64_t i, double v) {
    switch (dtype) {
        case DType::F32: { const float f = static_cast<float>(v); std::memcpy(dst + 4 * i, &f, 4); return; }
        case DType::F16: { const uint16_t h = float_to_half(static_cast<float>(v)); std::memcpy(dst + 2 * i, &h, 2); return; }
        case DType::I32: { const int32_t n = static_cast<int32_t>(v); std::memcpy(dst + 4 * i, &n, 4); return; }
    }
}

}  // namespace

void write_initial_values(const Node& n, uint64_t seed, uint8_t* dst) {
    const int64_t count = numel(n.shape);
    const Init& init = n.init;
    if (init.kind == Init::Zeros || init.kind == Init::Ones) {
        for (int64_t i = 0; i < count; ++i) store(n.dtype, dst, i, init.kind == Init::Ones ? 1.0 : 0.0);
        return;
    }
    const uint64_t key = splitmix64(seed ^ std::hash<std::string>{}(n.name));
    constexpr double k2to53 = 1.0 / 9007199254740992.0;
    constexpr float k2to32 = 1.0f / 4294967296.0f, kTwoPi = 6.28318530717958647f;
    for (int64_t i = 0; i < count; ++i) {
        if (init.kind == Init::Uniform) {
            const uint64_t h = splitmix64(key + static_cast<uint64_t>(i));
            store(n.dtype, dst, i, init.a + (init.b - init.a) * static_cast<double>(h >> 11) * k2to53);
            continue;
        }
        // Box-Muller: elements 2j and 2j+1 share a hash and take its cosine and sine branches.
        const uint64_t h = splitmix64(key + static_cast<uint64_t>(i / 2));
        const float u1 = (static_cast<float>(h >> 40) + 0.5f) * (1.0f / 16777216.0f);
        const float angle = kTwoPi * static_cast<float>(h & 0xFFFFFFFFull) * k2to32;
        const float r = std::sqrt(-2.0f * std::log(u1));
        store(n.dtype, dst, i, init.a + init.b * r * (i % 2 ? std::sin(angle) : std::cos(angle)));
    }
}

void write_constant(const Node& n, uint8_t* dst) {
    const int64_t count = numel(n.shape);
    for (int64_t i = 0; i < count; ++i) store(n.dtype, dst, i, n.data.size() == 1 ? n.data[0] : n.data[static_cast<size_t>(i)]);
}

}  // namespace mn::compiler
