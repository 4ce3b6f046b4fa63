#pragma once
// MEGANEURA_CHECK: after each run, every node a dispatch wrote is recomputed by the float64 reference
// interpreter from the values the device had for its inputs, so that each kernel is judged on its
// own and not on the rounding it inherited; the first node (in dispatch order) whose values diverge
// is named in an mn::Error. A debugging mode: the session is compiled without memory planning so
// that every intermediate value survives the run, and each run reads them all back.
//
//   MEGANEURA_CHECK=1       relative L2 limit 1e-3 (strict) or 3e-2 (fast: f16 products)
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

// After a run: throws naming the first node whose device values are NaN where the reference's are
// not, or whose L2 error exceeds `limit` relative to the larger of the reference's L2 and its
// inputs' size (see divergence in check.cpp).
void check_against_reference(const Session::Impl& impl, const Graph& graph, const ref::Feeds& feeds, double limit);

}  // namespace mn::compiler
