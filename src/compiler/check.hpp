#pragma once
// MEGANEURA_CHECK: after each run, every node a dispatch wrote (in place and through views too) is
// recomputed by the float64 reference interpreter from the values the device had for its inputs, so
// that each kernel is judged on its own and not on the rounding it inherited; the first node (in
// dispatch order) whose values diverge is named in an mn::Error. The program copies each written
// binding aside right after its dispatch, so a write is judged by what it wrote even where a later
// one overwrote those bytes. When every node passes, the whole graph is evaluated in float64 once
// more and each decision (greater, equal, sign) that the device took on the other side of its
// threshold is reported on stderr: a ReLU whose input float32 rounding moved across zero changes a
// gradient with no kernel at fault. A debugging mode: the session is compiled without memory
// planning so that every intermediate value survives the run, and each run reads them all back.
//
//   MEGANEURA_CHECK=1       limit 1e-3 (strict) or 3e-2 (fast: f16 products)
//   MEGANEURA_CHECK=<limit> another limit, e.g. 1e-5
#include <memory>

#include "compiler/session_impl.hpp"
#include "reference/reference.hpp"

namespace mn::compiler {

// The limit MEGANEURA_CHECK asks for, or 0 when it is not set (or "0").
double check_limit(Precision precision);

// Every input, parameter and state value the next run will read: inputs from their staging
// memory, the rest from the device.
ref::Feeds feeds_for_check(const Session::Impl& impl, const Graph& graph);

// How far a node's values `got` are from the reference's evaluation of the node on `inputs`:
//  - relative_l2: the L2 error relative to the larger of the result's L2 and what it would be were
//    every element as large as the largest input (a sum that cancels to ~0 keeps its terms' rounding);
//  - worst_element (sums of products: add, mul, matmul, convolutions, reductions, data movement):
//    the largest element error beyond 16 units of roundoff of the sum of its terms' magnitudes,
//    relative to the result's RMS, so that one wrong element among many is not averaged away.
// Both are infinite when `got` has a NaN that the reference does not.
struct NodeError {
    double relative_l2 = 0, worst_element = 0;
    size_t worst_at = 0;
};
NodeError node_error(const Node& n, const std::vector<double>& got, const std::vector<const ref::Value*>& inputs,
                     const ref::Feeds& feeds, double unit_roundoff);

// After a run: throws naming the first node whose error (node_error) exceeds `limit`, then reports
// the decisions that differ from the float64 run of the whole graph.
void check_against_reference(const Session::Impl& impl, const Graph& graph, const ref::Feeds& feeds, double limit);

}  // namespace mn::compiler
