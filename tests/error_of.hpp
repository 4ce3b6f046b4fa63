#pragma once
// The message of the mn::Error a call throws, or "" when it throws none: error tests compare it.
#include <string>

#include "meganeura/error.hpp"

namespace mn::test {

template <class Fn>
std::string error_of(Fn&& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace mn::test
