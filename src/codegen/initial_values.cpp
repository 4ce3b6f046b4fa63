// The device's draws of Init::Uniform and Init::Normal into f32 parameters (compiler/initial_values.hpp defines the
// values; this is the same IEEE arithmetic, each operation `precise`: never fused).
#include <cstring>

#include "codegen/families.hpp"

namespace mn::codegen {

const uint32_t kInitialValuesPushBytes = 32;

KernelSource initial_values_kernel(const Launch& launch) {
    KernelSource k;
    k.label = "initial_values";
    k.iface.local_size = launch.local_size;
    k.iface.bindings = {{"out0", DType::F32, true}};
    std::string g = glsl_preamble(k.iface);
    g.insert(g.find('\n') + 1, "#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n");
    k.glsl = g + kFlatGroupId + R"(
// key: splitmix64(seed ^ hash(name)); a, b (f64 bits): lo and (hi - lo) / 2^53, or mean and std.
layout(push_constant) uniform Draw { uvec2 key; uvec2 a; uvec2 b; uint count; uint normal; } draw;

uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ul;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ul;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBul;
    return x ^ (x >> 31);
}

void main() {
    uint i = mn_group_id() * WG + gl_LocalInvocationID.x;
    if (i >= draw.count) return;
    uint64_t key = packUint2x32(draw.key);
    double a = packDouble2x32(draw.a), b = packDouble2x32(draw.b);
    if (draw.normal == 0u) {
        precise double v = a + b * double(splitmix64(key + uint64_t(i)) >> 11);
        out0.d[i] = float(v);
    } else {
        int sum = 0;
        for (uint k = 0u; k < 3u; ++k) {
            uint64_t h = splitmix64(key + 3ul * uint64_t(i) + uint64_t(k));
            for (uint shift = 0u; shift < 64u; shift += 16u) sum += int(uint(h >> shift) & 0xFFFFu);
        }
        float z = ldexp(float(sum - 6 * 65535), -16);
        precise float v = float(a) + float(b) * z;
        out0.d[i] = v;
    }
}
)";
    return k;
}

std::vector<uint8_t> initial_values_push(uint64_t key, bool normal, double a, double b, int64_t count) {
    const uint64_t ab[2] = {std::bit_cast<uint64_t>(a), std::bit_cast<uint64_t>(b)};
    const uint32_t words[8] = {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32), static_cast<uint32_t>(ab[0]),
                               static_cast<uint32_t>(ab[0] >> 32), static_cast<uint32_t>(ab[1]), static_cast<uint32_t>(ab[1] >> 32),
                               checked_u32(count, "parameter size"), normal ? 1u : 0u};
    std::vector<uint8_t> bytes(kInitialValuesPushBytes);
    std::memcpy(bytes.data(), words, sizeof words);
    return bytes;
}

}  // namespace mn::codegen
