#pragma once
// The start-up check of the cooperative-matrix path: drivers can advertise cooperative matrices and
// compute them wrong, so before the first compile that would use them on a device, a small training
// product runs on them and is checked against float64.
#include "meganeura/session.hpp"

namespace mn::compiler {

// Whether the device's cooperative-matrix kernels computed the check's products correctly; run once
// per device (rt::Context::cooperative_matrices_work), with one printed warning when they did not.
bool cooperative_matrices_work(const Device& device);

}  // namespace mn::compiler
