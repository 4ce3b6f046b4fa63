#pragma once
// The MEGANEURA_* tuning variables' two shapes, read with one error message each: a word from a list, and a count
// (schedule/tuning.cpp's, and the compiler's MEGANEURA_OPTIMIZE above it).
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>

#include "meganeura/error.hpp"

namespace mn {

// The value of environment variable `name`, one of `allowed`; nullopt where it is unset or empty. Anything else is
// the user's mistake: "NAME must be a, b or c, got 'x'".
inline std::optional<std::string> env_choice(const char* name, std::initializer_list<const char*> allowed) {
    const char* e = std::getenv(name);
    if (!e || !*e) return std::nullopt;
    std::string list;
    size_t i = 0;
    for (const char* a : allowed) {
        if (e == std::string(a)) return std::string(e);
        list += (i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ") + std::string(a);
        ++i;
    }
    throw Error(std::string(name) + " must be " + list + ", got '" + e + "'");
}

// A count from 1 to `max` in environment variable `name`; 0 where it is unset or empty. Anything else is the user's
// mistake: "NAME must be <what>, got 'x'".
inline uint32_t env_count(const char* name, uint32_t max, const char* what) {
    const char* e = std::getenv(name);
    if (!e || !*e) return 0;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(e, &end, 10);
    if (*end || *e == '-' || v == 0 || v > max) throw Error(std::string(name) + " must be " + what + ", got '" + e + "'");
    return static_cast<uint32_t>(v);
}

}  // namespace mn
