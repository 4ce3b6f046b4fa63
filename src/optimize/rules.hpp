#pragma once
// The identity rules that both of optimize/'s passes read: the greedy sweep (simplify, optimize.cpp) replaces a
// node by what a rule says it equals, and the equality saturation (saturate.cpp) adds that equality to its
// e-graph. A rule reads the node and what it knows of the inputs (their shapes, dtypes, whether one is a
// constant), so each pass asks it about its own representation.
#include <cstdint>

#include "meganeura/graph.hpp"

namespace mn::optimize {

// op(x, c) is x when c is a constant whose every element is `value` (and the result has x's shape and
// dtype, so that c broadcast nothing).
struct Identity {
    Op op;
    int constant;  // which operand is the constant
    double value;
};
inline constexpr Identity kIdentities[] = {
    {Op::Add, 1, 0}, {Op::Add, 0, 0}, {Op::Sub, 1, 0}, {Op::Mul, 1, 1}, {Op::Mul, 0, 1}, {Op::Div, 1, 1}, {Op::Pow, 1, 1},
};
// op(op(x)) is x.
inline constexpr Op kInvolutions[] = {Op::Neg};
// These ops are their input when the result has the input's shape and dtype (and, for a permute,
// the order is the identity; for a slice, every step is 1).
inline constexpr Op kNoOpWhenSameShape[] = {Op::Reshape, Op::Expand, Op::Cast, Op::Permute, Op::Slice};

inline bool is_leaf(Op op) { return op == Op::Input || op == Op::Parameter || op == Op::State; }
bool is_involution(Op op);
// Whether `c` is a constant whose every element is `value`.
bool all_equal(const Node& c, double value);
// Whether the node's data holds a NaN, which no key orders: the passes keep such a node as it is, as they
// keep the leaves, the outputs and the assignments.
bool has_nan(const Node& n);

// Whether `n` (one of kNoOpWhenSameShape) is its input, of shape `in` and dtype `in_dtype`.
bool changes_nothing(const Node& n, const Shape& in, DType in_dtype);
// A permute that keeps the order of its dims of size > 1 moves no element (a decode step's split of the
// heads at one token, [B, 1, H, D] -> [B, H, 1, D]): it is a reshape, a view that costs no kernel.
bool moves_no_element(const Node& n, const Shape& in);
// A sum, mean or max over axes of size 1 adds nothing and moves no element: a reshape. Autodiff writes one as
// the gradient of a broadcast over a batch of one (Whisper's positions, [1500, 384] added to [1, 1500, 384]): a
// reduction kernel of one element per output, 576,000 workgroups and 0.22 ms of the H200 each.
bool reduces_nothing(const Node& n, const Shape& in);
// `n` as the reshape that moves_no_element or reduces_nothing says it is.
void make_reshape(Node& n);

}  // namespace mn::optimize
