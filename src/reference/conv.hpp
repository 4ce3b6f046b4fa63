#pragma once
// The reference's convolution and max-pool rules (reference.cpp dispatches to them).
#include "reference/reference.hpp"

namespace mn::ref {

// node is the Conv2d / Conv2dGradInput / Conv2dGradWeight node; a and b its two input values.
Value conv2d_family(const Node& node, const Value& a, const Value& b);
// node is MaxPool2d (x) or MaxPool2dGrad (x, gy; gy is null for the forward).
Value max_pool2d_family(const Node& node, const Value& x, const Value* gy);

}  // namespace mn::ref
