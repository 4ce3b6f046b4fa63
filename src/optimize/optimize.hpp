#pragma once
// optimize/: graph rewrites between autodiff and lowering, each result a new graph computing the same
// outputs (and the same assignments) with fewer nodes:
//  - dead-code elimination: only what an output or an assignment needs (every leaf stays, by name);
//  - identities, written as the rule tables in optimize.cpp: x + 0, x * 1, x / 1, -(-x), and data
//    movement or casts that change nothing;
//  - common-subexpression elimination by structure (op, inputs, attributes, shape, dtype), which also
//    merges equal constants and scalars.
// Forward and gradient nodes are never merged: the fast precision keeps gradient products in f32.
#include <cstddef>

#include "meganeura/graph.hpp"

namespace mn::optimize {

struct Stats {
    size_t dead = 0, identities = 0, merged = 0;  // nodes removed by each rewrite
};

Graph optimize(const Graph& g, Stats* stats = nullptr);

}  // namespace mn::optimize
