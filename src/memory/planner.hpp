#pragma once
// memory/: the static arena planner. Every transient value lives from the first step that touches
// it to the last; two values whose lifetimes do not overlap may share bytes. Values are placed
// largest first at the lowest aligned offset that collides with no placed value alive at the same
// time (best fit over lifetimes). Ties break by index, so plans are deterministic.
#include <cstdint>
#include <vector>

namespace mn::memory {

struct Request {
    uint64_t bytes = 0;
    int64_t first = 0, last = 0;  // inclusive step range
};

struct Plan {
    std::vector<uint64_t> offsets;  // one per request
    uint64_t physical_bytes = 0;    // arena size
    uint64_t logical_bytes = 0;     // sum of aligned request sizes
};

// alias=false gives every request its own bytes (the planner's control in tests).
Plan plan_arena(const std::vector<Request>& requests, uint64_t alignment, bool alias = true);

}  // namespace mn::memory
