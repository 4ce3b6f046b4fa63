#pragma once
// Sharing a Vulkan device with a host application, such as a renderer: meganeura runs on the
// host's VkDevice and queue and records its programs into the host's command buffers. With
// meganeura/meganeura.hpp for Device and Session (this header only needs <vulkan/vulkan.h>, so the
// runtime can include it too).
//
//   mn::VulkanHandles h{instance, physical_device, device, queue, queue_family, VK_API_VERSION_1_3,
//                       &features2_used_at_vkCreateDevice, {"VK_KHR_...", ...}};
//   auto dev = mn::Device::adopt(h);                 // meganeura never destroys these handles
//   auto s = mn::compile(graph, dev);
//   s.set("x", data);                                // uploads now, on the shared queue
//   vkBeginCommandBuffer(cmd, ...); /* render */ s.record(cmd); vkEndCommandBuffer(cmd);
//   vkQueueSubmit(queue, ...); /* wait */ auto y = s.get("y");
//   // or spread over K frames, one segment in each frame's command buffer (training: record_step)
//   s.record(frame_cmd, frame % K, K);
//
// meganeura uses only the features and extensions the host enabled (a device created without
// shaderFloat16 or cooperative matrices gets the f32 kernels), and the queue family must support
// compute. Vulkan requires external synchronization of a queue: meganeura's own submits (set, get,
// run, step, load, save, compile) must not overlap the host's vkQueueSubmit on another thread.
// The handles must outlive every Device, Session and tensor created from them.
#include <vulkan/vulkan.h>

#include <string>
#include <vector>

namespace mn {

struct VulkanHandles {
    VkInstance instance = VK_NULL_HANDLE;
    VkPhysicalDevice physical_device = VK_NULL_HANDLE;
    VkDevice device = VK_NULL_HANDLE;
    VkQueue queue = VK_NULL_HANDLE;
    uint32_t queue_family = 0;                   // of `queue`
    uint32_t api_version = VK_API_VERSION_1_2;   // the instance's VkApplicationInfo::apiVersion, at least 1.2
    // The VkPhysicalDeviceFeatures2 chain passed to vkCreateDevice (Vulkan 1.1/1.2/1.3 feature structs,
    // cooperative matrix, bfloat16), or null for none beyond Vulkan 1.2 core; and its enabled extensions.
    const VkPhysicalDeviceFeatures2* enabled_features = nullptr;
    std::vector<std::string> enabled_extensions;
};

}  // namespace mn
