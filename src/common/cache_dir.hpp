#pragma once
// The on-disk cache folder shared by the SPIR-V cache (codegen/) and the pipeline cache
// (runtime/): $MEGANEURA_CACHE_DIR, else $XDG_CACHE_HOME/meganeura, else ~/.cache/meganeura.
// An empty MEGANEURA_CACHE_DIR disables disk caching (the result is then empty).
#include <cstdlib>
#include <string>

namespace mn {

inline std::string cache_folder() {
    if (const char* dir = std::getenv("MEGANEURA_CACHE_DIR")) return dir;
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/meganeura";
    if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/meganeura";
    return "";
}

}  // namespace mn
