#pragma once
// The start-up check of the cooperative-matrix path: drivers can advertise cooperative matrices and
// compute them wrong, so before the first compile that would use them on a device, a small training
// product runs on them and is checked against float64.
#include "meganeura/session.hpp"
#include "schedule/schedule.hpp"

namespace mn::compiler {

// Whether the device's cooperative-matrix kernels, on the extension `path` (which the check's own
// compile chooses too), computed the check's products correctly; run once per device and path
// (rt::Context::cooperative_matrices_work), with one printed warning when they did not.
bool cooperative_matrices_work(const Device& device, sched::CoopPath path);
// The check's program (coop_self_test.cpp says what it covers).
Graph cooperative_check_graph();

}  // namespace mn::compiler
