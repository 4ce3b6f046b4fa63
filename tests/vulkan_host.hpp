#pragma once
// A test that plays a Vulkan host application, such as a renderer: it creates its own instance,
// device and graphics+compute queue (validation when MEGANEURA_VALIDATE=1), hands them to
// Device::adopt, and submits command buffers of its own.
#include <cstdlib>
#include <cstring>
#include <functional>

#include "gpu_check.hpp"
#include "meganeura/vulkan.hpp"

namespace mn::test {

#define HOST_VK(call) ASSERT_EQ((call), VK_SUCCESS) << #call

inline VKAPI_ATTR VkBool32 VKAPI_CALL keep_message(VkDebugUtilsMessageSeverityFlagBitsEXT, VkDebugUtilsMessageTypeFlagsEXT,
                                                   const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
    static_cast<std::vector<std::string>*>(user)->push_back(data && data->pMessage ? data->pMessage : "?");
    return VK_FALSE;
}

// The host's Vulkan objects, created as a renderer would (validation when MEGANEURA_VALIDATE=1),
// with the Vulkan 1.2 features of `v12` and nothing else.
class Host : public ::testing::Test {
protected:
    VkInstance instance = VK_NULL_HANDLE;
    VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
    VkPhysicalDevice physical = VK_NULL_HANDLE;
    VkDevice device = VK_NULL_HANDLE;
    VkQueue queue = VK_NULL_HANDLE;
    uint32_t family = UINT32_MAX;
    VkPhysicalDeviceVulkan12Features v12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &v12};
    std::vector<std::string> messages;

    void SetUp() override {
        const char* validate = std::getenv("MEGANEURA_VALIDATE");
        const bool validation = validate && *validate && std::strcmp(validate, "0") != 0;
        VkDebugUtilsMessengerCreateInfoEXT messenger_info{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
        messenger_info.messageSeverity =
            VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
        messenger_info.messageType =
            VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT;
        messenger_info.pfnUserCallback = keep_message;
        messenger_info.pUserData = &messages;
        const char* layer = "VK_LAYER_KHRONOS_validation";
        const char* debug_utils = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
        VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
        app.apiVersion = VK_API_VERSION_1_2;
        VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, validation ? &messenger_info : nullptr};
        info.pApplicationInfo = &app;
        info.enabledLayerCount = validation ? 1 : 0;
        info.ppEnabledLayerNames = &layer;
        info.enabledExtensionCount = validation ? 1 : 0;
        info.ppEnabledExtensionNames = &debug_utils;
        HOST_VK(vkCreateInstance(&info, nullptr, &instance));
        if (validation) {
            auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
                vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT"));
            HOST_VK(create(instance, &messenger_info, nullptr, &messenger));
        }

        // The device meganeura would pick, and its first family with graphics and compute.
        uint32_t count = 0;
        HOST_VK(vkEnumeratePhysicalDevices(instance, &count, nullptr));
        std::vector<VkPhysicalDevice> all(count);
        HOST_VK(vkEnumeratePhysicalDevices(instance, &count, all.data()));
        const std::string wanted = mn::test::device().name();
        for (VkPhysicalDevice p : all) {
            VkPhysicalDeviceProperties props;
            vkGetPhysicalDeviceProperties(p, &props);
            if (wanted == props.deviceName) physical = p;
        }
        ASSERT_NE(physical, VK_NULL_HANDLE) << "no physical device named " << wanted;
        vkGetPhysicalDeviceQueueFamilyProperties(physical, &count, nullptr);
        std::vector<VkQueueFamilyProperties> families(count);
        vkGetPhysicalDeviceQueueFamilyProperties(physical, &count, families.data());
        const VkQueueFlags both = VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT;
        for (uint32_t i = 0; i < count && family == UINT32_MAX; ++i)
            if ((families[i].queueFlags & both) == both) family = i;
        ASSERT_NE(family, UINT32_MAX) << "no graphics and compute queue family";

        float priority = 1;
        VkDeviceQueueCreateInfo queue_info{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
        queue_info.queueFamilyIndex = family;
        queue_info.queueCount = 1;
        queue_info.pQueuePriorities = &priority;
        VkDeviceCreateInfo device_info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, &features};
        device_info.queueCreateInfoCount = 1;
        device_info.pQueueCreateInfos = &queue_info;
        HOST_VK(vkCreateDevice(physical, &device_info, nullptr, &device));
        vkGetDeviceQueue(device, family, 0, &queue);
    }

    void TearDown() override {
        if (device) vkDestroyDevice(device, nullptr);
        if (messenger) {
            auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
                vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"));
            destroy(instance, messenger, nullptr);
        }
        if (instance) vkDestroyInstance(instance, nullptr);
        for (const auto& m : messages) ADD_FAILURE() << "validation: " << m;
    }

    VulkanHandles handles() const { return {instance, physical, device, queue, family, VK_API_VERSION_1_2, &features, {}}; }

    // `frames` frames of the host's, as a frame loop with all of them in flight: command buffer i is
    // recorded by fill(cmd, i) and submitted on its own, in order, and only the last is waited for (so a
    // hazard between frames has only the recorded barriers to close it, which synchronization validation checks).
    void submit(size_t frames, const std::function<void(VkCommandBuffer, size_t)>& fill) {
        VkCommandPoolCreateInfo pool_info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
        pool_info.queueFamilyIndex = family;
        VkCommandPool pool = VK_NULL_HANDLE;
        HOST_VK(vkCreateCommandPool(device, &pool_info, nullptr, &pool));
        VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
        alloc.commandPool = pool;
        alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        alloc.commandBufferCount = static_cast<uint32_t>(frames);
        std::vector<VkCommandBuffer> cmds(frames);
        HOST_VK(vkAllocateCommandBuffers(device, &alloc, cmds.data()));
        VkFenceCreateInfo fence_info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        VkFence fence = VK_NULL_HANDLE;
        HOST_VK(vkCreateFence(device, &fence_info, nullptr, &fence));
        for (size_t i = 0; i < frames; ++i) {
            VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
            HOST_VK(vkBeginCommandBuffer(cmds[i], &begin));
            fill(cmds[i], i);
            HOST_VK(vkEndCommandBuffer(cmds[i]));
            VkSubmitInfo submit_info{VK_STRUCTURE_TYPE_SUBMIT_INFO};
            submit_info.commandBufferCount = 1;
            submit_info.pCommandBuffers = &cmds[i];
            HOST_VK(vkQueueSubmit(queue, 1, &submit_info, i + 1 == frames ? fence : VK_NULL_HANDLE));
        }
        HOST_VK(vkWaitForFences(device, 1, &fence, VK_TRUE, UINT64_MAX));
        vkDestroyFence(device, fence, nullptr);
        vkDestroyCommandPool(device, pool, nullptr);
    }
};

}  // namespace mn::test
