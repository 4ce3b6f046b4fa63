// Instance, device selection and the logical device.
//
// A Context is one VkInstance, one VkDevice and one compute queue. It is created once per process
// (or per device) and shared: Buffers and Programs hold a shared_ptr to it, so it is destroyed last.
//
// Selection is predictable: devices are ordered discrete, integrated, virtual, CPU, other, and the
// first wins unless the caller or MEGANEURA_DEVICE names another by index or by a piece of its name.
// Every failure here is a message a user can act on: no driver says which package to install, an
// unknown selector lists the devices, a missing validation layer names its package.
//
// The device is created with every feature our kernels might use that the device supports (16-bit and
// 8-bit storage, f16, the memory model, subgroup size control, cooperative matrix, bf16...), the same
// set caps.cpp reports, so schedule/ may use anything DeviceCaps says is there.
//
// With MEGANEURA_VALIDATE=1 the Khronos validation layer runs and its warnings and errors are kept
// (and printed); tests assert none were produced. Adding
// VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT also reports missing
// barriers (read-after-write, write-after-read hazards) between dispatches.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "runtime/context_impl.hpp"

namespace mn::rt {
namespace {

const char* kNoDevice =
    "no Vulkan device found: install a driver (Debian: apt-get install mesa-vulkan-drivers for the CPU "
    "driver lavapipe, or your GPU vendor's driver)";
const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";

VKAPI_ATTR VkBool32 VKAPI_CALL on_validation_message(VkDebugUtilsMessageSeverityFlagBitsEXT,
                                                     VkDebugUtilsMessageTypeFlagsEXT,
                                                     const VkDebugUtilsMessengerCallbackDataEXT* data,
                                                     void* user) {
    auto* impl = static_cast<Context::Impl*>(user);
    std::string text = data && data->pMessage ? data->pMessage : "(no message)";
    std::fprintf(stderr, "vulkan validation: %s\n", text.c_str());
    std::lock_guard lock(impl->messages_mutex);
    impl->messages.push_back(std::move(text));
    return VK_FALSE;
}

bool instance_extension_available(const char* name) {
    uint32_t count = 0;
    if (vkEnumerateInstanceExtensionProperties(nullptr, &count, nullptr) != VK_SUCCESS) return false;
    std::vector<VkExtensionProperties> extensions(count);
    if (vkEnumerateInstanceExtensionProperties(nullptr, &count, extensions.data()) != VK_SUCCESS) return false;
    for (const auto& e : extensions)
        if (std::strcmp(e.extensionName, name) == 0) return true;
    return false;
}

bool layer_installed(const char* name) {
    uint32_t count = 0;
    MN_VK_CHECK(vkEnumerateInstanceLayerProperties(&count, nullptr));
    std::vector<VkLayerProperties> layers(count);
    MN_VK_CHECK(vkEnumerateInstanceLayerProperties(&count, layers.data()));
    return std::any_of(layers.begin(), layers.end(), [&](const auto& l) { return !std::strcmp(l.layerName, name); });
}

std::vector<PhysicalDevice> list_or_throw(const Context::Impl& impl) {
    auto devices = list_physical_devices(impl.instance, impl.instance_api);
    if (devices.empty()) throw Error(kNoDevice);
    return devices;
}

std::string lower(std::string s) {
    for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

size_t select(const std::vector<PhysicalDevice>& devices, const std::string& selector) {
    if (selector.empty()) return 0;
    bool numeric = std::all_of(selector.begin(), selector.end(), [](unsigned char c) { return std::isdigit(c); });
    if (numeric) {
        size_t index = std::strtoull(selector.c_str(), nullptr, 10);
        if (index < devices.size()) return index;
    } else {
        for (size_t i = 0; i < devices.size(); ++i)
            if (lower(devices[i].caps.name).find(lower(selector)) != std::string::npos) return i;
    }
    std::string msg = "no Vulkan device matches '" + selector + "'; available devices:";
    for (size_t i = 0; i < devices.size(); ++i)
        msg += " [" + std::to_string(i) + "] " + devices[i].caps.name + " (" + devices[i].caps.type + ");";
    msg.pop_back();
    throw Error(msg);
}

bool env_flag(const char* name) {
    const char* v = std::getenv(name);
    return v && *v && std::strcmp(v, "0") != 0;
}

// Context::Impl::poll_fences for the chosen device.
void choose_fence_wait(Context::Impl& impl) {
    const char* v = std::getenv("MEGANEURA_FENCE_WAIT");
    const std::string wait = v ? v : "";
    if (!wait.empty() && wait != "poll" && wait != "block")
        throw Error("MEGANEURA_FENCE_WAIT must be poll or block, got '" + wait + "'");
    impl.poll_fences = wait.empty() ? impl.physical.caps.type != "cpu" : wait == "poll";
}

void create_device(Context::Impl& impl) {
    const PhysicalDevice& d = impl.physical;
    FeatureChain supported, wanted;
    supported.link(d);
    wanted.link(d);
    vkGetPhysicalDeviceFeatures2(d.handle, &supported.core);
#define MN_ENABLE(block, field) wanted.block.field = supported.block.field
    MN_ENABLE(core.features, shaderInt64);
    MN_ENABLE(core.features, shaderFloat64);
    MN_ENABLE(v11, storageBuffer16BitAccess);
    MN_ENABLE(v11, uniformAndStorageBuffer16BitAccess);
    MN_ENABLE(v12, shaderFloat16);
    MN_ENABLE(v12, shaderInt8);
    MN_ENABLE(v12, storageBuffer8BitAccess);
    MN_ENABLE(v12, vulkanMemoryModel);
    MN_ENABLE(v12, vulkanMemoryModelDeviceScope);
    MN_ENABLE(v12, bufferDeviceAddress);
    MN_ENABLE(v12, hostQueryReset);
    MN_ENABLE(v13, subgroupSizeControl);
    MN_ENABLE(v13, computeFullSubgroups);
    MN_ENABLE(v13, maintenance4);
    MN_ENABLE(coop_nv, cooperativeMatrix);
    MN_ENABLE(coop_khr, cooperativeMatrix);
    MN_ENABLE(bf16, shaderBFloat16Type);
    MN_ENABLE(bf16, shaderBFloat16DotProduct);
    MN_ENABLE(bf16, shaderBFloat16CooperativeMatrix);
#undef MN_ENABLE
    impl.full_subgroups = wanted.v13.computeFullSubgroups;
    // Statistics make the driver keep what it compiled; only when asked for.
    const bool statistics = env_flag("MEGANEURA_PIPELINE_STATISTICS") && supported.executables.pipelineExecutableInfo;
    wanted.executables.pipelineExecutableInfo = statistics;

    // Exactly the extensions whose feature structs link() chained, and the portability subset, which a
    // device that lists it (MoltenVK) must have enabled.
    std::vector<const char*> extensions;
    for (const char* e : {VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME, VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME,
                          VK_KHR_SHADER_BFLOAT16_EXTENSION_NAME, VK_KHR_PORTABILITY_SUBSET_EXTENSION_NAME,
                          VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME})
        if (d.has(e)) extensions.push_back(e);

    float priority = 1.0f;
    VkDeviceQueueCreateInfo queue{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    queue.queueFamilyIndex = d.queue_family;
    queue.queueCount = 1;
    queue.pQueuePriorities = &priority;
    VkDeviceCreateInfo info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, &wanted.core};
    info.queueCreateInfoCount = 1;
    info.pQueueCreateInfos = &queue;
    info.enabledExtensionCount = uint32_t(extensions.size());
    info.ppEnabledExtensionNames = extensions.data();
    MN_VK_CHECK(vkCreateDevice(d.handle, &info, nullptr, &impl.device));
    vkGetDeviceQueue(impl.device, d.queue_family, 0, &impl.queue);
    if (statistics) {
        impl.executable_properties = reinterpret_cast<PFN_vkGetPipelineExecutablePropertiesKHR>(
            vkGetDeviceProcAddr(impl.device, "vkGetPipelineExecutablePropertiesKHR"));
        impl.executable_statistics = reinterpret_cast<PFN_vkGetPipelineExecutableStatisticsKHR>(
            vkGetDeviceProcAddr(impl.device, "vkGetPipelineExecutableStatisticsKHR"));
    }
    vkGetPhysicalDeviceMemoryProperties(d.handle, &impl.memory);
}

// An adopted device has only the features and extensions its creator enabled: the capabilities
// that need others are turned off, so no kernel uses them.
void restrict_to_enabled(PhysicalDevice& d, const VkPhysicalDeviceFeatures2* chain,
                         const std::vector<std::string>& extensions, bool& full_subgroups) {
    VkPhysicalDeviceVulkan11Features v11{};
    VkPhysicalDeviceVulkan12Features v12{};
    VkPhysicalDeviceVulkan13Features v13{};
    bool coop_nv = false, coop_khr = false, bf16 = false;
    for (auto* p = reinterpret_cast<const VkBaseInStructure*>(chain); p; p = p->pNext) {
        // As an int: Debian's headers define some of these values outside VkStructureType's enumerators.
        switch (static_cast<int>(p->sType)) {
            case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES:
                v11 = *reinterpret_cast<const VkPhysicalDeviceVulkan11Features*>(p);
                break;
            case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES:
                v12 = *reinterpret_cast<const VkPhysicalDeviceVulkan12Features*>(p);
                break;
            case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES:
                v13 = *reinterpret_cast<const VkPhysicalDeviceVulkan13Features*>(p);
                break;
            case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV:
                coop_nv = reinterpret_cast<const VkPhysicalDeviceCooperativeMatrixFeaturesNV*>(p)->cooperativeMatrix;
                break;
            case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR:
                coop_khr = reinterpret_cast<const VkPhysicalDeviceCooperativeMatrixFeaturesKHR*>(p)->cooperativeMatrix;
                break;
            case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES_KHR:
                bf16 = reinterpret_cast<const VkPhysicalDeviceShaderBfloat16FeaturesKHR*>(p)->shaderBFloat16Type;
                break;
            default: break;
        }
    }
    const auto enabled = [&](const char* e) { return std::find(extensions.begin(), extensions.end(), e) != extensions.end(); };
    DeviceCaps& c = d.caps;
    c.storage_16bit = c.storage_16bit && v11.storageBuffer16BitAccess;
    c.shader_float16 = c.shader_float16 && v12.shaderFloat16;
    c.shader_int8 = c.shader_int8 && v12.shaderInt8;
    c.shader_int64 = c.shader_int64 && chain && chain->features.shaderInt64;
    c.shader_float64 = c.shader_float64 && chain && chain->features.shaderFloat64;
    c.vulkan_memory_model = c.vulkan_memory_model && v12.vulkanMemoryModel;
    c.buffer_device_address = c.buffer_device_address && v12.bufferDeviceAddress;
    c.subgroup_size_control = c.subgroup_size_control && v13.subgroupSizeControl;
    full_subgroups = v13.computeFullSubgroups;
    if (!(coop_nv && enabled(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME))) c.coop_nv.clear();
    if (!(coop_khr && enabled(VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME))) c.coop_khr.clear();
    c.shader_bfloat16 = c.shader_bfloat16 && bf16 && enabled(VK_KHR_SHADER_BFLOAT16_EXTENSION_NAME);
    d.extensions = extensions;
    // Kernels target the SPIR-V of caps.api_version; SPIR-V 1.6 (Vulkan 1.3) sets the workgroup size
    // with LocalSizeId, which needs maintenance4.
    c.api_version = std::min(d.api, v13.maintenance4 ? VK_API_VERSION_1_3 : VK_API_VERSION_1_2);
}

}  // namespace

void Context::Impl::create_instance(bool with_validation) {
    uint32_t loader = VK_API_VERSION_1_0;
    if (vkEnumerateInstanceVersion(&loader) != VK_SUCCESS) loader = VK_API_VERSION_1_0;
    instance_api = std::min<uint32_t>(loader, VK_API_VERSION_1_3);

    std::vector<const char*> layers, extensions;
    VkDebugUtilsMessengerCreateInfoEXT messenger_info{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    messenger_info.messageSeverity =
        VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    messenger_info.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                                 VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                                 VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    messenger_info.pfnUserCallback = on_validation_message;
    messenger_info.pUserData = this;
    if (with_validation) {
        if (!layer_installed(kValidationLayer))
            throw Error("MEGANEURA_VALIDATE=1 needs the Khronos validation layer (" + std::string(kValidationLayer) +
                        "): apt-get install vulkan-validationlayers");
        layers.push_back(kValidationLayer);
    }
    const bool debug_utils = with_validation || instance_extension_available(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    if (debug_utils) extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    // The loader lists layered implementations that are not fully conformant (MoltenVK on a Mac) only
    // to an instance that asks for them: without this a Mac has no Vulkan device.
    const bool portability = instance_extension_available(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
    if (portability) extensions.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);

    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "meganeura";
    app.pEngineName = "meganeura";
    app.apiVersion = instance_api;
    VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    info.pNext = with_validation ? &messenger_info : nullptr;  // also reports instance creation itself
    if (portability) info.flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    info.pApplicationInfo = &app;
    info.enabledLayerCount = uint32_t(layers.size());
    info.ppEnabledLayerNames = layers.data();
    info.enabledExtensionCount = uint32_t(extensions.size());
    info.ppEnabledExtensionNames = extensions.data();
    VkResult r = vkCreateInstance(&info, nullptr, &instance);
    if (r != VK_SUCCESS) {
        instance = VK_NULL_HANDLE;
        throw Error(std::string(kNoDevice) + " (vkCreateInstance: " + vk_result_name(r) + ")");
    }
    validation = with_validation;
    portability_enumeration = portability;
    if (debug_utils) {
        begin_label = reinterpret_cast<PFN_vkCmdBeginDebugUtilsLabelEXT>(
            vkGetInstanceProcAddr(instance, "vkCmdBeginDebugUtilsLabelEXT"));
        end_label = reinterpret_cast<PFN_vkCmdEndDebugUtilsLabelEXT>(vkGetInstanceProcAddr(instance, "vkCmdEndDebugUtilsLabelEXT"));
        if (!begin_label || !end_label) begin_label = nullptr, end_label = nullptr;
    }
    if (with_validation) {
        auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
            vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT"));
        MN_VK_CHECK(create(instance, &messenger_info, nullptr, &messenger));
    }
}

Context::Impl::~Impl() {
    if (device) {
        close_pipelines();
        if (owns_handles) vkDestroyDevice(device, nullptr);
    }
    if (messenger) {
        auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
            vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"));
        destroy(instance, messenger, nullptr);
    }
    if (instance && owns_handles) vkDestroyInstance(instance, nullptr);
}

std::vector<DeviceCaps> Context::enumerate() {
    Impl impl;
    impl.create_instance(false);
    std::vector<DeviceCaps> caps;
    for (auto& d : list_or_throw(impl)) caps.push_back(std::move(d.caps));
    return caps;
}

std::shared_ptr<Context> Context::open(const std::string& selector) {
    auto impl = std::make_unique<Impl>();
    impl->create_instance(env_flag("MEGANEURA_VALIDATE"));
    auto devices = list_or_throw(*impl);
    const char* env = std::getenv("MEGANEURA_DEVICE");
    impl->physical = std::move(devices[select(devices, selector.empty() && env ? env : selector)]);
    const DeviceCaps& caps = impl->physical.caps;
    if (impl->physical.api < VK_API_VERSION_1_2)
        throw Error(caps.name + " (or the Vulkan loader) supports only Vulkan 1." +
                    std::to_string(VK_API_VERSION_MINOR(impl->physical.api)) + "; meganeura needs 1.2");
    if (impl->physical.queue_family == UINT32_MAX) throw Error(caps.name + " has no compute queue");
    create_device(*impl);
    choose_fence_wait(*impl);
    impl->open_pipeline_cache();
    return std::shared_ptr<Context>(new Context(std::move(impl)));
}

std::shared_ptr<Context> Context::adopt(const VulkanHandles& h) {
    if (!h.instance || !h.physical_device || !h.device || !h.queue)
        throw Error("Device::adopt: VulkanHandles needs an instance, a physical device, a device and a queue");
    auto impl = std::make_unique<Impl>();
    impl->owns_handles = false;
    impl->instance = h.instance;
    impl->instance_api = std::min<uint32_t>(h.api_version, VK_API_VERSION_1_3);
    for (auto& d : list_or_throw(*impl))
        if (d.handle == h.physical_device) impl->physical = std::move(d);
    PhysicalDevice& d = impl->physical;
    if (!d.handle) throw Error("Device::adopt: the physical device is not one of the instance's");
    if (d.api < VK_API_VERSION_1_2)
        throw Error("Device::adopt: " + d.caps.name + " with an instance of Vulkan 1." +
                    std::to_string(VK_API_VERSION_MINOR(d.api)) + "; meganeura needs 1.2");
    uint32_t count = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(d.handle, &count, nullptr);
    std::vector<VkQueueFamilyProperties> families(count);
    vkGetPhysicalDeviceQueueFamilyProperties(d.handle, &count, families.data());
    if (h.queue_family >= count || !(families[h.queue_family].queueFlags & VK_QUEUE_COMPUTE_BIT))
        throw Error("Device::adopt: queue family " + std::to_string(h.queue_family) + " of " + d.caps.name +
                    " has no compute");
    d.queue_family = h.queue_family;
    d.timestamp_bits = families[h.queue_family].timestampValidBits;
    d.caps.timestamps = d.timestamp_bits > 0;
    restrict_to_enabled(d, h.enabled_features, h.enabled_extensions, impl->full_subgroups);
    impl->device = h.device;
    impl->queue = h.queue;
    vkGetPhysicalDeviceMemoryProperties(d.handle, &impl->memory);
    choose_fence_wait(*impl);
    impl->open_pipeline_cache();
    return std::shared_ptr<Context>(new Context(std::move(impl)));
}

Context::Context(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Context::~Context() = default;

const DeviceCaps& Context::caps() const { return impl_->physical.caps; }
bool Context::validation_enabled() const { return impl_->validation; }

bool Context::debug_labels() const { return impl_->begin_label != nullptr; }

bool Context::portability_enumeration() const { return impl_->portability_enumeration; }

std::vector<std::string> Context::take_validation_messages() {
    std::lock_guard lock(impl_->messages_mutex);
    return std::exchange(impl_->messages, {});
}

}  // namespace mn::rt
