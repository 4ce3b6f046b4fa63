#pragma once
// What the runtime found out about a device, as plain data: no Vulkan here, so schedule/ and codegen/
// can specialize on it without reaching up into runtime/ (runtime/caps.cpp fills it in).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace mn::rt {

struct CoopMatrixShape {
    uint32_t m = 0, n = 0, k = 0;
    std::string a_type, b_type, c_type, result_type;  // "f16", "f32", "bf16", "i8", "i32", ...
};

struct MemoryHeap {
    uint64_t size = 0;
    bool device_local = false;
};

// What schedule/ may specialize on. Never branch on the vendor name outside runtime/.
struct DeviceCaps {
    std::string name;
    std::string type;  // "discrete", "integrated", "virtual", "cpu", "other"
    std::string driver;
    uint32_t vendor_id = 0, device_id = 0;
    uint32_t api_version = 0;
    uint32_t subgroup_size = 1;
    bool subgroup_arithmetic = false;  // subgroupAdd/Max in compute shaders
    bool subgroup_shuffle = false;     // subgroupShuffle/ShuffleXor in compute shaders
    bool subgroup_size_control = false;
    uint32_t min_subgroup_size = 0, max_subgroup_size = 0;
    // With a required subgroup size s, a workgroup holds at most s * this many invocations; 0: unknown
    // (then only max_workgroup_invocations bounds it).
    uint32_t max_workgroup_subgroups = 0;
    uint32_t max_shared_memory = 0;          // bytes per workgroup
    uint32_t max_workgroup_invocations = 0;
    // Multiprocessors or compute units where the driver says (VK_NV_shader_sm_builtins,
    // VK_AMD_shader_core_properties2, VK_ARM_shader_core_builtins); 0: unknown.
    uint32_t compute_units = 0;
    std::array<uint32_t, 3> max_workgroup_size{};
    std::array<uint32_t, 3> max_workgroup_count{};
    uint64_t max_storage_buffer_range = 0;
    uint64_t min_storage_buffer_offset_alignment = 0;
    uint64_t max_buffer_size = 0;            // largest single VkBuffer we will create
    uint32_t max_push_constants = 0;
    uint32_t max_storage_buffers_per_stage = 0;
    bool shader_float16 = false;
    bool shader_int8 = false;
    bool shader_int64 = false;    // 64-bit integers and floats in shaders: the device draws parameters'
    bool shader_float64 = false;  // initial values (codegen::initial_values_kernel)
    bool storage_16bit = false;
    bool shader_bfloat16 = false;
    bool buffer_device_address = false;
    bool vulkan_memory_model = false;
    std::vector<CoopMatrixShape> coop_nv;   // VK_NV_cooperative_matrix
    std::vector<CoopMatrixShape> coop_khr;  // VK_KHR_cooperative_matrix
    bool portability_subset = false;        // VK_KHR_portability_subset (MoltenVK): enabled at device creation
    bool timestamps = false;
    float timestamp_period_ns = 0;
    // > 0: the driver silently ends a shader invocation after this many loop iterations, all its
    // loops together (llvmpipe: 65,535); kernels with long loops split their work to stay under it.
    uint32_t max_loop_iterations = 0;
    std::vector<MemoryHeap> heaps;
};

// Human-readable multi-line description (used by `meganeura devices`).
std::string describe(const DeviceCaps& caps);

}  // namespace mn::rt
