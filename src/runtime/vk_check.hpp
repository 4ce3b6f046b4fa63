#pragma once
// One error policy for every Vulkan call: a VkResult below VK_SUCCESS becomes an mn::Error that names
// the call, where it was made and the result, so "vkQueueSubmit(...) failed: VK_ERROR_DEVICE_LOST"
// reaches the user instead of a silent wrong answer. Positive codes (VK_INCOMPLETE, VK_TIMEOUT...)
// are not errors and pass through; callers that care about them look at the value themselves.
#include <vulkan/vulkan.h>

#include <cstring>
#include <string>

#include "meganeura/error.hpp"

namespace mn::rt {

inline const char* vk_result_name(VkResult r) {
    switch (r) {
#define MN_CASE(x) case x: return #x;
        MN_CASE(VK_SUCCESS) MN_CASE(VK_NOT_READY) MN_CASE(VK_TIMEOUT) MN_CASE(VK_EVENT_SET)
        MN_CASE(VK_EVENT_RESET) MN_CASE(VK_INCOMPLETE) MN_CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
        MN_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY) MN_CASE(VK_ERROR_INITIALIZATION_FAILED)
        MN_CASE(VK_ERROR_DEVICE_LOST) MN_CASE(VK_ERROR_MEMORY_MAP_FAILED) MN_CASE(VK_ERROR_LAYER_NOT_PRESENT)
        MN_CASE(VK_ERROR_EXTENSION_NOT_PRESENT) MN_CASE(VK_ERROR_FEATURE_NOT_PRESENT)
        MN_CASE(VK_ERROR_INCOMPATIBLE_DRIVER) MN_CASE(VK_ERROR_TOO_MANY_OBJECTS)
        MN_CASE(VK_ERROR_FORMAT_NOT_SUPPORTED) MN_CASE(VK_ERROR_FRAGMENTED_POOL) MN_CASE(VK_ERROR_UNKNOWN)
        MN_CASE(VK_ERROR_OUT_OF_POOL_MEMORY) MN_CASE(VK_ERROR_INVALID_EXTERNAL_HANDLE)
        MN_CASE(VK_ERROR_FRAGMENTATION) MN_CASE(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
        MN_CASE(VK_PIPELINE_COMPILE_REQUIRED) MN_CASE(VK_ERROR_INVALID_SHADER_NV)
#undef MN_CASE
        default: return "VkResult(unknown)";
    }
}

[[noreturn]] inline void vk_fail(const char* call, VkResult r, const char* file, int line) {
    const char* src = std::strstr(file, "src/");  // project-relative path
    std::string where = std::string(src ? src : file) + ":" + std::to_string(line);
    std::string name = vk_result_name(r);
    if (name == "VkResult(unknown)") name = "VkResult(" + std::to_string(static_cast<int>(r)) + ")";
    throw Error(std::string(call) + " failed: " + name + " (" + where + ")");
}

}  // namespace mn::rt

#define MN_VK_CHECK(call)                                                     \
    do {                                                                      \
        VkResult mn_vk_result_ = (call);                                      \
        if (mn_vk_result_ < 0) ::mn::rt::vk_fail(#call, mn_vk_result_, __FILE__, __LINE__); \
    } while (0)
