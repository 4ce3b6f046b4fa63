#pragma once
// The start-up check of the cooperative-matrix path: drivers can advertise cooperative matrices and
// compute them wrong, so with the first compile that would use them on a device (beside it: compile.cpp),
// a small training product runs on them and is checked against float64.
#include <optional>
#include <string>

#include "meganeura/session.hpp"
#include "schedule/schedule.hpp"

namespace mn::compiler {

// Whether the device's cooperative-matrix kernels, on the extension `path` (which the check's own
// compile chooses too), computed the check's products correctly; run once per device and path
// (rt::Context::cooperative_matrices_work), with one printed warning when they did not. The verdict is
// kept in the cache folder (common/cache_dir.hpp), by the driver's build, the path and the check's
// kernels: the next process on them reads it instead of checking again (30-45 ms of each warm compile
// in precision fast on the H200, bench/results/2026-12-04-h200-session26.md).
bool cooperative_matrices_work(const Device& device, sched::CoopPath path);
// The verdict where one is known without checking (this context's, or the cache folder's), recorded and,
// where it failed, said as cooperative_matrices_work says it; nullopt where the check has yet to run.
std::optional<bool> known_cooperative_verdict(const Device& device, sched::CoopPath path);
// A verdict file's: "" where the check passed, the problem where it failed, nullopt where there is none
// (or what is there is not a verdict); and its writing.
std::optional<std::string> read_check_verdict(const std::string& file);
void write_check_verdict(const std::string& file, const std::string& problem);
// The check's program (coop_self_test.cpp says what it covers).
Graph cooperative_check_graph();

}  // namespace mn::compiler
