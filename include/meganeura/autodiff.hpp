#pragma once
// Reverse-mode autodiff over the graph (torch.autograd.grad, for a static graph).
#include <vector>

#include "meganeura/graph.hpp"

namespace mn {

// Appends to `loss`'s graph the nodes that compute d loss / d x for every x in `wrt`, and returns
// them (each with x's shape and dtype). `loss` must be a float scalar (shape {}). Branches that
// reach none of `wrt` are never built; an x that `loss` does not depend on gets zeros.
// Throws mn::Error naming the op when an op on the path has no VJP rule.
std::vector<Tensor> grad(Tensor loss, const std::vector<Tensor>& wrt);

// Whether mn::grad differentiates op: ops.def's Vjp (its rule in autodiff.cpp, whose switch names every op).
bool has_vjp_rule(Op op);

}  // namespace mn
