#pragma once
// runtime/: Vulkan only. Instance and device selection, capabilities, buffers, compute pipelines,
// and Programs: a command sequence recorded once and replayed with one submit per run.
// This layer knows nothing of graphs; the compiler tells it what to dispatch and where barriers go.
#include <vulkan/vulkan.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/device_caps.hpp"
#include "meganeura/vulkan.hpp"

namespace mn::rt {

class Buffer;
class Pipeline;

// Instance + one logical device + one compute queue. Shared by everything created on it.
class Context : public std::enable_shared_from_this<Context> {
public:
    // Every Vulkan physical device's capabilities, in selection order (discrete, integrated, then
    // virtual, then CPU). Throws mn::Error with install advice when there is no driver.
    static std::vector<DeviceCaps> enumerate();

    // Opens the best device, or the one `selector` names: an index into enumerate() or a
    // case-insensitive substring of the device name. When selector is empty the environment
    // variable MEGANEURA_DEVICE is read. MEGANEURA_VALIDATE=1 enables the Khronos validation layer.
    static std::shared_ptr<Context> open(const std::string& selector = "");
    // A host application's instance, device and queue: used, never destroyed (meganeura/vulkan.hpp).
    static std::shared_ptr<Context> adopt(const VulkanHandles& handles);

    ~Context();
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    const DeviceCaps& caps() const;
    bool validation_enabled() const;
    // Each dispatch is recorded inside a VK_EXT_debug_utils label (its Dispatch::name), so RenderDoc,
    // Nsight and the validation layer see the graph nodes it computes; false without the extension.
    bool debug_labels() const;
    // The instance asked for VK_KHR_portability_enumeration (the loader offers it), so that layered
    // implementations such as MoltenVK are listed; false for an adopted instance.
    bool portability_enumeration() const;
    // Validation-layer messages (warnings and errors) seen since the last call.
    std::vector<std::string> take_validation_messages();

    // A compute pipeline for SPIR-V words + 32-bit specialization constants (ids 0..n-1, in order)
    // + `bindings` storage buffers at set 0 bindings 0..bindings-1 + push constant bytes.
    // Cached: identical requests return the same pipeline. The driver-level VkPipelineCache is
    // saved on disk between processes.
    const Pipeline& pipeline(const std::vector<uint32_t>& spirv, const std::vector<uint32_t>& spec_constants,
                             uint32_t bindings, uint32_t push_constant_bytes,
                             uint32_t required_subgroup_size = 0);
    // Whether this device's cooperative-matrix kernels compute correctly, by the extension they run
    // on ("NV", "KHR"): absent until the compiler's start-up check (compiler/coop_self_test.cpp) has
    // run, before the first compile that would use them. Drivers can advertise an extension and
    // compute it wrong.
    std::map<std::string, bool> cooperative_matrices_work;
    // The device's pipelineCacheUUID in hex: a driver update changes it, and what the driver compiles with it.
    std::string pipeline_cache_uuid() const;

    // pipeline()'s arguments, for prepare_pipelines.
    struct PipelineRequest {
        const std::vector<uint32_t>* spirv;
        std::vector<uint32_t> spec_constants;
        uint32_t bindings = 0, push_constant_bytes = 0, required_subgroup_size = 0;
    };
    // The pipeline of each request, in order, as pipeline() would return it: those not cached yet are
    // created here, one after another (the driver compiles each pipeline's SPIR-V to machine code: seconds
    // for a model one at a time, so the compiler calls this from one thread per core). Thread-safe.
    std::vector<const Pipeline*> prepare_pipelines(const std::vector<PipelineRequest>& requests);

    // Device-local bytes held by this context's buffers: now, and the most held at once since the
    // context opened or since reset_peak_memory(). The benchmark's peak device memory.
    struct MemoryUse {
        uint64_t current = 0, peak = 0;
    };
    MemoryUse device_memory() const;
    void reset_peak_memory();

    struct Impl;
    Impl& impl() { return *impl_; }

private:
    explicit Context(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// DeviceLocal: weights, activations, the arena. Upload: staging the host writes and the device copies from once
// (loading weights). Inputs: staging the host writes and every run copies from (a program's inputs), in device-local
// memory the host can map (the BAR window) where the device has it, so that the copy stays on the device; host
// memory where it has none or that window is full. Readback: staging the host reads.
enum class MemoryKind { DeviceLocal, Upload, Inputs, Readback };

// A VkBuffer with its own memory. Move-only. All but DeviceLocal buffers are persistently mapped.
class Buffer {
public:
    Buffer() = default;
    Buffer(std::shared_ptr<Context> ctx, uint64_t bytes, MemoryKind kind);
    ~Buffer();
    Buffer(Buffer&&) noexcept;
    Buffer& operator=(Buffer&&) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    VkBuffer handle() const { return buffer_; }
    uint64_t size() const { return size_; }
    void* mapped() const { return mapped_; }  // null for DeviceLocal

private:
    void release();
    std::shared_ptr<Context> ctx_;
    VkBuffer buffer_ = VK_NULL_HANDLE;
    VkDeviceMemory memory_ = VK_NULL_HANDLE;
    uint64_t size_ = 0;
    void* mapped_ = nullptr;
    uint64_t device_bytes_ = 0;  // counted in the context's device_memory()
};

struct BufferRange {
    const Buffer* buffer = nullptr;
    uint64_t offset = 0;
    uint64_t size = 0;
};

class Pipeline {
public:
    VkPipeline handle = VK_NULL_HANDLE;
    VkPipelineLayout layout = VK_NULL_HANDLE;
    VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
    uint32_t bindings = 0;
    uint32_t push_constant_bytes = 0;
    // The driver's statistics of the machine code ("name value" pairs, e.g. its registers per
    // thread), with MEGANEURA_PIPELINE_STATISTICS=1 on a device that reports them; else empty.
    std::string statistics;
    // Wall time of the driver's vkCreateComputePipelines: its compile when cold, its cache's lookup when warm.
    double create_ms = 0;
};

struct Dispatch {
    const Pipeline* pipeline = nullptr;
    std::vector<BufferRange> bindings;  // exactly pipeline->bindings entries
    std::array<uint32_t, 3> groups{1, 1, 1};
    std::vector<uint8_t> push_constants;  // exactly pipeline->push_constant_bytes
    std::string label;                    // the kernel, for timings
    std::string name;                     // what it computes, for debuggers' labels; empty: the label
};

// A command sequence recorded once and replayed. Build it with copy/fill/barrier/dispatch, call
// finish(), then run() as often as needed. The caller places barrier() between dependent commands;
// a barrier is a global memory barrier covering compute and transfer reads and writes
// (read-after-write, write-after-read and write-after-write).
class Program {
public:
    explicit Program(std::shared_ptr<Context> ctx);
    ~Program();
    Program(Program&&) noexcept;
    Program& operator=(Program&&) noexcept;
    Program(const Program&) = delete;
    Program& operator=(const Program&) = delete;

    void copy(BufferRange src, BufferRange dst);  // sizes must match
    void fill(BufferRange dst, uint32_t word);    // offset and size multiples of 4
    void barrier();
    void dispatch(Dispatch d);
    // Allocates descriptor sets and records the command buffer. With timestamps, one query is
    // written before the first command and one after every dispatch.
    void finish(bool timestamps = false);

    void run();  // submit and wait; throws mn::Error on failure or device loss
    // run() in two halves, so that the host works while the device runs: submit() queues the program
    // (once until wait()), wait() returns when it is done. Programs submitted one after the other run in
    // that order on the queue; one whose commands read what an earlier one wrote opens with barrier().
    void submit();
    void wait();
    // Records what run() submits into a command buffer of the caller's, in the recording state, on
    // this context's device and a queue family with compute; the caller submits and waits. Or segment
    // `segment` of `of` (0 <= segment < of <= max(1, dispatch_count())): the dispatches split evenly by
    // count, the barriers where one submit has them; submitted in order on one queue, the segments
    // compute exactly what run() does.
    void record_into(VkCommandBuffer cmd, size_t segment = 0, size_t of = 1) const;
    size_t dispatch_count() const;
    size_t barrier_count() const;
    // After run() of a program finished with timestamps: GPU time of each dispatch in ms
    // (time since the previous timestamp, so barriers before it are included), with its label.
    std::vector<std::pair<std::string, double>> dispatch_times_ms() const;

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace mn::rt
