#pragma once
// Parameter and state initialization, written straight into staging memory in the value's dtype.
//
// Random values come from a counter-based generator: element i of parameter `name` is a hash of
// (seed, name, i), so the values depend neither on declaration order nor on how the work is split
// across threads, and 135M parameters take milliseconds instead of the seconds a sequential
// std::mt19937 takes.
#include <cstdint>

#include "meganeura/graph.hpp"

namespace mn::compiler {

// Writes numel(n.shape) values of n.init (seeded by `seed` and n.name) at `dst`, encoded as n.dtype.
void write_initial_values(const Node& n, uint64_t seed, uint8_t* dst);

// Writes a Constant's values (n.data, broadcast when it holds one value) at `dst` as n.dtype.
void write_constant(const Node& n, uint8_t* dst);

}  // namespace mn::compiler
