#pragma once
// GLSL compute shader -> SPIR-V, in memory, through glslang's C interface (linked statically).
// Results are cached in memory and on disk, keyed by a hash of the source, the options and the
// compiler version, so a second process compiles nothing it has compiled before.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mn::codegen {

using Spirv = std::shared_ptr<const std::vector<uint32_t>>;

struct ShaderOptions {
    uint32_t vulkan_minor = 2;  // target Vulkan 1.<minor> (1.2 -> SPIR-V 1.5, 1.3 -> SPIR-V 1.6)
    bool optimize = false;      // run spirv-opt -O (drivers optimize anyway)
    // Rewrite the NV cooperative matrices glslang 12 emits as KHR ones (spirv_khr.hpp): for devices
    // with VK_KHR_cooperative_matrix only, or MEGANEURA_COOP=khr.
    bool coop_khr = false;
};

// Compiles one shader. Throws mn::Error whose message has glslang's log followed by the whole
// source with line numbers.
Spirv compile_glsl(const std::string& source, const ShaderOptions& options = {});

// Compiles independent shaders in parallel (one thread per core); same order as `sources`.
std::vector<Spirv> compile_glsl_parallel(const std::vector<std::string>& sources,
                                         const ShaderOptions& options = {});

struct ShaderCacheStats {
    uint64_t memory_hits = 0, disk_hits = 0, compiled = 0;
};
ShaderCacheStats shader_cache_stats();
// Forgets the in-memory cache (the disk cache stays), so tests can observe a disk hit.
void clear_shader_memory_cache();

// The on-disk cache folder: $MEGANEURA_CACHE_DIR, else $XDG_CACHE_HOME/meganeura, else
// ~/.cache/meganeura. Setting MEGANEURA_CACHE_DIR to an empty string disables the disk cache.
std::string cache_dir();

}  // namespace mn::codegen
