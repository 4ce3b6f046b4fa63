// Buffers: one VkBuffer with its own VkDeviceMemory, in one of three kinds of memory.
//
// DeviceLocal holds weights, activations and the arena; Upload and Readback are the persistent
// staging buffers through which data enters and leaves, mapped once for their whole life. One
// allocation per buffer is enough because the memory planner already packs every intermediate into
// one arena, so a model makes a handful of buffers, not thousands.
//
// Memory types are scored rather than matched exactly, since drivers differ: lavapipe offers one type
// that is everything at once, discrete GPUs separate VRAM from host memory, integrated GPUs have
// host-visible VRAM. Staging buffers avoid device-local types when they can (on a discrete GPU those
// are the scarce BAR window) and readback prefers host-cached memory, which the CPU reads quickly.
// Inputs, copied by every run, prefer that window: from host memory the copy crosses PCIe at every run
// (ResNet-50's 4 images, 2.4 MB, took ~45 us of a 1.1 ms inference on the H100), from VRAM it does not;
// where the window is full they take host memory after all.
#include <algorithm>
#include <utility>

#include "runtime/context_impl.hpp"

namespace mn::rt {
namespace {

struct MemoryWish {
    VkMemoryPropertyFlags required, preferred, avoided;
};

MemoryWish wish(MemoryKind kind) {
    constexpr VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    switch (kind) {
        case MemoryKind::DeviceLocal: return {0, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT};
        case MemoryKind::Upload: return {host, 0, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT};
        case MemoryKind::Inputs: return {host, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0};
        case MemoryKind::Readback: return {host, VK_MEMORY_PROPERTY_HOST_CACHED_BIT, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT};
    }
    return {};
}

const char* kind_name(MemoryKind kind) {
    switch (kind) {
        case MemoryKind::DeviceLocal: return "device-local";
        case MemoryKind::Upload: return "upload";
        case MemoryKind::Inputs: return "inputs";
        case MemoryKind::Readback: return "readback";
    }
    return "?";
}

// The allowed type with every required flag, most preferred flags (worth more) and fewest avoided ones.
int pick_memory_type(const VkPhysicalDeviceMemoryProperties& memory, uint32_t allowed, MemoryKind kind) {
    MemoryWish w = wish(kind);
    int best = -1, best_score = 0;
    for (uint32_t i = 0; i < memory.memoryTypeCount; ++i) {
        VkMemoryPropertyFlags f = memory.memoryTypes[i].propertyFlags;
        if (!(allowed & (1u << i)) || (f & w.required) != w.required) continue;
        int score = 2 * __builtin_popcount(f & w.preferred) - __builtin_popcount(f & w.avoided);
        if (best < 0 || score > best_score) best = int(i), best_score = score;
    }
    return best;
}

}  // namespace

Buffer::Buffer(std::shared_ptr<Context> ctx, uint64_t bytes, MemoryKind kind)
    : ctx_(std::move(ctx)), size_(std::max<uint64_t>(bytes, 4)) {
    Context::Impl& m = ctx_->impl();
    auto fail = [&](const std::string& why) {
        release();
        throw Error("cannot allocate a " + std::to_string(bytes) + "-byte " + kind_name(kind) + " buffer: " + why);
    };
    if (size_ > m.physical.caps.max_buffer_size)
        fail("the device's largest buffer is " + std::to_string(m.physical.caps.max_buffer_size) + " bytes");
    VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    info.size = size_;
    info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    if (VkResult r = vkCreateBuffer(m.device, &info, nullptr, &buffer_); r != VK_SUCCESS) fail(vk_result_name(r));

    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(m.device, buffer_, &req);
    int type = pick_memory_type(m.memory, req.memoryTypeBits, kind);
    if (type < 0) fail("no suitable memory type");
    VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    alloc.allocationSize = req.size;
    alloc.memoryTypeIndex = uint32_t(type);
    VkResult r = vkAllocateMemory(m.device, &alloc, nullptr, &memory_);
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY && kind == MemoryKind::Inputs) {  // the BAR window is full: host memory
        memory_ = VK_NULL_HANDLE;
        alloc.memoryTypeIndex = uint32_t(pick_memory_type(m.memory, req.memoryTypeBits, MemoryKind::Upload));
        r = vkAllocateMemory(m.device, &alloc, nullptr, &memory_);
    }
    if (r != VK_SUCCESS) fail(vk_result_name(r));
    if (VkResult r = vkBindBufferMemory(m.device, buffer_, memory_, 0); r != VK_SUCCESS) fail(vk_result_name(r));
    if (kind == MemoryKind::DeviceLocal) {
        device_bytes_ = req.size;
        m.count_device_bytes(static_cast<int64_t>(device_bytes_));
    }
    if (kind != MemoryKind::DeviceLocal)
        if (VkResult r = vkMapMemory(m.device, memory_, 0, VK_WHOLE_SIZE, 0, &mapped_); r != VK_SUCCESS)
            fail(vk_result_name(r));
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& other) noexcept { *this = std::move(other); }

Buffer& Buffer::operator=(Buffer&& other) noexcept {
    if (this != &other) {
        release();
        ctx_ = std::move(other.ctx_);
        buffer_ = std::exchange(other.buffer_, VK_NULL_HANDLE);
        memory_ = std::exchange(other.memory_, VK_NULL_HANDLE);
        size_ = std::exchange(other.size_, 0);
        mapped_ = std::exchange(other.mapped_, nullptr);
        device_bytes_ = std::exchange(other.device_bytes_, 0);
    }
    return *this;
}

// Freeing the memory also unmaps it.
void Buffer::release() {
    if (ctx_) {
        VkDevice device = ctx_->impl().device;
        vkDestroyBuffer(device, buffer_, nullptr);
        vkFreeMemory(device, memory_, nullptr);
        if (device_bytes_) ctx_->impl().count_device_bytes(-static_cast<int64_t>(device_bytes_));
    }
    ctx_.reset();
    buffer_ = VK_NULL_HANDLE;
    memory_ = VK_NULL_HANDLE;
    size_ = 0;
    mapped_ = nullptr;
    device_bytes_ = 0;
}

void Context::Impl::count_device_bytes(int64_t delta) {
    std::lock_guard lock(memory_mutex);
    memory_use.current = static_cast<uint64_t>(static_cast<int64_t>(memory_use.current) + delta);
    memory_use.peak = std::max(memory_use.peak, memory_use.current);
}

Context::MemoryUse Context::device_memory() const {
    std::lock_guard lock(impl_->memory_mutex);
    return impl_->memory_use;
}

void Context::reset_peak_memory() {
    std::lock_guard lock(impl_->memory_mutex);
    impl_->memory_use.peak = impl_->memory_use.current;
}

}  // namespace mn::rt
