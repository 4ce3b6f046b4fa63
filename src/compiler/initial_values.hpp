#pragma once
// Parameter and state initialization, written straight into staging memory in the value's dtype.
//
// Random values come from a counter-based generator: element i of parameter `name` is a hash of
// (seed, name, i), so the values depend neither on declaration order nor on how the work is split
// across threads, and 135M parameters take milliseconds instead of the seconds a sequential
// std::mt19937 takes.
#include <cstdint>
#include <optional>

#include "meganeura/graph.hpp"

namespace mn::compiler {

// The random values of Init::Uniform and Init::Normal, element i of a value from the hash of (its key, i): the same
// IEEE arithmetic on every device, so that the device's draws (codegen::initial_values_kernel, where the device has
// 64-bit integers and floats) are these bit for bit. Each operation below is one correctly rounded operation, none
// fused, then rounded to f32:
//   uniform(lo, hi):   lo + (hi - lo) / 2^53 * (splitmix64(key + i) >> 11), in f64 (as ever: 6df0223)
//   normal(mean, std): z = (the sum of the 12 16-bit words of splitmix64(key + 3i + k), k < 3, minus 6 * 65535)
//                      * 2^-16, exact, of mean 0 and variance 1 - 2^-32; mean + std * z in f32. Irwin-Hall's sum of
//                      12 uniforms: a normal within 6 deviations, where Box-Muller's libm calls (until 1d5125a)
//                      gave other bits on other devices.
struct DrawnValues {
    uint64_t key = 0;  // splitmix64(seed ^ hash(name))
    bool normal = false;
    double a = 0, b = 0;  // lo and (hi - lo) / 2^53, or mean and std (as f32)
};
DrawnValues drawn_values(const Node& n, uint64_t seed);  // n.init is Uniform or Normal
float draw(const DrawnValues& d, uint64_t i);

// Writes elements [begin, end) of n.init (seeded by `seed` and n.name) at `dst`, the bytes of element
// `begin`, encoded as n.dtype: pieces of one value written by different threads give the bytes of the
// whole value written at once.
void write_initial_values(const Node& n, uint64_t seed, int64_t begin, int64_t end, uint8_t* dst);

// Writes elements [begin, end) of a Constant's values (n.data, broadcast when it holds one value) at `dst`
// as n.dtype.
void write_constant(const Node& n, int64_t begin, int64_t end, uint8_t* dst);

// The 32-bit word whose repetition is the bytes of a constant, parameter or state (n) that holds one value
// everywhere (zeros, ones, a broadcast scalar), its buffer's range rounded up to 4 bytes with zeros:
// a device fill writes it without staging (SmolLM2's AdamW moments are 1 GB of zeros). nullopt otherwise.
std::optional<uint32_t> fill_word(const Node& n);

}  // namespace mn::compiler
