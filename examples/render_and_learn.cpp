// A headless renderer that learns inside its own frame loop, on its own queue (issue 20).
//
// The renderer owns the Vulkan instance, device and one graphics+compute queue, its command buffer and
// its fence. Each frame it draws an animated, depth-tested height field (render_and_learn.vert) into an
// offscreen 64 x 64 target and copies the picture to host memory; next to the draw, in the same command
// buffer, it records meganeura's inference of a small autoencoder on the previous frame's 8 x 8 tiles.
// Every N frames it starts a fine-tuning step that teaches a second copy of the autoencoder to
// reconstruct the tiles it rendered, recorded as K segments over K consecutive frames
// (Session::record_step). meganeura never submits while the loop runs: every submit is the renderer's.
//
//   render_and_learn [--frames F] [--train-every N] [--budget-ms B] [--check]
//
// It prints frame time p50/p99 with no ML, with inference only, and with inference + training at
// K = 1, 2, 4; the worker latency (from the start of the frame that records a step's first segment to
// the end of the frame whose fence shows its last one done); and whether p99 held the frame budget.
// --check is CI's run: a handful of frames, and a non-zero exit unless the picture is drawn, inference
// matches the same model computed on the CPU, training lowers the loss, and K = 2 and 4 end with the
// parameters of K = 1 bit for bit. Timings are printed in both modes and never checked.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "meganeura/meganeura.hpp"
#include "meganeura/vulkan.hpp"
#include "render_and_learn.frag.h"
#include "render_and_learn.vert.h"

namespace {

void vk_check(VkResult r, const char* call) {
    if (r != VK_SUCCESS) throw std::runtime_error(std::string(call) + " failed: VkResult " + std::to_string(r));
}
#define VK(call) vk_check((call), #call)

constexpr uint32_t kSize = 64;  // the target is kSize x kSize RGBA8
constexpr VkFormat kColor = VK_FORMAT_R8G8B8A8_UNORM, kDepth = VK_FORMAT_D32_SFLOAT;

VKAPI_ATTR VkBool32 VKAPI_CALL print_message(VkDebugUtilsMessageSeverityFlagBitsEXT, VkDebugUtilsMessageTypeFlagsEXT,
                                             const VkDebugUtilsMessengerCallbackDataEXT* data, void*) {
    std::fprintf(stderr, "vulkan validation: %s\n", data && data->pMessage ? data->pMessage : "?");
    return VK_FALSE;
}

// The application side: device, offscreen target, graphics pipeline, one command buffer and one fence.
class Renderer {
public:
    Renderer() {
        create_device();
        create_target();
        create_pipeline();
    }
    ~Renderer() {
        vkDeviceWaitIdle(device_);
        vkDestroyPipeline(device_, pipeline_, nullptr);
        vkDestroyPipelineLayout(device_, layout_, nullptr);
        vkDestroyFramebuffer(device_, framebuffer_, nullptr);
        vkDestroyRenderPass(device_, pass_, nullptr);
        for (VkImageView v : views_) vkDestroyImageView(device_, v, nullptr);
        for (VkImage i : images_) vkDestroyImage(device_, i, nullptr);
        vkDestroyBuffer(device_, pixels_, nullptr);
        for (VkDeviceMemory m : memory_) vkFreeMemory(device_, m, nullptr);
        vkDestroyFence(device_, fence_, nullptr);
        vkDestroyCommandPool(device_, pool_, nullptr);
        vkDestroyDevice(device_, nullptr);
        if (messenger_)
            reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
                vkGetInstanceProcAddr(instance_, "vkDestroyDebugUtilsMessengerEXT"))(instance_, messenger_, nullptr);
        vkDestroyInstance(instance_, nullptr);
    }
    Renderer(const Renderer&) = delete;
    Renderer& operator=(const Renderer&) = delete;

    mn::VulkanHandles handles() const {
        return {instance_, physical_, device_, queue_, family_, VK_API_VERSION_1_2, nullptr, {}};
    }

    // Begins the frame's command buffer and records the draw and the copy of the picture to host memory.
    VkCommandBuffer begin_frame(float time) {
        VK(vkResetCommandPool(device_, pool_, 0));
        VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
        begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
        VK(vkBeginCommandBuffer(cmd_, &begin));
        VkClearValue clear[2]{};
        clear[0].color = {{0, 0, 0, 1}};
        clear[1].depthStencil = {1, 0};
        VkRenderPassBeginInfo pass{VK_STRUCTURE_TYPE_RENDER_PASS_BEGIN_INFO};
        pass.renderPass = pass_;
        pass.framebuffer = framebuffer_;
        pass.renderArea.extent = {kSize, kSize};
        pass.clearValueCount = 2;
        pass.pClearValues = clear;
        vkCmdBeginRenderPass(cmd_, &pass, VK_SUBPASS_CONTENTS_INLINE);
        vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_GRAPHICS, pipeline_);
        vkCmdPushConstants(cmd_, layout_, VK_SHADER_STAGE_VERTEX_BIT, 0, sizeof time, &time);
        vkCmdDraw(cmd_, 64 * 64 * 6, 1, 0, 0);
        vkCmdEndRenderPass(cmd_);  // the subpass dependency orders the copy after the draw
        VkBufferImageCopy region{};
        region.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1};
        region.imageExtent = {kSize, kSize, 1};
        vkCmdCopyImageToBuffer(cmd_, images_[0], VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, pixels_, 1, &region);
        VkMemoryBarrier to_host{VK_STRUCTURE_TYPE_MEMORY_BARRIER, nullptr, VK_ACCESS_TRANSFER_WRITE_BIT,
                                VK_ACCESS_HOST_READ_BIT};
        vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &to_host, 0,
                             nullptr, 0, nullptr);
        return cmd_;
    }
    // Ends, submits and waits for the frame.
    void end_frame() {
        VK(vkEndCommandBuffer(cmd_));
        VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
        submit.commandBufferCount = 1;
        submit.pCommandBuffers = &cmd_;
        VK(vkQueueSubmit(queue_, 1, &submit, fence_));
        VK(vkWaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX));
        VK(vkResetFences(device_, 1, &fence_));
    }
    // The last frame's picture, RGBA8, row by row.
    const uint8_t* pixels() const { return static_cast<const uint8_t*>(mapped_); }

private:
    VkInstance instance_ = VK_NULL_HANDLE;
    VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
    VkPhysicalDevice physical_ = VK_NULL_HANDLE;
    VkDevice device_ = VK_NULL_HANDLE;
    VkQueue queue_ = VK_NULL_HANDLE;
    uint32_t family_ = UINT32_MAX;
    VkCommandPool pool_ = VK_NULL_HANDLE;
    VkCommandBuffer cmd_ = VK_NULL_HANDLE;
    VkFence fence_ = VK_NULL_HANDLE;
    std::vector<VkDeviceMemory> memory_;
    std::vector<VkImage> images_;     // color, depth
    std::vector<VkImageView> views_;  // color, depth
    VkBuffer pixels_ = VK_NULL_HANDLE;
    void* mapped_ = nullptr;
    VkRenderPass pass_ = VK_NULL_HANDLE;
    VkFramebuffer framebuffer_ = VK_NULL_HANDLE;
    VkPipelineLayout layout_ = VK_NULL_HANDLE;
    VkPipeline pipeline_ = VK_NULL_HANDLE;

    // The instance (with the validation layer when MEGANEURA_VALIDATE=1, as meganeura's own devices),
    // the first device with a graphics+compute family, or the one MEGANEURA_DEVICE names in part.
    void create_device() {
        const char* validate = std::getenv("MEGANEURA_VALIDATE");
        const bool validation = validate && *validate && std::strcmp(validate, "0") != 0;
        VkDebugUtilsMessengerCreateInfoEXT messenger{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
        messenger.messageSeverity =
            VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
        messenger.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT;
        messenger.pfnUserCallback = print_message;
        const char* layer = "VK_LAYER_KHRONOS_validation";
        const char* debug_utils = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
        VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
        app.pApplicationName = "render_and_learn";
        app.apiVersion = VK_API_VERSION_1_2;
        VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, validation ? &messenger : nullptr};
        info.pApplicationInfo = &app;
        info.enabledLayerCount = validation ? 1 : 0;
        info.ppEnabledLayerNames = &layer;
        info.enabledExtensionCount = validation ? 1 : 0;
        info.ppEnabledExtensionNames = &debug_utils;
        VK(vkCreateInstance(&info, nullptr, &instance_));
        if (validation)
            VK(reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
                vkGetInstanceProcAddr(instance_, "vkCreateDebugUtilsMessengerEXT"))(instance_, &messenger, nullptr, &messenger_));

        uint32_t count = 0;
        VK(vkEnumeratePhysicalDevices(instance_, &count, nullptr));
        std::vector<VkPhysicalDevice> all(count);
        VK(vkEnumeratePhysicalDevices(instance_, &count, all.data()));
        const char* wanted = std::getenv("MEGANEURA_DEVICE");
        for (VkPhysicalDevice p : all) {
            VkPhysicalDeviceProperties props;
            vkGetPhysicalDeviceProperties(p, &props);
            if (wanted && *wanted && !std::strstr(props.deviceName, wanted)) continue;
            uint32_t families = 0;
            vkGetPhysicalDeviceQueueFamilyProperties(p, &families, nullptr);
            std::vector<VkQueueFamilyProperties> fams(families);
            vkGetPhysicalDeviceQueueFamilyProperties(p, &families, fams.data());
            const VkQueueFlags both = VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT;
            for (uint32_t i = 0; i < families && !physical_; ++i)
                if ((fams[i].queueFlags & both) == both) physical_ = p, family_ = i;
            if (physical_) break;
        }
        if (!physical_) throw std::runtime_error("no Vulkan device with a graphics and compute queue");
        VkPhysicalDeviceProperties props;
        vkGetPhysicalDeviceProperties(physical_, &props);
        std::printf("device: %s\n", props.deviceName);

        const float priority = 1;
        VkDeviceQueueCreateInfo queue{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
        queue.queueFamilyIndex = family_;
        queue.queueCount = 1;
        queue.pQueuePriorities = &priority;
        VkDeviceCreateInfo device{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
        device.queueCreateInfoCount = 1;
        device.pQueueCreateInfos = &queue;
        VK(vkCreateDevice(physical_, &device, nullptr, &device_));
        vkGetDeviceQueue(device_, family_, 0, &queue_);

        VkCommandPoolCreateInfo pool{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
        pool.queueFamilyIndex = family_;
        VK(vkCreateCommandPool(device_, &pool, nullptr, &pool_));
        VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
        alloc.commandPool = pool_;
        alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        alloc.commandBufferCount = 1;
        VK(vkAllocateCommandBuffers(device_, &alloc, &cmd_));
        VkFenceCreateInfo fence{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        VK(vkCreateFence(device_, &fence, nullptr, &fence_));
    }

    VkDeviceMemory allocate(const VkMemoryRequirements& req, VkMemoryPropertyFlags flags) {
        VkPhysicalDeviceMemoryProperties props;
        vkGetPhysicalDeviceMemoryProperties(physical_, &props);
        for (uint32_t i = 0; i < props.memoryTypeCount; ++i) {
            if (!(req.memoryTypeBits & (1u << i)) || (props.memoryTypes[i].propertyFlags & flags) != flags) continue;
            VkMemoryAllocateInfo info{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
            info.allocationSize = req.size;
            info.memoryTypeIndex = i;
            VkDeviceMemory memory = VK_NULL_HANDLE;
            VK(vkAllocateMemory(device_, &info, nullptr, &memory));
            memory_.push_back(memory);
            return memory;
        }
        throw std::runtime_error("no memory type for the renderer's resources");
    }

    void create_image(VkFormat format, VkImageUsageFlags usage, VkImageAspectFlags aspect) {
        VkImageCreateInfo info{VK_STRUCTURE_TYPE_IMAGE_CREATE_INFO};
        info.imageType = VK_IMAGE_TYPE_2D;
        info.format = format;
        info.extent = {kSize, kSize, 1};
        info.mipLevels = info.arrayLayers = 1;
        info.samples = VK_SAMPLE_COUNT_1_BIT;
        info.tiling = VK_IMAGE_TILING_OPTIMAL;
        info.usage = usage;
        VkImage image = VK_NULL_HANDLE;
        VK(vkCreateImage(device_, &info, nullptr, &image));
        images_.push_back(image);
        VkMemoryRequirements req;
        vkGetImageMemoryRequirements(device_, image, &req);
        VK(vkBindImageMemory(device_, image, allocate(req, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT), 0));
        VkImageViewCreateInfo view{VK_STRUCTURE_TYPE_IMAGE_VIEW_CREATE_INFO};
        view.image = image;
        view.viewType = VK_IMAGE_VIEW_TYPE_2D;
        view.format = format;
        view.subresourceRange = {aspect, 0, 1, 0, 1};
        VkImageView v = VK_NULL_HANDLE;
        VK(vkCreateImageView(device_, &view, nullptr, &v));
        views_.push_back(v);
    }

    // Color and depth attachments, the render pass over them, and the host-visible picture buffer.
    void create_target() {
        create_image(kColor, VK_IMAGE_USAGE_COLOR_ATTACHMENT_BIT | VK_IMAGE_USAGE_TRANSFER_SRC_BIT, VK_IMAGE_ASPECT_COLOR_BIT);
        create_image(kDepth, VK_IMAGE_USAGE_DEPTH_STENCIL_ATTACHMENT_BIT, VK_IMAGE_ASPECT_DEPTH_BIT);
        VkAttachmentDescription attachments[2]{};
        attachments[0].format = kColor;
        attachments[0].samples = VK_SAMPLE_COUNT_1_BIT;
        attachments[0].loadOp = VK_ATTACHMENT_LOAD_OP_CLEAR;
        attachments[0].storeOp = VK_ATTACHMENT_STORE_OP_STORE;
        attachments[0].stencilLoadOp = VK_ATTACHMENT_LOAD_OP_DONT_CARE;
        attachments[0].stencilStoreOp = VK_ATTACHMENT_STORE_OP_DONT_CARE;
        attachments[0].finalLayout = VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL;
        attachments[1] = attachments[0];
        attachments[1].format = kDepth;
        attachments[1].storeOp = VK_ATTACHMENT_STORE_OP_DONT_CARE;
        attachments[1].finalLayout = VK_IMAGE_LAYOUT_DEPTH_STENCIL_ATTACHMENT_OPTIMAL;
        VkAttachmentReference color{0, VK_IMAGE_LAYOUT_COLOR_ATTACHMENT_OPTIMAL};
        VkAttachmentReference depth{1, VK_IMAGE_LAYOUT_DEPTH_STENCIL_ATTACHMENT_OPTIMAL};
        VkSubpassDescription subpass{};
        subpass.pipelineBindPoint = VK_PIPELINE_BIND_POINT_GRAPHICS;
        subpass.colorAttachmentCount = 1;
        subpass.pColorAttachments = &color;
        subpass.pDepthStencilAttachment = &depth;
        // In: the previous frame's draw and copy are done with the attachments. Out: the copy reads the picture.
        constexpr VkPipelineStageFlags kAttachmentStages = VK_PIPELINE_STAGE_COLOR_ATTACHMENT_OUTPUT_BIT |
                                                           VK_PIPELINE_STAGE_EARLY_FRAGMENT_TESTS_BIT |
                                                           VK_PIPELINE_STAGE_LATE_FRAGMENT_TESTS_BIT;
        constexpr VkAccessFlags kAttachmentWrites =
            VK_ACCESS_COLOR_ATTACHMENT_WRITE_BIT | VK_ACCESS_DEPTH_STENCIL_ATTACHMENT_WRITE_BIT;
        VkSubpassDependency deps[2]{};
        deps[0] = {VK_SUBPASS_EXTERNAL, 0, kAttachmentStages | VK_PIPELINE_STAGE_TRANSFER_BIT, kAttachmentStages,
                   kAttachmentWrites, kAttachmentWrites | VK_ACCESS_DEPTH_STENCIL_ATTACHMENT_READ_BIT, 0};
        deps[1] = {0, VK_SUBPASS_EXTERNAL, kAttachmentStages, VK_PIPELINE_STAGE_TRANSFER_BIT, kAttachmentWrites,
                   VK_ACCESS_TRANSFER_READ_BIT, 0};
        VkRenderPassCreateInfo pass{VK_STRUCTURE_TYPE_RENDER_PASS_CREATE_INFO};
        pass.attachmentCount = 2;
        pass.pAttachments = attachments;
        pass.subpassCount = 1;
        pass.pSubpasses = &subpass;
        pass.dependencyCount = 2;
        pass.pDependencies = deps;
        VK(vkCreateRenderPass(device_, &pass, nullptr, &pass_));
        VkFramebufferCreateInfo fb{VK_STRUCTURE_TYPE_FRAMEBUFFER_CREATE_INFO};
        fb.renderPass = pass_;
        fb.attachmentCount = 2;
        fb.pAttachments = views_.data();
        fb.width = fb.height = kSize;
        fb.layers = 1;
        VK(vkCreateFramebuffer(device_, &fb, nullptr, &framebuffer_));

        VkBufferCreateInfo buffer{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
        buffer.size = kSize * kSize * 4;
        buffer.usage = VK_BUFFER_USAGE_TRANSFER_DST_BIT;
        VK(vkCreateBuffer(device_, &buffer, nullptr, &pixels_));
        VkMemoryRequirements req;
        vkGetBufferMemoryRequirements(device_, pixels_, &req);
        VkDeviceMemory memory =
            allocate(req, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
        VK(vkBindBufferMemory(device_, pixels_, memory, 0));
        VK(vkMapMemory(device_, memory, 0, VK_WHOLE_SIZE, 0, &mapped_));
    }

    VkShaderModule module(const uint32_t* code, size_t bytes) {
        VkShaderModuleCreateInfo info{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
        info.codeSize = bytes;
        info.pCode = code;
        VkShaderModule m = VK_NULL_HANDLE;
        VK(vkCreateShaderModule(device_, &info, nullptr, &m));
        return m;
    }

    void create_pipeline() {
        VkPushConstantRange push{VK_SHADER_STAGE_VERTEX_BIT, 0, sizeof(float)};
        VkPipelineLayoutCreateInfo layout{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
        layout.pushConstantRangeCount = 1;
        layout.pPushConstantRanges = &push;
        VK(vkCreatePipelineLayout(device_, &layout, nullptr, &layout_));
        VkShaderModule vert = module(render_and_learn_vert, sizeof render_and_learn_vert);
        VkShaderModule frag = module(render_and_learn_frag, sizeof render_and_learn_frag);
        VkPipelineShaderStageCreateInfo stages[2]{};
        stages[0] = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, nullptr, 0, VK_SHADER_STAGE_VERTEX_BIT, vert, "main"};
        stages[1] = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, nullptr, 0, VK_SHADER_STAGE_FRAGMENT_BIT, frag, "main"};
        VkPipelineVertexInputStateCreateInfo vertex_input{VK_STRUCTURE_TYPE_PIPELINE_VERTEX_INPUT_STATE_CREATE_INFO};
        VkPipelineInputAssemblyStateCreateInfo assembly{VK_STRUCTURE_TYPE_PIPELINE_INPUT_ASSEMBLY_STATE_CREATE_INFO};
        assembly.topology = VK_PRIMITIVE_TOPOLOGY_TRIANGLE_LIST;
        VkViewport viewport{0, 0, float(kSize), float(kSize), 0, 1};
        VkRect2D scissor{{0, 0}, {kSize, kSize}};
        VkPipelineViewportStateCreateInfo viewports{VK_STRUCTURE_TYPE_PIPELINE_VIEWPORT_STATE_CREATE_INFO};
        viewports.viewportCount = viewports.scissorCount = 1;
        viewports.pViewports = &viewport;
        viewports.pScissors = &scissor;
        VkPipelineRasterizationStateCreateInfo raster{VK_STRUCTURE_TYPE_PIPELINE_RASTERIZATION_STATE_CREATE_INFO};
        raster.polygonMode = VK_POLYGON_MODE_FILL;
        raster.cullMode = VK_CULL_MODE_NONE;
        raster.lineWidth = 1;
        VkPipelineMultisampleStateCreateInfo multisample{VK_STRUCTURE_TYPE_PIPELINE_MULTISAMPLE_STATE_CREATE_INFO};
        multisample.rasterizationSamples = VK_SAMPLE_COUNT_1_BIT;
        VkPipelineDepthStencilStateCreateInfo depth{VK_STRUCTURE_TYPE_PIPELINE_DEPTH_STENCIL_STATE_CREATE_INFO};
        depth.depthTestEnable = depth.depthWriteEnable = VK_TRUE;
        depth.depthCompareOp = VK_COMPARE_OP_LESS;
        VkPipelineColorBlendAttachmentState blend{};
        blend.colorWriteMask = VK_COLOR_COMPONENT_R_BIT | VK_COLOR_COMPONENT_G_BIT | VK_COLOR_COMPONENT_B_BIT |
                               VK_COLOR_COMPONENT_A_BIT;
        VkPipelineColorBlendStateCreateInfo blending{VK_STRUCTURE_TYPE_PIPELINE_COLOR_BLEND_STATE_CREATE_INFO};
        blending.attachmentCount = 1;
        blending.pAttachments = &blend;
        VkGraphicsPipelineCreateInfo info{VK_STRUCTURE_TYPE_GRAPHICS_PIPELINE_CREATE_INFO};
        info.stageCount = 2;
        info.pStages = stages;
        info.pVertexInputState = &vertex_input;
        info.pInputAssemblyState = &assembly;
        info.pViewportState = &viewports;
        info.pRasterizationState = &raster;
        info.pMultisampleState = &multisample;
        info.pDepthStencilState = &depth;
        info.pColorBlendState = &blending;
        info.layout = layout_;
        info.renderPass = pass_;
        VK(vkCreateGraphicsPipelines(device_, VK_NULL_HANDLE, 1, &info, nullptr, &pipeline_));
        vkDestroyShaderModule(device_, vert, nullptr);
        vkDestroyShaderModule(device_, frag, nullptr);
    }
};

// ---- the learner: an autoencoder of the picture's 8 x 8 RGB tiles ----

constexpr size_t kTile = 8, kTiles = (kSize / kTile) * (kSize / kTile), kTileValues = kTile * kTile * 3, kCode = 32;

// The picture as kTiles rows of kTileValues values in [0, 1].
std::vector<float> tiles_of(const uint8_t* rgba) {
    std::vector<float> tiles;
    tiles.reserve(kTiles * kTileValues);
    for (size_t ty = 0; ty < kSize / kTile; ++ty)
        for (size_t tx = 0; tx < kSize / kTile; ++tx)
            for (size_t y = 0; y < kTile; ++y)
                for (size_t x = 0; x < kTile; ++x)
                    for (size_t c = 0; c < 3; ++c)
                        tiles.push_back(float(rgba[((ty * kTile + y) * kSize + tx * kTile + x) * 4 + c]) / 255.f);
    return tiles;
}

struct Autoencoder {
    mn::Graph g;
    mn::Tensor loss;
    Autoencoder() {
        const mn::Tensor x = g.input("tiles", {int64_t(kTiles), int64_t(kTileValues)});
        const mn::Tensor code = g.relu(g.linear(x, g.parameter("encoder.weight", {int64_t(kCode), int64_t(kTileValues)}),
                                                g.parameter("encoder.bias", {int64_t(kCode)})));
        const mn::Tensor y = g.linear(code, g.parameter("decoder.weight", {int64_t(kTileValues), int64_t(kCode)}),
                                      g.parameter("decoder.bias", {int64_t(kTileValues)}));
        g.output("reconstruction", y);
        loss = g.mse_loss(y, x);
    }
};

// The autoencoder computed on the CPU in double, from a session's parameters.
class Reference {
public:
    explicit Reference(const mn::Session& s)
        : w1_(s.get("encoder.weight")), b1_(s.get("encoder.bias")), w2_(s.get("decoder.weight")), b2_(s.get("decoder.bias")) {}
    // The relative L2 distance of `got` from the reconstruction of `tiles`.
    double error(const std::vector<float>& got, const std::vector<float>& tiles) const {
        const std::vector<double> want =
            linear(linear(std::vector<double>(tiles.begin(), tiles.end()), w1_, b1_, kTileValues, kCode, true), w2_, b2_,
                   kCode, kTileValues, false);
        double err = 0, norm = 0;
        for (size_t i = 0; i < want.size(); ++i) err += (got[i] - want[i]) * (got[i] - want[i]), norm += want[i] * want[i];
        return std::sqrt(err / std::max(norm, 1e-30));
    }

private:
    std::vector<float> w1_, b1_, w2_, b2_;
    static std::vector<double> linear(const std::vector<double>& x, const std::vector<float>& w, const std::vector<float>& b,
                                      size_t in, size_t out, bool relu) {
        std::vector<double> y(kTiles * out);
        for (size_t r = 0; r < kTiles; ++r)
            for (size_t o = 0; o < out; ++o) {
                double sum = b[o];
                for (size_t i = 0; i < in; ++i) sum += x[r * in + i] * w[o * in + i];
                y[r * out + o] = relu ? std::max(sum, 0.0) : sum;
            }
        return y;
    }
};

struct Config {
    const char* name;
    bool infer;
    size_t shards;  // 0: no training
};

struct Result {
    std::vector<double> frame_ms, latency_ms;
    std::vector<float> losses;
    std::vector<std::vector<float>> parameters;
    bool picture_drawn = true;
    double inference_error = 0;  // relative L2 against the CPU, worst frame
};

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5))];
}

// Runs `frames` frames of one configuration. The frame's command buffer holds the draw and the copy
// of its picture, then inference on the previous frame's tiles, then the step's segment of this frame.
Result run(Renderer& r, const mn::Device& dev, const Autoencoder& model, const Config& config, size_t frames,
           size_t train_every) {
    using clock = std::chrono::steady_clock;
    mn::Session infer = mn::compile(model.g, dev, {.seed = 1});
    mn::Session train = mn::compile(model.g, dev, {.loss = model.loss, .optimizer = mn::AdamW{.lr = 1e-2}, .seed = 2});
    Result out;
    // The inference session's weights never change here, so the CPU's check reads them once, before the loop.
    const Reference cpu(infer);
    std::vector<float> tiles(kTiles * kTileValues, 0.f);
    size_t segment = config.shards;  // the next segment of the step in flight; config.shards: none is
    clock::time_point step_start;
    for (size_t f = 0; f < frames; ++f) {
        const auto start = clock::now();
        VkCommandBuffer cmd = r.begin_frame(0.05f * float(f));
        if (config.infer) {
            infer.set("tiles", tiles);
            infer.record(cmd);
        }
        // A step starts every train_every frames on the last frame's picture (not on frame 0's, blank).
        if (config.shards && segment == config.shards && f > 0 && f % train_every == 0) {
            train.set("tiles", tiles);
            segment = 0;
            step_start = start;
        }
        const bool step_ends = segment + 1 == config.shards;
        if (segment < config.shards) train.record_step(cmd, segment++, config.shards);
        r.end_frame();
        const auto end = clock::now();
        out.frame_ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
        if (config.infer) out.inference_error = std::max(out.inference_error, cpu.error(infer.get("reconstruction"), tiles));
        if (step_ends) {
            out.latency_ms.push_back(std::chrono::duration<double, std::milli>(end - step_start).count());
            out.losses.push_back(train.get("loss")[0]);
        }
        // The corners are background and the middle is the surface.
        const uint8_t* px = r.pixels();
        const uint8_t* middle = px + (kSize / 2 * kSize + kSize / 2) * 4;
        out.picture_drawn = out.picture_drawn && px[0] == 0 && px[1] == 0 && px[2] == 0 && (middle[0] | middle[1] | middle[2]);
        tiles = tiles_of(px);
    }
    if (config.shards)
        for (const char* p : {"encoder.weight", "encoder.bias", "decoder.weight", "decoder.bias"}) out.parameters.push_back(train.get(p));
    return out;
}

}  // namespace

int main(int argc, char** argv) try {
    size_t frames = 240, train_every = 8;
    double budget_ms = 1000.0 / 60;
    bool check = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--check") check = true, frames = 16, train_every = 4;
        else if (a == "--frames" && i + 1 < argc) frames = std::stoul(argv[++i]);
        else if (a == "--train-every" && i + 1 < argc) train_every = std::stoul(argv[++i]);
        else if (a == "--budget-ms" && i + 1 < argc) budget_ms = std::stod(argv[++i]);
        else throw std::runtime_error("usage: render_and_learn [--frames F] [--train-every N] [--budget-ms B] [--check]");
    }
    if (train_every < 4) throw std::runtime_error("--train-every must be at least 4, the most shards a step is cut into");

    Renderer renderer;
    const mn::Device dev = mn::Device::adopt(renderer.handles());
    const Autoencoder model;
    const Config configs[] = {{"no ML", false, 0},
                              {"inference", true, 0},
                              {"inference + training, K = 1", true, 1},
                              {"inference + training, K = 2", true, 2},
                              {"inference + training, K = 4", true, 4}};
    std::printf("%zu frames of %u x %u, 8,192 triangles; a step every %zu frames; budget %.1f ms\n", frames, kSize,
                kSize, train_every, budget_ms);
    std::printf("%-30s %9s %9s %12s %12s  %s\n", "configuration", "p50 ms", "p99 ms", "latency p50", "latency p99",
                "budget");
    // The first use of a pipeline can compile it (lavapipe's JIT takes seconds under validation): one
    // untimed run of the fullest configuration first.
    run(renderer, dev, model, {"warm-up", true, 1}, train_every + 1, train_every);
    std::vector<std::string> failures;
    std::vector<std::vector<float>> k1;
    for (const Config& c : configs) {
        const Result res = run(renderer, dev, model, c, frames, train_every);
        const double p99 = percentile(res.frame_ms, 0.99);
        char latency[64] = "           -            -";
        if (c.shards)
            std::snprintf(latency, sizeof latency, "%12.3f %12.3f", percentile(res.latency_ms, 0.5),
                          percentile(res.latency_ms, 0.99));
        std::printf("%-30s %9.3f %9.3f %s  %s\n", c.name, percentile(res.frame_ms, 0.5), p99, latency,
                    p99 <= budget_ms ? "held" : "missed");
        const std::string name = c.name;
        if (!res.picture_drawn) failures.push_back(name + ": the picture is not drawn");
        if (res.inference_error > 1e-4)
            failures.push_back(name + ": inference is " + std::to_string(res.inference_error) + " from the CPU's");
        if (c.shards && (res.losses.size() < 2 || !(res.losses.back() < res.losses.front())))
            failures.push_back(name + ": the loss did not fall");
        if (c.shards == 1) k1 = res.parameters;
        else if (c.shards && res.parameters != k1) failures.push_back(name + ": the parameters differ from K = 1's");
    }
    for (const std::string& f : failures) std::fprintf(stderr, "render_and_learn: %s\n", f.c_str());
    if (check) std::printf("check: %s\n", failures.empty() ? "ok" : "FAILED");
    return failures.empty() ? 0 : 1;
} catch (const std::exception& e) {
    std::fprintf(stderr, "render_and_learn: %s\n", e.what());
    return 1;
}
