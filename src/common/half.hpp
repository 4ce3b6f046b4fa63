#pragma once
// IEEE binary16 <-> binary32 on the host (round to nearest even, subnormals, inf and NaN kept).
#include <cstdint>
#include <cstring>

namespace mn {

inline float half_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu, bits;
    if (exp == 0x1F) {
        bits = sign | 0x7F800000u | (mant << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else {  // subnormal: normalize
        exp = 113;
        while (!(mant & 0x400u)) mant <<= 1, --exp;
        bits = sign | (exp << 23) | ((mant & 0x3FFu) << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

inline uint16_t float_to_half(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    const uint32_t abs = x & 0x7FFFFFFFu;
    if (abs > 0x7F800000u) return sign | 0x7E00u;               // NaN
    if (abs >= 0x477FF000u) return sign | 0x7C00u;              // rounds to >= 65520: inf
    if (abs < 0x38800000u) {                                     // below 2^-14: subnormal or zero
        if (abs < 0x33000000u) return sign;                      // below 2^-25 rounds to zero
        const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
        const uint32_t shift = 126 - (abs >> 23);                // 14..24
        const uint32_t rounded = mant >> shift;
        const uint32_t rest = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        return sign | static_cast<uint16_t>(rounded + (rest > halfway || (rest == halfway && (rounded & 1u))));
    }
    const uint32_t rest = abs & 0x1FFFu;
    uint32_t h = ((abs >> 13) - (112u << 10));
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return sign | static_cast<uint16_t>(h);
}

}  // namespace mn
