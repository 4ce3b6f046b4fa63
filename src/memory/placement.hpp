#pragma once
// Where every value of a schedule lives. Pinned values (leaves and user-visible outputs) get bytes of
// their own, one after another; transient values share the arena, placed by plan_arena over their
// lifetimes counted in levels, so that bytes are reused only across a barrier. Views live in their
// root and have no placement of their own.
#include <cstdint>
#include <vector>

#include "memory/planner.hpp"
#include "schedule/schedule.hpp"

namespace mn::memory {

struct Placement {
    std::vector<int64_t> first, last;   // per value (roots): first and last level touching it; -1: none
    std::vector<bool> pinned;           // per value (roots): in the pinned buffer, else in the arena
    std::vector<uint64_t> offset;       // per value (roots): byte offset in its buffer
    std::vector<int32_t> arena_values;  // the arena's values, in the order of arena.offsets
    uint64_t pinned_bytes = 0;
    Plan arena;
};

// alias=false gives every transient value its own bytes (MEGANEURA_CHECK, the planner's tests).
Placement place_values(const sched::Schedule& s, uint64_t alignment, bool alias);

}  // namespace mn::memory
