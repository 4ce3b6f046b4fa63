#pragma once
// The reference's attention ops (Attention, AttentionLse, AttentionGradQ/K/V), in float64.
#include "reference/reference.hpp"

namespace mn::ref {

Value attention_op(const Node& node, const std::vector<const Value*>& in);

}  // namespace mn::ref
