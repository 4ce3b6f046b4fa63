#pragma once
// What a workload cannot avoid, counted from its graph: the FLOPs of its products and the bytes that
// must move between memory and the chip. bench/compare.py turns them into a floor time with a
// device's peaks, floor ms = max(FLOPs / peak, bytes / bandwidth); bench/README.md says how.
//
//   product FLOPs  matmuls 2·M·N·K; convolutions (and both their gradients) 2 · output elements of
//                  the forward · C/groups · KH · KW; attention 4 · visible (query, key) pairs · head
//                  dim forward, 8 · pairs · dim for its three gradients (dP, dS·K, dSᵀ·Q, Pᵀ·dO; the
//                  scores are not recomputed). Pointwise ops, reductions and norms count as bytes only.
//   bytes          weights read once, inputs read once, outputs written once (with backward: a
//                  gradient per parameter), and with backward every forward value a gradient node
//                  reads, written once and read once (views resolved to what they view); an AdamW
//                  step adds its gradients read, both moments read and written, and the weights written.
#include <cstdint>

#include <nlohmann/json.hpp>

#include "meganeura/graph.hpp"

namespace mn::bench {

struct Floor {
    double product_flops = 0;
    uint64_t weight_bytes = 0, input_bytes = 0, output_bytes = 0, activation_bytes = 0, optimizer_bytes = 0;
    uint64_t bytes() const { return weight_bytes + input_bytes + output_bytes + activation_bytes + optimizer_bytes; }
};

// `g` as a model builds it, gradients appended by mn::grad when `backward` (Node::gradient marks
// them); `adamw` adds an AdamW update of every parameter.
Floor count_floor(const Graph& g, bool backward, bool adamw);

nlohmann::json to_json(const Floor& f);

}  // namespace mn::bench
