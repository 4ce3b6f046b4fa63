#pragma once
// MEGANEURA_DUMP=<pass>: the compiler's state after one pass, printed to stderr.
//
//   build   the graph (after autodiff and the optimizer's updates), one node per line
//   lower   the schedule: every step's kernel, grid and bindings (value, node, shape, read/write)
//   order   the same after ordering by level, with each step's level
//   plan    every value's storage, bytes, lifetime in levels and arena offset
#include <string>
#include <vector>

#include "memory/planner.hpp"
#include "schedule/schedule.hpp"

namespace mn::compiler {

// The pass MEGANEURA_DUMP names, or "" when unset; throws listing the passes for an unknown one.
std::string dump_pass();

std::string dump_schedule(const sched::Schedule& s, const Graph& graph, bool with_levels);
// `arena_values[i]` was planned at plan.offsets[i]; first and last are each value's lifetime in levels.
std::string dump_plan(const sched::Schedule& s, const std::vector<int64_t>& first, const std::vector<int64_t>& last,
                      const std::vector<int32_t>& arena_values, const memory::Plan& plan);

}  // namespace mn::compiler
