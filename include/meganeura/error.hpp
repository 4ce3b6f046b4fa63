#pragma once
#include <stdexcept>
#include <string>

namespace mn {

// Every failure the library reports: bad shapes, unknown names, Vulkan errors, corrupt files.
// The message says what was wrong and, where it can, what to do about it.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

}  // namespace mn
