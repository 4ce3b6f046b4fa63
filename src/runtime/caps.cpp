// What a device can do, asked once and written down as DeviceCaps.
//
// schedule/ picks tile sizes, subgroup tricks, f16 storage and cooperative-matrix kernels from this
// struct alone, never from the vendor name, so lavapipe (subgroup 8, no cooperative matrix) and an
// H200 (subgroup 32, NV and KHR cooperative matrix) are handled by the same code. The same feature
// query feeds device creation in context.cpp, which enables exactly what is reported here.
//
// Vulkan spreads the answers over many structs: Vulkan 1.1/1.2/1.3 feature blocks, extension feature
// structs, and properties that older devices lack. A struct is chained only when the device's usable
// API version (min of instance and device) or its extension list says it understands it.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "runtime/context_impl.hpp"

namespace mn::rt {

bool PhysicalDevice::has(const char* extension) const {
    return std::find(extensions.begin(), extensions.end(), extension) != extensions.end();
}

void FeatureChain::link(const PhysicalDevice& d) {
    void** next = &core.pNext;
    auto add = [&](auto& s) { *next = &s; next = &s.pNext; };
    if (d.api >= VK_API_VERSION_1_2) { add(v11); add(v12); }
    if (d.api >= VK_API_VERSION_1_3) add(v13);
    if (d.has(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME)) add(coop_nv);
    if (d.has(VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME)) add(coop_khr);
    if (d.has(VK_KHR_SHADER_BFLOAT16_EXTENSION_NAME)) add(bf16);
    if (d.has(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME)) add(executables);
    *next = nullptr;
}

namespace {

const char* type_name(VkPhysicalDeviceType t) {
    switch (t) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
        case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
        default: return "other";
    }
}

int type_rank(const std::string& type) {
    const char* order[] = {"discrete", "integrated", "virtual", "cpu"};
    for (int i = 0; i < 4; ++i)
        if (type == order[i]) return i;
    return 4;
}

std::string component_name(uint32_t t) {
    const char* names[] = {"f16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"};
    if (t < 11) return names[t];
    if (t == 1000141000) return "bf16";  // VK_COMPONENT_TYPE_BFLOAT16_KHR
    return "type" + std::to_string(t);
}

// Subgroup-scope shapes only: that is what one subgroup's GLSL coopmat variables can use. NV calls the
// result type DType, KHR ResultType; otherwise the structs agree.
template <typename Props, typename Query>
std::vector<CoopMatrixShape> coop_shapes(VkPhysicalDevice device, Query query, VkStructureType stype) {
    uint32_t count = 0;
    if (!query || query(device, &count, nullptr) < 0) return {};
    std::vector<Props> props(count);
    for (auto& p : props) p.sType = stype;
    if (query(device, &count, props.data()) < 0) return {};
    std::vector<CoopMatrixShape> shapes;
    for (const auto& p : props) {
        if (uint32_t(p.scope) != uint32_t(VK_SCOPE_SUBGROUP_NV)) continue;
        uint32_t result;
        if constexpr (requires { p.DType; }) result = p.DType; else result = p.ResultType;
        shapes.push_back({p.MSize, p.NSize, p.KSize, component_name(p.AType), component_name(p.BType),
                          component_name(p.CType), component_name(result)});
    }
    return shapes;
}

uint32_t pick_queue_family(VkPhysicalDevice device, uint32_t* timestamp_bits) {  // UINT32_MAX: none
    uint32_t count = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(device, &count, nullptr);
    std::vector<VkQueueFamilyProperties> families(count);
    vkGetPhysicalDeviceQueueFamilyProperties(device, &count, families.data());
    int best = -1;
    for (uint32_t i = 0; i < count; ++i) {
        auto flags = families[i].queueFlags;
        if (!(flags & VK_QUEUE_COMPUTE_BIT)) continue;
        if (best < 0 || (flags & VK_QUEUE_GRAPHICS_BIT)) best = int(i);
        if (flags & VK_QUEUE_GRAPHICS_BIT) break;
    }
    if (best < 0) return UINT32_MAX;
    *timestamp_bits = families[best].timestampValidBits;
    return uint32_t(best);
}

std::vector<std::string> device_extensions(VkPhysicalDevice device) {
    uint32_t count = 0;
    MN_VK_CHECK(vkEnumerateDeviceExtensionProperties(device, nullptr, &count, nullptr));
    std::vector<VkExtensionProperties> props(count);
    MN_VK_CHECK(vkEnumerateDeviceExtensionProperties(device, nullptr, &count, props.data()));
    std::vector<std::string> names;
    for (const auto& p : props) names.emplace_back(p.extensionName);
    return names;
}

PhysicalDevice inspect(VkInstance instance, VkPhysicalDevice handle, uint32_t instance_api) {
    PhysicalDevice d;
    d.handle = handle;
    d.extensions = device_extensions(handle);

    VkPhysicalDeviceSubgroupProperties subgroup{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, &subgroup};
    VkPhysicalDeviceDriverProperties driver{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceVulkan13Properties p13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_PROPERTIES};
    VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &m3};
    vkGetPhysicalDeviceProperties(handle, &props.properties);
    d.api = std::min(instance_api, props.properties.apiVersion);
    if (d.api >= VK_API_VERSION_1_2) { driver.pNext = props.pNext; props.pNext = &driver; }
    if (d.api >= VK_API_VERSION_1_3) { p13.pNext = props.pNext; props.pNext = &p13; }
    // The compute-unit count, where a vendor extension reports it (split-K and the tile choice fill the device).
    VkPhysicalDeviceShaderSMBuiltinsPropertiesNV sm{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV};
    VkPhysicalDeviceShaderCoreProperties2AMD amd{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_2_AMD};
    VkPhysicalDeviceShaderCoreBuiltinsPropertiesARM arm{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_BUILTINS_PROPERTIES_ARM};
    if (d.has(VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME)) { sm.pNext = props.pNext; props.pNext = &sm; }
    if (d.has(VK_AMD_SHADER_CORE_PROPERTIES_2_EXTENSION_NAME)) { amd.pNext = props.pNext; props.pNext = &amd; }
    if (d.has(VK_ARM_SHADER_CORE_BUILTINS_EXTENSION_NAME)) { arm.pNext = props.pNext; props.pNext = &arm; }
    vkGetPhysicalDeviceProperties2(handle, &props);

    FeatureChain f;
    f.link(d);
    vkGetPhysicalDeviceFeatures2(handle, &f.core);

    d.queue_family = pick_queue_family(handle, &d.timestamp_bits);

    const auto& p = props.properties;
    const auto& l = p.limits;
    DeviceCaps& c = d.caps;
    c.name = p.deviceName;
    c.type = type_name(p.deviceType);
    if (d.api >= VK_API_VERSION_1_2) c.driver = std::string(driver.driverName) + " " + driver.driverInfo;
    c.vendor_id = p.vendorID;
    c.device_id = p.deviceID;
    c.api_version = p.apiVersion;
    c.subgroup_size = subgroup.subgroupSize;
    c.subgroup_arithmetic = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                            (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
    c.subgroup_shuffle = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                         (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
    c.min_subgroup_size = c.max_subgroup_size = subgroup.subgroupSize;
    if (d.api >= VK_API_VERSION_1_3) {
        c.subgroup_size_control = f.v13.subgroupSizeControl &&
                                  (p13.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT);
        c.min_subgroup_size = p13.minSubgroupSize;
        c.max_subgroup_size = p13.maxSubgroupSize;
        c.max_workgroup_subgroups = p13.maxComputeWorkgroupSubgroups;
    }
    c.max_shared_memory = l.maxComputeSharedMemorySize;
    c.max_workgroup_invocations = l.maxComputeWorkGroupInvocations;
    c.compute_units = std::max({sm.shaderSMCount, amd.activeComputeUnitCount, arm.shaderCoreCount});
    std::copy_n(l.maxComputeWorkGroupSize, 3, c.max_workgroup_size.begin());
    std::copy_n(l.maxComputeWorkGroupCount, 3, c.max_workgroup_count.begin());
    c.max_storage_buffer_range = l.maxStorageBufferRange;
    c.min_storage_buffer_offset_alignment = l.minStorageBufferOffsetAlignment;
    c.max_push_constants = l.maxPushConstantsSize;
    c.max_storage_buffers_per_stage = l.maxPerStageDescriptorStorageBuffers;
    c.shader_float16 = f.v12.shaderFloat16;
    c.shader_int8 = f.v12.shaderInt8;
    c.shader_int64 = f.core.features.shaderInt64;
    c.shader_float64 = f.core.features.shaderFloat64;
    c.storage_16bit = f.v11.storageBuffer16BitAccess;
    c.shader_bfloat16 = d.has(VK_KHR_SHADER_BFLOAT16_EXTENSION_NAME) && f.bf16.shaderBFloat16Type;
    c.buffer_device_address = f.v12.bufferDeviceAddress;
    c.vulkan_memory_model = f.v12.vulkanMemoryModel;
    c.portability_subset = d.has(VK_KHR_PORTABILITY_SUBSET_EXTENSION_NAME);
    if (d.has(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME) && f.coop_nv.cooperativeMatrix) {
        auto query = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
            vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"));
        c.coop_nv = coop_shapes<VkCooperativeMatrixPropertiesNV>(
            handle, query, VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV);
    }
    if (d.has(VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME) && f.coop_khr.cooperativeMatrix) {
        auto query = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR>(
            vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"));
        c.coop_khr = coop_shapes<VkCooperativeMatrixPropertiesKHR>(
            handle, query, VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR);
    }
    // Mesa's gallivm loop limiter (LP_MAX_TGSI_LOOP_ITERATIONS).
    if (d.api >= VK_API_VERSION_1_2 && driver.driverID == VK_DRIVER_ID_MESA_LLVMPIPE) c.max_loop_iterations = 65535;
    c.timestamps = l.timestampComputeAndGraphics || d.timestamp_bits > 0;
    c.timestamp_period_ns = l.timestampPeriod;

    VkPhysicalDeviceMemoryProperties memory;
    vkGetPhysicalDeviceMemoryProperties(handle, &memory);
    uint64_t largest_local = 0;
    for (uint32_t i = 0; i < memory.memoryHeapCount; ++i) {
        const auto& h = memory.memoryHeaps[i];
        bool local = h.flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT;
        c.heaps.push_back({h.size, local});
        if (local) largest_local = std::max<uint64_t>(largest_local, h.size);
    }
    c.max_buffer_size = m3.maxMemoryAllocationSize;
    if (d.api >= VK_API_VERSION_1_3 && f.v13.maintenance4) c.max_buffer_size = std::min(c.max_buffer_size, p13.maxBufferSize);
    if (largest_local) c.max_buffer_size = std::min(c.max_buffer_size, largest_local);
    return d;
}

std::string bytes(uint64_t n) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    double v = double(n);
    while (v >= 1024 && u < 4) { v /= 1024; ++u; }
    char buf[32];
    std::snprintf(buf, sizeof buf, v == uint64_t(v) ? "%.0f %s" : "%.1f %s", v, units[u]);
    return buf;
}

std::string version(uint32_t v) {
    return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) + "." +
           std::to_string(VK_API_VERSION_PATCH(v));
}

std::string shapes_text(const std::vector<CoopMatrixShape>& shapes) {
    if (shapes.empty()) return "none";
    std::string s;
    for (const auto& m : shapes) {
        if (!s.empty()) s += ", ";
        s += std::to_string(m.m) + "x" + std::to_string(m.n) + "x" + std::to_string(m.k) + " " + m.a_type + "*" +
             m.b_type + "+" + m.c_type + "->" + m.result_type;
    }
    return s;
}

}  // namespace

std::vector<PhysicalDevice> list_physical_devices(VkInstance instance, uint32_t instance_api) {
    uint32_t count = 0;
    MN_VK_CHECK(vkEnumeratePhysicalDevices(instance, &count, nullptr));
    std::vector<VkPhysicalDevice> handles(count);
    MN_VK_CHECK(vkEnumeratePhysicalDevices(instance, &count, handles.data()));
    std::vector<PhysicalDevice> devices;
    for (auto h : handles) devices.push_back(inspect(instance, h, instance_api));
    std::stable_sort(devices.begin(), devices.end(), [](const auto& a, const auto& b) {
        return type_rank(a.caps.type) < type_rank(b.caps.type);
    });
    return devices;
}

std::string describe(const DeviceCaps& c) {
    auto yes = [](bool b) { return b ? "yes" : "no"; };
    auto dims = [](const std::array<uint32_t, 3>& a) {
        return std::to_string(a[0]) + "x" + std::to_string(a[1]) + "x" + std::to_string(a[2]);
    };
    char ids[64];
    std::snprintf(ids, sizeof ids, "vendor 0x%04x, device 0x%04x", c.vendor_id, c.device_id);
    std::string s = c.name + " (" + c.type + ", Vulkan " + version(c.api_version) + ", " + ids + ")\n";
    s += "  driver: " + (c.driver.empty() ? std::string("unknown") : c.driver) + "\n";
    s += "  subgroup: " + std::to_string(c.subgroup_size) + ", arithmetic " + yes(c.subgroup_arithmetic) +
         ", shuffle " + yes(c.subgroup_shuffle) +
         ", size control " + (c.subgroup_size_control ? std::to_string(c.min_subgroup_size) + ".." +
                                                            std::to_string(c.max_subgroup_size)
                                                      : std::string("no")) + "\n";
    s += "  workgroup: " + std::to_string(c.max_workgroup_invocations) + " invocations, size " +
         dims(c.max_workgroup_size) + ", count " + dims(c.max_workgroup_count) + ", shared memory " +
         bytes(c.max_shared_memory) + (c.compute_units ? ", " + std::to_string(c.compute_units) + " compute units" : "") +
         "\n";
    s += "  buffers: largest " + bytes(c.max_buffer_size) + ", storage range " + bytes(c.max_storage_buffer_range) +
         ", offset alignment " + std::to_string(c.min_storage_buffer_offset_alignment) + ", " +
         std::to_string(c.max_storage_buffers_per_stage) + " storage buffers per stage, push constants " +
         bytes(c.max_push_constants) + "\n";
    s += std::string("  types: f16 ") + yes(c.shader_float16) + ", i8 " + yes(c.shader_int8) + ", i64 " +
         yes(c.shader_int64) + ", f64 " + yes(c.shader_float64) + ", 16-bit storage " +
         yes(c.storage_16bit) + ", bf16 " + yes(c.shader_bfloat16) + ", buffer device address " +
         yes(c.buffer_device_address) + ", memory model " + yes(c.vulkan_memory_model) + "\n";
    if (c.portability_subset) s += "  portability subset: yes (a layered implementation such as MoltenVK)\n";
    s += "  cooperative matrix NV: " + shapes_text(c.coop_nv) + "\n";
    s += "  cooperative matrix KHR: " + shapes_text(c.coop_khr) + "\n";
    char period[32];
    std::snprintf(period, sizeof period, "%g ns", c.timestamp_period_ns);
    s += std::string("  timestamps: ") + (c.timestamps ? std::string("period ") + period : "no") + "\n";
    if (c.max_loop_iterations) {
        s += "  loops: the driver ends an invocation after " + std::to_string(c.max_loop_iterations) +
             " iterations (long reductions are split)\n";
    }
    s += "  memory heaps:";
    for (size_t i = 0; i < c.heaps.size(); ++i) {
        s += i ? ", " : " ";
        s += bytes(c.heaps[i].size);
        if (c.heaps[i].device_local) s += " device-local";
    }
    return s + "\n";
}

}  // namespace mn::rt
