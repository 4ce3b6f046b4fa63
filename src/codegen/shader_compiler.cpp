// GLSL -> SPIR-V through glslang's C interface, with a two-level cache.
//
// Why glslang in process: codegen emits one GLSL compute shader per kernel variant at session
// build time, so the compiler must ship inside the binary (Debian's shaderc cannot be linked
// statically; glslang's C interface can). glslang is initialized once per process; after that
// every shader/program object is independent, so compile_glsl_parallel simply runs one compile
// per worker thread, the longest sources first. glslang runs spirv-opt only for HLSL or size optimization, so
// `optimize` calls SPIRV-Tools' performance passes directly, keeping bindings and specialization
// constants (the runtime sets shapes through them).
//
// Why a cache: the first glslang compile costs ~100 ms and a model has dozens of variants, so a
// second process should compile nothing. The key is two FNV-1a-64 hashes (different offset
// bases) of a prefix naming the compiler version and the options (the KHR rewrite's version
// with it), followed by the source:
// 128 bits, so a silent collision is not a practical concern, and a glslang upgrade or a new
// target invalidates old entries by construction. Entries live in memory (mutex-protected map)
// and on disk as cache_dir()/spirv/<key>.spv. Disk writes go to a temporary file that is then
// renamed, so a reader sees either nothing or a whole file; a file that is still damaged (wrong
// size, wrong magic, e.g. after a crash before the data reached the disk) is ignored and
// recompiled. The disk cache is best effort: a read-only or missing cache folder never fails a
// compile.
#include "codegen/shader_compiler.hpp"
#include "codegen/spirv_khr.hpp"
#include "common/cache_dir.hpp"
#include "common/parallel.hpp"

#include <glslang/Include/glslang_c_interface.h>
#include <glslang/Public/resource_limits_c.h>
#include <glslang/build_info.h>
#include <spirv-tools/optimizer.hpp>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "meganeura/error.hpp"

namespace mn::codegen {
namespace {

constexpr uint32_t kSpirvMagic = 0x07230203;
constexpr size_t kSpirvHeaderWords = 5;

std::mutex cache_mutex;
std::unordered_map<std::string, Spirv> memory_cache;
ShaderCacheStats stats;

// ---- cache keys --------------------------------------------------------------------------------

uint64_t fnv1a64(const std::string& text, uint64_t basis) {
    uint64_t hash = basis;
    for (unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ull;
    return hash;
}

std::string cache_key(const std::string& source, const ShaderOptions& options) {
    std::ostringstream prefix;
    prefix << "glslang-" << GLSLANG_VERSION_MAJOR << '.' << GLSLANG_VERSION_MINOR << '.'
           << GLSLANG_VERSION_PATCH << GLSLANG_VERSION_FLAVOR << "|vulkan1." << options.vulkan_minor
           << (options.optimize ? "|O" : "|O0");
    if (options.coop_khr) prefix << "|khr" << kNvToKhrVersion;
    prefix << '\n';
    const std::string text = prefix.str() + source;
    std::ostringstream key;
    key << std::hex << std::setfill('0') << std::setw(16) << fnv1a64(text, 0xcbf29ce484222325ull)
        << std::setw(16) << fnv1a64(text, 0x84222325cbf29ce4ull) << "-vk1." << std::dec
        << options.vulkan_minor << (options.optimize ? "-O" : "") << (options.coop_khr ? "-khr" : "");
    return key.str();
}

// ---- disk cache --------------------------------------------------------------------------------

std::filesystem::path disk_path(const std::string& key) {
    const std::string dir = cache_dir();
    return dir.empty() ? std::filesystem::path() : std::filesystem::path(dir) / "spirv" / (key + ".spv");
}

bool looks_like_spirv(const std::vector<uint32_t>& words) {
    return words.size() >= kSpirvHeaderWords && words[0] == kSpirvMagic;
}

Spirv load_from_disk(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) return nullptr;
    const std::streamsize bytes = in.tellg();
    if (bytes <= 0 || bytes % 4 != 0) return nullptr;
    auto words = std::make_shared<std::vector<uint32_t>>(bytes / 4);
    in.seekg(0);
    if (!in.read(reinterpret_cast<char*>(words->data()), bytes) || !looks_like_spirv(*words)) return nullptr;
    return words;
}

void store_on_disk(const std::filesystem::path& path, const std::vector<uint32_t>& words) {
    static std::atomic<uint64_t> temp_counter{0};
    std::error_code error;
    std::filesystem::create_directories(path.parent_path(), error);
    std::filesystem::path temp = path;
    temp += ".tmp." + std::to_string(getpid()) + "." + std::to_string(temp_counter++);
    {
        std::ofstream out(temp, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(words.data()), std::streamsize(words.size() * 4));
        if (!out.flush()) {
            out.close();
            std::filesystem::remove(temp, error);
            return;
        }
    }
    std::filesystem::rename(temp, path, error);
    if (error) std::filesystem::remove(temp, error);
}

// ---- glslang -----------------------------------------------------------------------------------

struct Target {
    glslang_target_client_version_t client;
    glslang_target_language_version_t spirv;
    spv_target_env tools_env;
};

Target target_for(uint32_t vulkan_minor) {
    switch (vulkan_minor) {
        case 0: return {GLSLANG_TARGET_VULKAN_1_0, GLSLANG_TARGET_SPV_1_0, SPV_ENV_VULKAN_1_0};
        case 1: return {GLSLANG_TARGET_VULKAN_1_1, GLSLANG_TARGET_SPV_1_3, SPV_ENV_VULKAN_1_1};
        case 2: return {GLSLANG_TARGET_VULKAN_1_2, GLSLANG_TARGET_SPV_1_5, SPV_ENV_VULKAN_1_2};
        case 3: return {GLSLANG_TARGET_VULKAN_1_3, GLSLANG_TARGET_SPV_1_6, SPV_ENV_VULKAN_1_3};
    }
    throw Error("shader compiler: Vulkan 1." + std::to_string(vulkan_minor) +
                " is not a known target (glslang " + std::to_string(GLSLANG_VERSION_MAJOR) +
                " knows Vulkan 1.0 to 1.3)");
}

std::string numbered(const std::string& source) {
    const size_t lines = std::count(source.begin(), source.end(), '\n') + 1;
    const int width = std::max<int>(4, int(std::to_string(lines).size()));
    std::ostringstream out;
    std::istringstream in(source);
    std::string line;
    for (size_t number = 1; std::getline(in, line); ++number)
        out << std::setw(width) << number << "| " << line << '\n';
    return out.str();
}

[[noreturn]] void fail(const char* stage, const char* log, const char* debug_log, const std::string& source) {
    std::string message = std::string("GLSL compile failed at ") + stage + ":\n";
    for (const char* part : {log, debug_log})
        if (part && *part) message += std::string(part) + (part[std::strlen(part) - 1] == '\n' ? "" : "\n");
    throw Error(message + "--- source ---\n" + numbered(source));
}

std::vector<uint32_t> optimize(const std::vector<uint32_t>& spirv, spv_target_env env,
                               const std::string& source) {
    spvtools::Optimizer optimizer(env);
    std::string log;
    optimizer.SetMessageConsumer([&](spv_message_level_t, const char*, const spv_position_t&,
                                     const char* text) { log += std::string(text) + "\n"; });
    optimizer.RegisterPerformancePasses();
    spvtools::OptimizerOptions tool_options;
    tool_options.set_preserve_bindings(true);
    tool_options.set_preserve_spec_constants(true);
    std::vector<uint32_t> optimized;
    if (!optimizer.Run(spirv.data(), spirv.size(), &optimized, tool_options))
        fail("SPIR-V optimization", log.c_str(), nullptr, source);
    return optimized;
}

std::vector<uint32_t> run_glslang(const std::string& source, const ShaderOptions& options) {
    static std::once_flag initialized;
    std::call_once(initialized, [] { glslang_initialize_process(); });

    const Target target = target_for(options.vulkan_minor);
    const auto messages = glslang_messages_t(GLSLANG_MSG_DEFAULT_BIT | GLSLANG_MSG_SPV_RULES_BIT |
                                             GLSLANG_MSG_VULKAN_RULES_BIT);
    glslang_input_t input{};
    input.language = GLSLANG_SOURCE_GLSL;
    input.stage = GLSLANG_STAGE_COMPUTE;
    input.client = GLSLANG_CLIENT_VULKAN;
    input.client_version = target.client;
    input.target_language = GLSLANG_TARGET_SPV;
    input.target_language_version = target.spirv;
    input.code = source.c_str();
    input.default_version = 100;
    input.default_profile = GLSLANG_NO_PROFILE;
    input.messages = messages;
    input.resource = glslang_default_resource();

    std::unique_ptr<glslang_shader_t, void (*)(glslang_shader_t*)> shader(glslang_shader_create(&input),
                                                                          glslang_shader_delete);
    // The C interface parses the preprocessor's output, so preprocess must run first.
    if (!glslang_shader_preprocess(shader.get(), &input))
        fail("preprocessing", glslang_shader_get_info_log(shader.get()),
             glslang_shader_get_info_debug_log(shader.get()), source);
    if (!glslang_shader_parse(shader.get(), &input))
        fail("parsing", glslang_shader_get_info_log(shader.get()),
             glslang_shader_get_info_debug_log(shader.get()), source);

    std::unique_ptr<glslang_program_t, void (*)(glslang_program_t*)> program(glslang_program_create(),
                                                                             glslang_program_delete);
    glslang_program_add_shader(program.get(), shader.get());
    if (!glslang_program_link(program.get(), messages))
        fail("linking", glslang_program_get_info_log(program.get()),
             glslang_program_get_info_debug_log(program.get()), source);

    glslang_spv_options_t spv_options{};
    spv_options.disable_optimizer = true;
    spv_options.validate = true;  // spirv-val: a bad module fails here, not in the driver
    glslang_program_SPIRV_generate_with_options(program.get(), GLSLANG_STAGE_COMPUTE, &spv_options);
    const char* spirv_messages = glslang_program_SPIRV_get_messages(program.get());
    if (spirv_messages && std::strstr(spirv_messages, "error"))
        fail("SPIR-V generation", spirv_messages, nullptr, source);

    const unsigned* words = glslang_program_SPIRV_get_ptr(program.get());
    std::vector<uint32_t> spirv(words, words + glslang_program_SPIRV_get_size(program.get()));
    if (options.optimize) spirv = optimize(spirv, target.tools_env, source);  // SPIRV-Tools 2023.1 knows NV only
    if (!options.coop_khr) return spirv;
    try {
        return nv_to_khr(spirv);
    } catch (const Error& e) {
        fail("the KHR cooperative-matrix rewrite", e.what(), nullptr, source);
    }
}

}  // namespace

// ---- public API --------------------------------------------------------------------------------

Spirv compile_glsl(const std::string& source, const ShaderOptions& options) {
    const std::string key = cache_key(source, options);
    {
        std::lock_guard lock(cache_mutex);
        if (auto found = memory_cache.find(key); found != memory_cache.end()) {
            ++stats.memory_hits;
            return found->second;
        }
    }
    const std::filesystem::path on_disk = disk_path(key);
    Spirv spirv = on_disk.empty() ? nullptr : load_from_disk(on_disk);
    const bool from_disk = spirv != nullptr;
    if (!from_disk) {
        spirv = std::make_shared<const std::vector<uint32_t>>(run_glslang(source, options));
        if (!on_disk.empty()) store_on_disk(on_disk, *spirv);
    }
    std::lock_guard lock(cache_mutex);
    ++(from_disk ? stats.disk_hits : stats.compiled);
    return memory_cache.try_emplace(key, spirv).first->second;
}

std::vector<Spirv> compile_glsl_parallel(const std::vector<std::string>& sources,
                                         const ShaderOptions& options) {
    std::vector<Spirv> results(sources.size());
    std::vector<std::exception_ptr> errors(sources.size());
    // Longest first: a training step's multi-tensor AdamW, its last dispatch, is 160 KB of GLSL and ~0.2 s
    // of glslang on the H200's kernels; started last, it ran on alone after the rest.
    const std::vector<size_t> order = largest_first(sources.size(), [&](size_t i) { return sources[i].size(); });
    parallel_for(sources.size(), [&](size_t k) {
        try {
            results[order[k]] = compile_glsl(sources[order[k]], options);
        } catch (...) {
            errors[order[k]] = std::current_exception();
        }
    });
    for (auto& error : errors)
        if (error) std::rethrow_exception(error);
    return results;
}

ShaderCacheStats shader_cache_stats() {
    std::lock_guard lock(cache_mutex);
    return stats;
}

void clear_shader_memory_cache() {
    std::lock_guard lock(cache_mutex);
    memory_cache.clear();
}

std::string cache_dir() { return cache_folder(); }

}  // namespace mn::codegen
