#pragma once
// The inside of a Context, shared by the runtime's .cpp files and by nothing else. Everything the
// device needs lives here so that one destructor, in one order, releases it: pipelines and layouts,
// the pipeline cache (saved to disk first), the device, the debug messenger, the instance.
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/runtime.hpp"
#include "runtime/vk_check.hpp"
#include "runtime/vk_compat.hpp"

namespace mn::rt {

struct PhysicalDevice {
    VkPhysicalDevice handle = VK_NULL_HANDLE;
    uint32_t api = 0;  // usable version: min(instance, device)
    uint32_t queue_family = UINT32_MAX;  // UINT32_MAX: no compute queue
    uint32_t timestamp_bits = 0;         // of that queue family
    std::vector<std::string> extensions;
    DeviceCaps caps;
    bool has(const char* extension) const;
};

// Every physical device with its capabilities, in selection order (caps.cpp).
std::vector<PhysicalDevice> list_physical_devices(VkInstance instance, uint32_t instance_api);

// The feature structs we read and (the subset we use) enable. link() chains them in place, so the
// chain is neither copied nor moved.
struct FeatureChain {
    VkPhysicalDeviceFeatures2 core{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    VkPhysicalDeviceVulkan11Features v11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceVulkan12Features v12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceVulkan13Features v13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
    VkPhysicalDeviceCooperativeMatrixFeaturesNV coop_nv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR coop_khr{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
    VkPhysicalDeviceShaderBfloat16FeaturesKHR bf16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES_KHR};
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR executables{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};

    FeatureChain() = default;
    FeatureChain(const FeatureChain&) = delete;
    FeatureChain& operator=(const FeatureChain&) = delete;
    // Chains the structs the device understands (by API version and extensions) behind `core`.
    void link(const PhysicalDevice& device);
};

struct Context::Impl {
    bool owns_handles = true;  // false: the instance and device are a host application's (adopt)
    VkInstance instance = VK_NULL_HANDLE;
    uint32_t instance_api = 0;
    bool validation = false;
    bool portability_enumeration = false;
    VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
    // VK_EXT_debug_utils command-buffer labels (each dispatch named, for RenderDoc and Nsight); null
    // when the instance lacks the extension or is a host's.
    PFN_vkCmdBeginDebugUtilsLabelEXT begin_label = nullptr;
    PFN_vkCmdEndDebugUtilsLabelEXT end_label = nullptr;
    std::mutex messages_mutex;
    std::vector<std::string> messages;

    PhysicalDevice physical;
    VkPhysicalDeviceMemoryProperties memory{};
    VkDevice device = VK_NULL_HANDLE;
    VkQueue queue = VK_NULL_HANDLE;
    std::mutex queue_mutex;  // vkQueueSubmit needs external synchronization
    bool full_subgroups = false;  // computeFullSubgroups enabled
    // Program::wait polls its fence, yielding between looks, rather than sleeping in vkWaitForFences: on the H100
    // the sleeping thread woke ~40 us after the work ended, every run (ResNet-50's fast inference 1.02 -> 0.97 ms
    // wall polling, Whisper-tiny's 0.93 -> 0.89, their training steps 40-60 us less; GPU time the same; 2026-12-06,
    // bench/results/2026-12-06-session37-h100.md); runs of 10 ms or more still sleep (Program::wait). Not on a CPU
    // device, whose threads run the work that a poller would share their cores with. MEGANEURA_FENCE_WAIT=poll|block
    // chooses.
    bool poll_fences = false;
    // MEGANEURA_PIPELINE_STATISTICS on a device with VK_KHR_pipeline_executable_properties: each
    // pipeline keeps the driver's statistics of its machine code (Pipeline::statistics).
    PFN_vkGetPipelineExecutablePropertiesKHR executable_properties = nullptr;
    PFN_vkGetPipelineExecutableStatisticsKHR executable_statistics = nullptr;

    VkPipelineCache pipeline_cache = VK_NULL_HANDLE;
    std::string pipeline_cache_path;  // empty: no disk cache
    bool pipeline_cache_dirty = false;
    std::map<uint32_t, VkDescriptorSetLayout> set_layouts;  // by binding count
    std::map<std::pair<uint32_t, uint32_t>, VkPipelineLayout> pipeline_layouts;  // (bindings, push bytes)
    std::unordered_map<std::string, std::unique_ptr<Pipeline>> pipelines;  // key: every input's bytes
    // Guards pipelines, set_layouts, pipeline_layouts and pipeline_cache_dirty: two compiles may share the
    // context at once (a fast compile's first one runs the cooperative-matrix check beside it).
    std::mutex pipelines_mutex;

    std::mutex memory_mutex;
    Context::MemoryUse memory_use;  // device-local buffer bytes (buffer.cpp)
    void count_device_bytes(int64_t delta);

    Impl() = default;
    Impl(const Impl&) = delete;
    Impl& operator=(const Impl&) = delete;
    ~Impl();

    void create_instance(bool with_validation);  // context.cpp
    void open_pipeline_cache();                   // pipeline.cpp
    void close_pipelines();                       // pipeline.cpp: saves the cache, destroys all
};

}  // namespace mn::rt
