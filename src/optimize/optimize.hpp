#pragma once
// optimize/: graph rewrites between autodiff and lowering, each result a new graph computing the same
// outputs (and the same assignments) with fewer nodes or fewer kernels:
//  - dead-code elimination: only what an output or an assignment needs (every leaf stays, by name);
//  - identities, written as the rule tables in optimize.cpp: x + 0, x * 1, x / 1, -(-x), data
//    movement or casts that change nothing, and permutes that move no element or reductions over axes of size 1
//    (reshapes);
//  - common-subexpression elimination by structure (op, inputs, attributes, shape, dtype), which also
//    merges equal constants and scalars;
//  - horizontal fusion of sibling products in a program that does not train (siblings.cpp): linear
//    layers that read the same input, as q, k and v do, become one product over their stacked weights.
// Forward and gradient nodes are never merged: the fast precision keeps gradient products in f32.
#include <cstddef>

#include "meganeura/graph.hpp"

namespace mn::optimize {

struct Stats {
    size_t dead = 0, identities = 0, merged = 0;  // nodes removed by each rewrite
    size_t siblings = 0;  // products that became a slice of a sibling's
};

Graph optimize(const Graph& g, Stats* stats = nullptr);

// optimize's passes, each adding what it removed to `stats`. In order: the identities and common
// subexpressions (simplify, which merges the siblings' inputs), dead code (what the identities left
// unread), the horizontal fusion, and dead code again (the products the fusion replaced).
Graph simplify(const Graph& g, Stats& stats);
Graph fuse_sibling_products(const Graph& g, Stats& stats);
Graph eliminate_dead_code(const Graph& g, Stats& stats);

}  // namespace mn::optimize
