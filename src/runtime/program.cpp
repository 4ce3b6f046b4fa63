// Programs: a command sequence recorded into one command buffer once and replayed with one submit.
//
// A training step or a forward pass is the same list of dispatches every time, so all per-step CPU
// work (descriptor sets, binding, recording) happens once in finish(); run() is a submit and a fence
// wait. This is where we beat frameworks that launch each op from the host.
//
// Commands are collected first and recorded in finish() because only then is the number of
// dispatches known: one descriptor pool sized exactly for them, one set per dispatch. Each dispatch is
// checked when added (binding count, push-constant size, offset alignment, range limits, bounds) so a
// compiler bug is reported with the dispatch's label instead of becoming a validation error or a
// silent out-of-bounds write.
//
// Barriers are placed by the caller, only where a hazard exists; each is one global memory barrier
// over compute and transfer. The command buffer also begins with a host-write -> device barrier and
// ends with a device-write -> host-read barrier, so staging buffers need nothing else. With timestamps,
// query 0 is written before the first command and query i+1 after dispatch i.
//
// A host that shares its queue can record the sequence as K segments, one per frame say, with its own
// work between them. A segment is a run of whole commands, cut after a dispatch, so the barriers stay
// where the caller put them: a hazard between two commands in different segments already has a barrier
// between them, and a pipeline barrier orders everything earlier in submission order on the queue, earlier
// submits included. No barrier is added at a cut, and K segments submitted in order compute what one
// submit does, bit for bit. The first segment carries the host-write barrier, the last the host-read one.
#include <algorithm>
#include <chrono>
#include <thread>
#include <variant>

#include "runtime/context_impl.hpp"

namespace mn::rt {
namespace {

struct Copy {
    BufferRange src, dst;
};
struct Fill {
    BufferRange dst;
    uint32_t word;
};
struct Barrier {};
using Command = std::variant<Copy, Fill, Barrier, Dispatch>;

constexpr VkPipelineStageFlags kDeviceStages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
constexpr VkAccessFlags kDeviceWrites = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
constexpr VkAccessFlags kDeviceAccess =
    kDeviceWrites | VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT;

void memory_barrier(VkCommandBuffer cmd, VkPipelineStageFlags src_stages, VkAccessFlags src_access,
                    VkPipelineStageFlags dst_stages, VkAccessFlags dst_access) {
    VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER, nullptr, src_access, dst_access};
    vkCmdPipelineBarrier(cmd, src_stages, dst_stages, 0, 1, &b, 0, nullptr, 0, nullptr);
}

// Throws unless `r` lies inside its buffer; `what` names the command for the message.
void check_range(const BufferRange& r, const std::string& what) {
    if (!r.buffer || !r.buffer->handle()) throw Error(what + ": no buffer");
    uint64_t size = r.buffer->size();
    if (r.offset > size || r.size > size - r.offset)
        throw Error(what + ": range [" + std::to_string(r.offset) + ", " + std::to_string(r.offset + r.size) +
                    ") is outside its " + std::to_string(size) + "-byte buffer");
}

}  // namespace

struct Program::Impl {
    std::shared_ptr<Context> ctx;
    VkDevice device = VK_NULL_HANDLE;
    std::vector<Command> commands;
    size_t dispatches = 0, barriers = 0, bindings = 0;
    bool finished = false, timestamps = false, ran = false, in_flight = false;
    std::chrono::steady_clock::time_point submitted;  // of the run in flight
    std::chrono::steady_clock::duration last_run{};    // submit to seen done, the last run that was waited for
    VkCommandPool command_pool = VK_NULL_HANDLE;
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkDescriptorPool descriptor_pool = VK_NULL_HANDLE;
    VkQueryPool query_pool = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;
    std::vector<VkDescriptorSet> sets;  // one per dispatch

    // Destroying the pools frees the command buffer and descriptor sets allocated from them.
    ~Impl() {
        if (in_flight) vkWaitForFences(device, 1, &fence, VK_TRUE, UINT64_MAX);  // not while the device uses it
        vkDestroyFence(device, fence, nullptr);
        vkDestroyQueryPool(device, query_pool, nullptr);
        vkDestroyDescriptorPool(device, descriptor_pool, nullptr);
        vkDestroyCommandPool(device, command_pool, nullptr);
    }
    void add(Command c, const char* what) {
        if (finished) throw Error(std::string("Program: ") + what + " after finish()");
        commands.push_back(std::move(c));
    }
    // Segment `segment` of `of` of the commands into `into`: the first opens with a host-write barrier,
    // the last closes with a host-read barrier (one segment of one: both).
    void record(VkCommandBuffer into, bool with_timestamps, size_t segment, size_t of) const;
    // The index in `commands` just after the n-th dispatch (0 for n = 0).
    size_t after_dispatch(size_t n) const;
    void record_dispatch(VkCommandBuffer into, const Dispatch& d, VkDescriptorSet set, const Pipeline*& bound,
                         uint32_t index, bool with_timestamps) const;
};

Program::Program(std::shared_ptr<Context> ctx) : impl_(std::make_unique<Impl>()) {
    impl_->device = ctx->impl().device;
    impl_->ctx = std::move(ctx);
}
Program::~Program() = default;
Program::Program(Program&&) noexcept = default;
Program& Program::operator=(Program&&) noexcept = default;

size_t Program::dispatch_count() const { return impl_->dispatches; }
size_t Program::barrier_count() const { return impl_->barriers; }

void Program::copy(BufferRange src, BufferRange dst) {
    check_range(src, "copy source");
    check_range(dst, "copy destination");
    if (src.size != dst.size)
        throw Error("copy: source is " + std::to_string(src.size) + " bytes, destination " + std::to_string(dst.size));
    if (src.buffer == dst.buffer && src.offset < dst.offset + dst.size && dst.offset < src.offset + src.size)
        throw Error("copy: source and destination overlap");
    if (src.size) impl_->add(Copy{src, dst}, "copy");
}

void Program::fill(BufferRange dst, uint32_t word) {
    check_range(dst, "fill");
    if (dst.offset % 4 || dst.size % 4)
        throw Error("fill: offset " + std::to_string(dst.offset) + " and size " + std::to_string(dst.size) +
                    " must be multiples of 4");
    if (dst.size) impl_->add(Fill{dst, word}, "fill");
}

void Program::barrier() {
    impl_->add(Barrier{}, "barrier");
    ++impl_->barriers;
}

void Program::dispatch(Dispatch d) {
    const DeviceCaps& caps = impl_->ctx->caps();
    std::string what = "dispatch '" + d.label + "'";
    if (!d.pipeline) throw Error(what + ": no pipeline");
    if (d.bindings.size() != d.pipeline->bindings)
        throw Error(what + ": " + std::to_string(d.bindings.size()) + " bindings, the pipeline has " +
                    std::to_string(d.pipeline->bindings));
    if (d.push_constants.size() != d.pipeline->push_constant_bytes)
        throw Error(what + ": " + std::to_string(d.push_constants.size()) + " push-constant bytes, the pipeline has " +
                    std::to_string(d.pipeline->push_constant_bytes));
    for (size_t i = 0; i < d.bindings.size(); ++i) {
        const BufferRange& r = d.bindings[i];
        std::string binding = what + " binding " + std::to_string(i);
        check_range(r, binding);
        if (r.size == 0) throw Error(binding + ": empty range");
        if (r.offset % caps.min_storage_buffer_offset_alignment)
            throw Error(binding + ": offset " + std::to_string(r.offset) + " is not a multiple of " +
                        std::to_string(caps.min_storage_buffer_offset_alignment));
        if (r.size > caps.max_storage_buffer_range)
            throw Error(binding + ": " + std::to_string(r.size) + " bytes exceed the device's storage range of " +
                        std::to_string(caps.max_storage_buffer_range));
    }
    for (int i = 0; i < 3; ++i)
        if (d.groups[i] > caps.max_workgroup_count[i])
            throw Error(what + ": " + std::to_string(d.groups[i]) + " workgroups in dimension " + std::to_string(i) +
                        ", the device allows " + std::to_string(caps.max_workgroup_count[i]));
    impl_->bindings += d.bindings.size();
    impl_->add(std::move(d), "dispatch");
    ++impl_->dispatches;
}

void Program::Impl::record_dispatch(VkCommandBuffer into, const Dispatch& d, VkDescriptorSet set,
                                    const Pipeline*& bound, uint32_t index, bool with_timestamps) const {
    const Context::Impl& c = ctx->impl();
    if (c.begin_label) {
        VkDebugUtilsLabelEXT label{VK_STRUCTURE_TYPE_DEBUG_UTILS_LABEL_EXT};
        label.pLabelName = d.name.empty() ? d.label.c_str() : d.name.c_str();
        c.begin_label(into, &label);
    }
    if (bound != d.pipeline) {
        vkCmdBindPipeline(into, VK_PIPELINE_BIND_POINT_COMPUTE, d.pipeline->handle);
        bound = d.pipeline;
    }
    vkCmdBindDescriptorSets(into, VK_PIPELINE_BIND_POINT_COMPUTE, d.pipeline->layout, 0, 1, &set, 0, nullptr);
    if (!d.push_constants.empty())
        vkCmdPushConstants(into, d.pipeline->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                           uint32_t(d.push_constants.size()), d.push_constants.data());
    vkCmdDispatch(into, d.groups[0], d.groups[1], d.groups[2]);
    if (c.end_label) c.end_label(into);
    if (with_timestamps) vkCmdWriteTimestamp(into, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, query_pool, index + 1);
}

void Program::finish(bool timestamps) {
    Impl& m = *impl_;
    Context::Impl& c = m.ctx->impl();
    if (m.finished) throw Error("Program: finish() called twice");
    if (timestamps && !c.physical.caps.timestamps)
        throw Error("Program: " + c.physical.caps.name + " has no timestamp queries");
    m.finished = true;
    m.timestamps = timestamps;

    VkCommandPoolCreateInfo pool_info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pool_info.queueFamilyIndex = c.physical.queue_family;
    MN_VK_CHECK(vkCreateCommandPool(m.device, &pool_info, nullptr, &m.command_pool));
    VkCommandBufferAllocateInfo cmd_info{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    cmd_info.commandPool = m.command_pool;
    cmd_info.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    cmd_info.commandBufferCount = 1;
    MN_VK_CHECK(vkAllocateCommandBuffers(m.device, &cmd_info, &m.cmd));
    VkFenceCreateInfo fence_info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    MN_VK_CHECK(vkCreateFence(m.device, &fence_info, nullptr, &m.fence));

    // One descriptor set per dispatch, written once.
    std::vector<VkDescriptorSet> sets(m.dispatches);
    if (m.dispatches) {
        VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, uint32_t(m.bindings)};
        VkDescriptorPoolCreateInfo info{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
        info.maxSets = uint32_t(m.dispatches);
        info.poolSizeCount = m.bindings ? 1 : 0;
        info.pPoolSizes = &size;
        MN_VK_CHECK(vkCreateDescriptorPool(m.device, &info, nullptr, &m.descriptor_pool));
        std::vector<VkDescriptorSetLayout> layouts;
        for (const auto& command : m.commands)
            if (auto* d = std::get_if<Dispatch>(&command)) layouts.push_back(d->pipeline->set_layout);
        VkDescriptorSetAllocateInfo alloc{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
        alloc.descriptorPool = m.descriptor_pool;
        alloc.descriptorSetCount = uint32_t(layouts.size());
        alloc.pSetLayouts = layouts.data();
        MN_VK_CHECK(vkAllocateDescriptorSets(m.device, &alloc, sets.data()));
        std::vector<VkDescriptorBufferInfo> buffers;
        std::vector<VkWriteDescriptorSet> writes;
        buffers.reserve(m.bindings);  // writes point into it
        size_t index = 0;
        for (const auto& command : m.commands) {
            auto* d = std::get_if<Dispatch>(&command);
            if (!d) continue;
            for (uint32_t b = 0; b < d->bindings.size(); ++b) {
                const BufferRange& r = d->bindings[b];
                buffers.push_back({r.buffer->handle(), r.offset, r.size});
                VkWriteDescriptorSet w{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
                w.dstSet = sets[index];
                w.dstBinding = b;
                w.descriptorCount = 1;
                w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
                w.pBufferInfo = &buffers.back();
                writes.push_back(w);
            }
            ++index;
        }
        vkUpdateDescriptorSets(m.device, uint32_t(writes.size()), writes.data(), 0, nullptr);
    }
    uint32_t queries = uint32_t(m.dispatches + 1);
    if (timestamps) {
        VkQueryPoolCreateInfo info{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
        info.queryType = VK_QUERY_TYPE_TIMESTAMP;
        info.queryCount = queries;
        MN_VK_CHECK(vkCreateQueryPool(m.device, &info, nullptr, &m.query_pool));
    }

    m.sets = std::move(sets);
    VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};  // replayed: not one-time
    MN_VK_CHECK(vkBeginCommandBuffer(m.cmd, &begin));
    m.record(m.cmd, timestamps, 0, 1);
    MN_VK_CHECK(vkEndCommandBuffer(m.cmd));
}

size_t Program::Impl::after_dispatch(size_t n) const {
    size_t i = 0;
    for (size_t seen = 0; seen < n; ++i)
        if (std::holds_alternative<Dispatch>(commands[i])) ++seen;
    return i;
}

void Program::Impl::record(VkCommandBuffer into, bool with_timestamps, size_t segment, size_t of) const {
    // Segment s holds dispatches [s*D/of, (s+1)*D/of), as even by count as they divide.
    const size_t first_dispatch = segment * dispatches / of;
    const size_t first = segment == 0 ? 0 : after_dispatch(first_dispatch);
    const size_t last = segment + 1 == of ? commands.size() : after_dispatch((segment + 1) * dispatches / of);
    if (segment == 0) {
        memory_barrier(into, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_WRITE_BIT, kDeviceStages, kDeviceAccess);
        if (with_timestamps) {
            vkCmdResetQueryPool(into, query_pool, 0, uint32_t(dispatches + 1));
            vkCmdWriteTimestamp(into, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, query_pool, 0);
        }
    }
    const Pipeline* bound = nullptr;
    auto index = uint32_t(first_dispatch);
    for (size_t i = first; i < last; ++i) {
        const Command& command = commands[i];
        if (auto* c = std::get_if<Copy>(&command)) {
            VkBufferCopy region{c->src.offset, c->dst.offset, c->src.size};
            vkCmdCopyBuffer(into, c->src.buffer->handle(), c->dst.buffer->handle(), 1, &region);
        } else if (auto* f = std::get_if<Fill>(&command)) {
            vkCmdFillBuffer(into, f->dst.buffer->handle(), f->dst.offset, f->dst.size, f->word);
        } else if (std::holds_alternative<Barrier>(command)) {
            memory_barrier(into, kDeviceStages, kDeviceWrites, kDeviceStages, kDeviceAccess);
        } else {
            record_dispatch(into, std::get<Dispatch>(command), sets[index], bound, index, with_timestamps);
            ++index;
        }
    }
    if (segment + 1 == of)
        memory_barrier(into, kDeviceStages, kDeviceWrites, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
}

void Program::record_into(VkCommandBuffer cmd, size_t segment, size_t of) const {
    const Impl& m = *impl_;
    if (!m.finished) throw Error("Program: record_into() before finish()");
    if (m.timestamps) throw Error("Program: a profiled program runs only on its own command buffer");
    // Each segment holds at least one dispatch, so that a host's K always means K pieces of work.
    const size_t most = std::max<size_t>(m.dispatches, 1);
    if (of == 0 || of > most)
        throw Error("record: " + std::to_string(of) + " segments of a program of " + std::to_string(m.dispatches) +
                    " dispatches; each segment holds at least one, so 1 to " + std::to_string(most));
    if (segment >= of)
        throw Error("record: segment " + std::to_string(segment) + " of " + std::to_string(of) +
                    "; segments are numbered 0 to " + std::to_string(of - 1));
    m.record(cmd, false, segment, of);
}

void Program::run() {
    submit();
    wait();
}

void Program::submit() {
    Impl& m = *impl_;
    if (!m.finished) throw Error("Program: run() before finish()");
    if (m.in_flight) throw Error("Program: submitted again before wait()");
    Context::Impl& c = m.ctx->impl();
    VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    submit.commandBufferCount = 1;
    submit.pCommandBuffers = &m.cmd;
    {
        std::lock_guard lock(c.queue_mutex);
        MN_VK_CHECK(vkQueueSubmit(c.queue, 1, &submit, m.fence));
    }
    m.submitted = std::chrono::steady_clock::now();
    m.in_flight = true;
}

void Program::wait() {
    Impl& m = *impl_;
    if (!m.in_flight) throw Error("Program: wait() without submit()");
    m.in_flight = false;
    // Polling pays where a run is short: a sleeping thread's ~40 us are 4% of a 1 ms inference, under 0.4% of a run
    // of 10 ms or more, which sleeps rather than keep a core busy throughout.
    constexpr auto kPolledRuns = std::chrono::milliseconds(10);
    if (m.ctx->impl().poll_fences && m.last_run < kPolledRuns) {
        VkResult r;
        while ((r = vkGetFenceStatus(m.device, m.fence)) == VK_NOT_READY) std::this_thread::yield();
        MN_VK_CHECK(r);
    } else {
        MN_VK_CHECK(vkWaitForFences(m.device, 1, &m.fence, VK_TRUE, UINT64_MAX));
    }
    m.last_run = std::chrono::steady_clock::now() - m.submitted;
    MN_VK_CHECK(vkResetFences(m.device, 1, &m.fence));
    m.ran = true;
}

std::vector<std::pair<std::string, double>> Program::dispatch_times_ms() const {
    const Impl& m = *impl_;
    if (!m.timestamps) throw Error("Program: dispatch_times_ms() needs finish(true)");
    if (!m.ran) throw Error("Program: dispatch_times_ms() before run()");
    const PhysicalDevice& d = m.ctx->impl().physical;
    std::vector<uint64_t> t(m.dispatches + 1);
    MN_VK_CHECK(vkGetQueryPoolResults(m.device, m.query_pool, 0, uint32_t(t.size()), t.size() * 8, t.data(), 8,
                                      VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
    uint64_t mask = d.timestamp_bits == 0 || d.timestamp_bits >= 64 ? ~0ull : (1ull << d.timestamp_bits) - 1;
    std::vector<std::pair<std::string, double>> times;
    size_t i = 0;
    for (const auto& command : m.commands)
        if (auto* dispatch = std::get_if<Dispatch>(&command)) {
            double ticks = double((t[i + 1] - t[i]) & mask);
            times.emplace_back(dispatch->label, ticks * d.caps.timestamp_period_ns * 1e-6);
            ++i;
        }
    return times;
}

}  // namespace mn::rt
