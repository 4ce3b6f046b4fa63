#pragma once
// The reference's rules for the transformer ops (embedding, norms, RoPE, slice_scatter), kept
// beside reference.cpp's dispatch in the same plain style: one literal loop per definition.
#include "reference/reference.hpp"

namespace mn::ref {

Value embedding(const Node& node, const Value& ids, const Value& weight);
Value embedding_grad(const Node& node, const Value& ids, const Value& upstream);
// rms_norm / layer_norm / group_norm (third = bias) and their d / d x (third = upstream), by node.op
Value norm(const Node& node, const Value& x, const Value& weight, const Value* third);
Value rope(const Node& node, const Value& x, const Value& positions, const Value& inv_freq);
Value slice_scatter(const Node& node, const Value& x, const Value& src, const Value& start);

}  // namespace mn::ref
