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
//
// Or, in place of the greedy identities and common subexpressions, a bounded equality saturation over the same
// rules and a few that only it uses well (saturate.cpp; CompileOptions::saturate, MEGANEURA_OPTIMIZE=saturate).
#include <cstddef>
#include <string>

#include "meganeura/graph.hpp"

namespace mn::optimize {

// The equality saturation stops at the first limit it reaches; its graph is correct wherever it stops.
struct SaturationBudget {
    size_t nodes = 1 << 19;  // e-nodes (SmolLM2-135M's training step, 10,019 nodes, saturates at 11,658)
    double ms = 1000;        // wall time of the rewriting rounds
};

struct SaturationReport {
    size_t enodes = 0, classes = 0, rounds = 0;
    std::string stop;  // "saturated", "node budget" or "time budget"
    double ms = 0;     // the rounds and the extraction
};

struct Stats {
    size_t dead = 0, identities = 0, merged = 0;  // nodes removed by each rewrite
    size_t siblings = 0;  // products that became a slice of a sibling's
    SaturationReport saturation;  // when the equality saturation ran (rounds > 0)
};

struct Options {
    bool saturate = false;  // the equality saturation instead of the greedy identities and merges
    SaturationBudget budget;
};

Graph optimize(const Graph& g, Stats* stats = nullptr);
Graph optimize(const Graph& g, const Options& options, Stats* stats = nullptr);

// optimize's passes, each adding what it removed to `stats`. In order: the identities and common
// subexpressions (simplify or saturate, which merge the siblings' inputs), dead code (what the identities left
// unread), the horizontal fusion, and dead code again (the products the fusion replaced).
Graph simplify(const Graph& g, Stats& stats);
// In simplify's place: the equality saturation over its rules and more (saturate.cpp).
Graph saturate(const Graph& g, const SaturationBudget& budget, Stats& stats);
Graph fuse_sibling_products(const Graph& g, Stats& stats);
Graph eliminate_dead_code(const Graph& g, Stats& stats);

}  // namespace mn::optimize
