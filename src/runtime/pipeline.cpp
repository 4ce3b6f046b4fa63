// Compute pipelines: created once per distinct request, cached in memory and, through the driver's
// VkPipelineCache, on disk.
//
// Shapes are specialization constants, so one SPIR-V module (made once per batch) serves every layer of
// a kind and each distinct shape is its own pipeline. The in-memory map returns the same Pipeline object
// for an identical request (same words, constants, bindings, push bytes and subgroup size); its key holds
// all those bytes, so two requests can never collide. Descriptor set layouts and pipeline layouts depend
// only on the binding count and push-constant size and are shared.
//
// Driver compilation is the slow part (seconds for a model on some drivers): prepare_pipelines runs it
// on several threads (the VkPipelineCache synchronizes itself), and the VkPipelineCache
// is loaded at open and saved when the Context goes away: written to a temporary file and renamed,
// named by the device's pipelineCacheUUID so a driver update starts a fresh file. A file whose header
// does not match this device is ignored and overwritten. The folder is $MEGANEURA_CACHE_DIR, else
// $XDG_CACHE_HOME/meganeura, else ~/.cache/meganeura; MEGANEURA_CACHE_DIR= (empty) turns it off.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "runtime/context_impl.hpp"

#include "common/cache_dir.hpp"

namespace mn::rt {
namespace {

bool header_matches(const std::vector<char>& data, const VkPhysicalDeviceProperties& p) {
    VkPipelineCacheHeaderVersionOne h;
    if (data.size() < sizeof h) return false;
    std::memcpy(&h, data.data(), sizeof h);
    return h.headerSize >= sizeof h && h.headerVersion == VK_PIPELINE_CACHE_HEADER_VERSION_ONE &&
           h.vendorID == p.vendorID && h.deviceID == p.deviceID &&
           !std::memcmp(h.pipelineCacheUUID, p.pipelineCacheUUID, VK_UUID_SIZE);
}

VkDescriptorSetLayout set_layout(Context::Impl& m, uint32_t bindings) {
    auto& layout = m.set_layouts[bindings];
    if (layout) return layout;
    std::vector<VkDescriptorSetLayoutBinding> b(bindings);
    for (uint32_t i = 0; i < bindings; ++i)
        b[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
    VkDescriptorSetLayoutCreateInfo info{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    info.bindingCount = bindings;
    info.pBindings = b.data();
    MN_VK_CHECK(vkCreateDescriptorSetLayout(m.device, &info, nullptr, &layout));
    return layout;
}

VkPipelineLayout pipeline_layout(Context::Impl& m, uint32_t bindings, uint32_t push_bytes) {
    auto& layout = m.pipeline_layouts[{bindings, push_bytes}];
    if (layout) return layout;
    VkDescriptorSetLayout set = set_layout(m, bindings);
    VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
    VkPipelineLayoutCreateInfo info{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    info.setLayoutCount = 1;
    info.pSetLayouts = &set;
    info.pushConstantRangeCount = push_bytes ? 1 : 0;
    info.pPushConstantRanges = &range;
    MN_VK_CHECK(vkCreatePipelineLayout(m.device, &info, nullptr, &layout));
    return layout;
}

std::string pipeline_cache_uuid_of(VkPhysicalDevice device) {
    VkPhysicalDeviceProperties p;
    vkGetPhysicalDeviceProperties(device, &p);
    char uuid[2 * VK_UUID_SIZE + 1];
    for (uint32_t i = 0; i < VK_UUID_SIZE; ++i) std::snprintf(uuid + 2 * i, 3, "%02x", p.pipelineCacheUUID[i]);
    return uuid;
}

}  // namespace

std::string Context::pipeline_cache_uuid() const { return pipeline_cache_uuid_of(impl_->physical.handle); }

void Context::Impl::open_pipeline_cache() {
    VkPhysicalDeviceProperties p;
    vkGetPhysicalDeviceProperties(physical.handle, &p);
    std::vector<char> data;
    if (std::string dir = cache_folder(); !dir.empty()) {
        pipeline_cache_path = dir + "/pipelines-" + pipeline_cache_uuid_of(physical.handle) + ".bin";
        std::ifstream in(pipeline_cache_path, std::ios::binary);
        data.assign(std::istreambuf_iterator<char>(in), {});
        if (!header_matches(data, p)) data.clear();
    }
    VkPipelineCacheCreateInfo info{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    info.initialDataSize = data.size();
    info.pInitialData = data.data();
    if (vkCreatePipelineCache(device, &info, nullptr, &pipeline_cache) != VK_SUCCESS) {
        info.initialDataSize = 0;  // the driver rejected the file: start empty, overwrite it at exit
        MN_VK_CHECK(vkCreatePipelineCache(device, &info, nullptr, &pipeline_cache));
    }
}

// Saving is best effort: a cache that cannot be written costs time next run, nothing else.
void Context::Impl::close_pipelines() {
    for (auto& [key, p] : pipelines) vkDestroyPipeline(device, p->handle, nullptr);
    for (auto& [key, layout] : pipeline_layouts) vkDestroyPipelineLayout(device, layout, nullptr);
    for (auto& [key, layout] : set_layouts) vkDestroyDescriptorSetLayout(device, layout, nullptr);
    pipelines.clear();
    pipeline_layouts.clear();
    set_layouts.clear();
    if (!pipeline_cache) return;
    size_t size = 0;
    std::vector<char> data;
    if (pipeline_cache_dirty && !pipeline_cache_path.empty() &&
        vkGetPipelineCacheData(device, pipeline_cache, &size, nullptr) == VK_SUCCESS) {
        data.resize(size);
        if (vkGetPipelineCacheData(device, pipeline_cache, &size, data.data()) != VK_SUCCESS) data.clear();
    }
    vkDestroyPipelineCache(device, pipeline_cache, nullptr);
    pipeline_cache = VK_NULL_HANDLE;
    if (data.empty()) return;
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(pipeline_cache_path).parent_path(), ec);
    std::string tmp = pipeline_cache_path + ".tmp" + std::to_string(getpid());
    std::ofstream out(tmp, std::ios::binary);
    out.write(data.data(), std::streamsize(size));
    out.close();
    if (out)
        std::filesystem::rename(tmp, pipeline_cache_path, ec);
    else
        std::filesystem::remove(tmp, ec);
}

namespace {

using Request = Context::PipelineRequest;

std::string request_key(const Request& r) {
    std::string key;
    auto append = [&](const void* p, size_t n) { key.append(static_cast<const char*>(p), n); };
    uint32_t header[] = {uint32_t(r.spirv->size()), uint32_t(r.spec_constants.size()), r.bindings,
                         r.push_constant_bytes, r.required_subgroup_size};
    append(header, sizeof header);
    append(r.spirv->data(), r.spirv->size() * 4);
    append(r.spec_constants.data(), r.spec_constants.size() * 4);
    return key;
}

// Checks a request against the device and gives it its (shared) layouts; not thread-safe.
std::unique_ptr<Pipeline> new_pipeline(Context::Impl& m, const Request& r) {
    const DeviceCaps& c = m.physical.caps;
    if (r.spirv->empty() || (*r.spirv)[0] != 0x07230203) throw Error("pipeline: the shader is not SPIR-V");
    if (r.push_constant_bytes % 4 || r.push_constant_bytes > c.max_push_constants)
        throw Error("pipeline: " + std::to_string(r.push_constant_bytes) + " push-constant bytes (must be a multiple "
                    "of 4, at most " + std::to_string(c.max_push_constants) + ")");
    if (r.bindings > c.max_storage_buffers_per_stage)
        throw Error("pipeline: " + std::to_string(r.bindings) + " storage buffers, the device allows " +
                    std::to_string(c.max_storage_buffers_per_stage));
    const uint32_t s = r.required_subgroup_size;
    if (s && (!c.subgroup_size_control || s < c.min_subgroup_size || s > c.max_subgroup_size || (s & (s - 1))))
        throw Error("pipeline: subgroup size " + std::to_string(s) + " cannot be required on " + c.name);
    auto p = std::make_unique<Pipeline>();
    p->layout = pipeline_layout(m, r.bindings, r.push_constant_bytes);
    p->set_layout = set_layout(m, r.bindings);
    p->bindings = r.bindings;
    p->push_constant_bytes = r.push_constant_bytes;
    return p;
}

// "name value; ..." for every statistic of the pipeline's executables (a compute pipeline has one).
std::string executable_statistics(const Context::Impl& m, VkPipeline pipeline) {
    VkPipelineInfoKHR info{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR, nullptr, pipeline};
    uint32_t executables = 0;
    if (m.executable_properties(m.device, &info, &executables, nullptr) != VK_SUCCESS) return "";
    std::string out;
    for (uint32_t x = 0; x < executables; ++x) {
        VkPipelineExecutableInfoKHR which{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR, nullptr, pipeline, x};
        uint32_t count = 0;
        if (m.executable_statistics(m.device, &which, &count, nullptr) != VK_SUCCESS) continue;
        std::vector<VkPipelineExecutableStatisticKHR> stats(count, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR});
        if (m.executable_statistics(m.device, &which, &count, stats.data()) != VK_SUCCESS) continue;
        for (const auto& s : stats) {
            std::string value;
            switch (s.format) {
                case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: value = s.value.b32 ? "true" : "false"; break;
                case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: value = std::to_string(s.value.i64); break;
                case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: value = std::to_string(s.value.u64); break;
                case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR: value = std::to_string(s.value.f64); break;
                default: continue;
            }
            out += (out.empty() ? "" : "; ") + std::string(s.name) + " " + value;
        }
    }
    return out;
}

// One VkShaderModule per distinct SPIR-V of a batch, made once for all of its pipelines, and destroyed with the
// batch. (The compiler asks for one pipeline at a time, from one thread per core: each pipeline's module is its own,
// a copy of the words beside the driver's compile.)
class ShaderModules {
public:
    explicit ShaderModules(VkDevice device) : device_(device) {}
    ~ShaderModules() {
        for (const auto& [words, module] : modules_)
            if (module) vkDestroyShaderModule(device_, module, nullptr);
    }
    ShaderModules(const ShaderModules&) = delete;
    ShaderModules& operator=(const ShaderModules&) = delete;
    void make(const std::vector<uint32_t>* words) {
        if (modules_.count(words)) return;
        VkShaderModuleCreateInfo info{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
        info.codeSize = words->size() * 4;
        info.pCode = words->data();
        MN_VK_CHECK(vkCreateShaderModule(device_, &info, nullptr, &modules_[words]));
    }
    VkShaderModule of(const std::vector<uint32_t>* words) const { return modules_.at(words); }

private:
    VkDevice device_;
    std::map<const std::vector<uint32_t>*, VkShaderModule> modules_;
};

// The driver's compilation of p from its module; thread-safe (the VkPipelineCache synchronizes itself).
// Returns the failing call's result, VK_SUCCESS when p->handle was made.
VkResult create_handle(Context::Impl& m, const Request& r, VkShaderModule module, Pipeline& p, const char** failed) {
    std::vector<VkSpecializationMapEntry> entries(r.spec_constants.size());
    for (uint32_t i = 0; i < entries.size(); ++i) entries[i] = {i, 4 * i, 4};
    VkSpecializationInfo spec{uint32_t(entries.size()), entries.data(), r.spec_constants.size() * 4,
                              r.spec_constants.data()};
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfo subgroup{
        VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO};
    subgroup.requiredSubgroupSize = r.required_subgroup_size;

    VkComputePipelineCreateInfo info{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    info.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
    info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    info.stage.module = module;
    info.stage.pName = "main";
    info.stage.pSpecializationInfo = entries.empty() ? nullptr : &spec;
    if (r.required_subgroup_size) {
        info.stage.pNext = &subgroup;
        if (m.full_subgroups) info.stage.flags = VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
    }
    info.layout = p.layout;
    if (m.executable_statistics) info.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
    const auto t0 = std::chrono::steady_clock::now();
    VkResult e = vkCreateComputePipelines(m.device, m.pipeline_cache, 1, &info, nullptr, &p.handle);
    p.create_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (e != VK_SUCCESS) *failed = "vkCreateComputePipelines";
    if (e == VK_SUCCESS && m.executable_statistics) p.statistics = executable_statistics(m, p.handle);
    return e;
}

}  // namespace

const Pipeline& Context::pipeline(const std::vector<uint32_t>& spirv, const std::vector<uint32_t>& spec_constants,
                                  uint32_t bindings, uint32_t push_constant_bytes, uint32_t required_subgroup_size) {
    return *prepare_pipelines({{&spirv, spec_constants, bindings, push_constant_bytes, required_subgroup_size}}).front();
}

std::vector<const Pipeline*> Context::prepare_pipelines(const std::vector<PipelineRequest>& requests) {
    Impl& m = *impl_;
    struct Pending {
        std::string key;
        const Request* request;
        std::unique_ptr<Pipeline> pipeline;
        VkResult result = VK_SUCCESS;
        const char* failed = nullptr;
    };
    std::vector<std::string> keys;
    std::vector<Pending> pending;
    std::set<std::string> seen;
    {
        std::lock_guard lock(m.pipelines_mutex);
        for (const Request& r : requests) {
            keys.push_back(request_key(r));
            if (m.pipelines.count(keys.back()) || !seen.insert(keys.back()).second) continue;
            pending.push_back({keys.back(), &r, new_pipeline(m, r)});
        }
    }
    ShaderModules modules(m.device);
    for (const Pending& p : pending) modules.make(p.request->spirv);
    for (Pending& p : pending) p.result = create_handle(m, *p.request, modules.of(p.request->spirv), *p.pipeline, &p.failed);
    const Pending* failure = nullptr;
    std::lock_guard lock(m.pipelines_mutex);
    for (Pending& p : pending) {
        if (p.result != VK_SUCCESS) {
            failure = failure ? failure : &p;
            continue;
        }
        // Another compile on this context may have made the same pipeline meanwhile: the first one stays.
        if (!m.pipelines.try_emplace(p.key, std::move(p.pipeline)).second) {
            vkDestroyPipeline(m.device, p.pipeline->handle, nullptr);
            continue;
        }
        m.pipeline_cache_dirty = true;
    }
    if (failure) vk_fail(failure->failed, failure->result < 0 ? failure->result : VK_ERROR_UNKNOWN, __FILE__, __LINE__);
    std::vector<const Pipeline*> out;
    for (const std::string& key : keys) out.push_back(m.pipelines.at(key).get());
    return out;
}

}  // namespace mn::rt
