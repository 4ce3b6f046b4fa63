#pragma once
// Barrier placement: a barrier goes before a command only when it touches bytes that a command
// since the last barrier wrote (read-after-write, write-after-write) or reads bytes it will write
// (write-after-read). Ranges are physical, so aliasing by the memory planner is covered.
#include <cstdint>
#include <vector>

#include "runtime/runtime.hpp"

namespace mn::compiler {

struct Access {
    const rt::Buffer* buffer;
    uint64_t begin, end;
    bool write;
};

class HazardTracker {
public:
    // True when `accesses` conflict with what happened since the last barrier; then the caller
    // records a barrier and this tracker forgets the past.
    bool needs_barrier(const std::vector<Access>& accesses) const {
        for (const Access& a : accesses) {
            for (const Access& p : pending_) {
                const bool overlap = a.buffer == p.buffer && a.begin < p.end && p.begin < a.end;
                if (overlap && (a.write || p.write)) return true;
            }
        }
        return false;
    }
    void barrier() { pending_.clear(); }
    void record(const std::vector<Access>& accesses) { pending_.insert(pending_.end(), accesses.begin(), accesses.end()); }

private:
    std::vector<Access> pending_;
};

}  // namespace mn::compiler
