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
