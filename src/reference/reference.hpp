#pragma once
// reference/: a plain CPU interpreter of any graph in float64. It is the oracle for every op,
// every gradient and every model in the tests: obviously correct, never fast.
//
// Dtype semantics: F32 values are kept in full float64 (the reference is more exact than the GPU);
// F16 values are rounded to the nearest half after every op that produces them; I32 values are
// exact integers (integer division truncates toward zero; casts to I32 truncate toward zero).
#include <map>
#include <string>
#include <vector>

#include "meganeura/graph.hpp"

namespace mn::ref {

struct Value {
    Shape shape;
    std::vector<double> data;  // row-major, numel(shape) entries
};

using Feeds = std::map<std::string, Value>;  // inputs and parameters, by name

// Evaluates every node in order; result[i] is node i's value. Throws mn::Error when a feed is
// missing (naming it) or has the wrong shape.
std::vector<Value> evaluate(const Graph& graph, const Feeds& feeds);

// One node from the given values of its inputs (inputs[i] for node.inputs[i]); leaves read `feeds`.
Value evaluate_node(const Node& node, const std::vector<const Value*>& inputs, const Feeds& feeds);

// Rounds to the nearest IEEE half (ties to even), saturating to infinity like a conversion does.
double round_to_half(double x);

}  // namespace mn::ref
