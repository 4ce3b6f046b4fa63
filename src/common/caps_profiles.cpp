// The device classes of caps_profiles.hpp. Each is one real device's report, with the numbers that
// shape kernels: subgroup size and its range, shared memory, workgroup and grid limits, binding counts,
// f16 and cooperative-matrix support. Where the exact value is unknown to us (a driver release that
// changed it), the smaller one is used, so a kernel that fits the profile fits the device.
#include "common/caps_profiles.hpp"

namespace mn::rt {

namespace {

constexpr uint32_t vulkan_1(uint32_t minor) { return (1u << 22) | (minor << 12); }  // VK_MAKE_API_VERSION(0, 1, minor, 0)
constexpr uint64_t kGiB = 1ull << 30;

// A GPU's common ground: f32 everywhere, 1024 invocations, subgroup arithmetic and shuffles, timestamps.
DeviceCaps gpu(std::string name, std::string type) {
    DeviceCaps c;
    c.name = std::move(name);
    c.type = std::move(type);
    c.api_version = vulkan_1(3);
    c.subgroup_arithmetic = c.subgroup_shuffle = true;
    c.max_workgroup_invocations = 1024;
    c.max_workgroup_size = {1024, 1024, 64};
    c.max_workgroup_count = {65535, 65535, 65535};
    c.max_push_constants = 128;
    c.shader_float16 = c.shader_int8 = c.shader_int64 = c.shader_float64 = c.storage_16bit = true;
    c.buffer_device_address = true;
    c.timestamps = true;
    c.timestamp_period_ns = 1;
    return c;
}

void subgroups(DeviceCaps& c, uint32_t size, uint32_t min, uint32_t max, bool control, uint32_t per_workgroup) {
    c.subgroup_size = size;
    c.min_subgroup_size = min;
    c.max_subgroup_size = max;
    c.subgroup_size_control = control;
    c.max_workgroup_subgroups = per_workgroup;
}

CoopMatrixShape f16_shape(uint32_t m, uint32_t n, uint32_t k) { return {m, n, k, "f16", "f16", "f32", "f32"}; }

std::vector<CapsProfile> make_profiles() {
    std::vector<CapsProfile> out;

    // The performance machine (DEVICE.md): NVIDIA H200, driver 580.
    DeviceCaps nv = gpu("NVIDIA H200 (profile)", "discrete");
    subgroups(nv, 32, 32, 32, true, 32);
    nv.max_shared_memory = 48 * 1024;
    nv.compute_units = 132;
    nv.max_workgroup_count = {2147483647, 65535, 65535};
    nv.max_storage_buffer_range = 4 * kGiB - 1;
    nv.min_storage_buffer_offset_alignment = 16;
    nv.max_buffer_size = 64 * kGiB;
    nv.max_push_constants = 256;
    nv.max_storage_buffers_per_stage = 1048576;
    nv.vulkan_memory_model = nv.shader_bfloat16 = true;
    nv.coop_nv = {f16_shape(16, 16, 16), f16_shape(16, 8, 16), f16_shape(16, 8, 8)};
    nv.coop_khr = nv.coop_nv;
    nv.coop_khr.push_back({16, 16, 16, "bf16", "bf16", "f32", "f32"});
    nv.heaps = {{140 * kGiB, true}};
    out.push_back({"nvidia-h200", "NVIDIA H200 (Hopper, subgroup 32, 48 KiB shared, NV and KHR cooperative matrices)", nv});

    // AMD RDNA 3 (Radeon RX 7900 XTX, RADV): compute defaults to wave64, wave32 on request; 64 KiB
    // of LDS; 96 compute units (VK_AMD_shader_core_properties2); KHR cooperative matrices only.
    DeviceCaps amd64 = gpu("AMD Radeon RX 7900 XTX (profile)", "discrete");
    subgroups(amd64, 64, 32, 64, true, 32);
    amd64.max_shared_memory = 64 * 1024;
    amd64.compute_units = 96;
    amd64.max_storage_buffer_range = 4 * kGiB - 1;
    amd64.min_storage_buffer_offset_alignment = 4;
    amd64.max_buffer_size = 4 * kGiB;
    amd64.max_storage_buffers_per_stage = 8388606;
    amd64.vulkan_memory_model = true;
    amd64.coop_khr = {f16_shape(16, 16, 16)};
    amd64.heaps = {{24 * kGiB, true}, {32 * kGiB, false}};
    out.push_back({"amd-wave64", "AMD RDNA 3 (RX 7900 XTX: wave64 by default, 32..64, 64 KiB shared, KHR "
                                 "cooperative matrices)", amd64});

    // AMD RDNA 2 (Radeon RX 6800 XT) with wave32 as the compute default (RADV_PERFTEST=cswave32, and
    // AMD's own drivers on some releases); no cooperative matrices.
    DeviceCaps amd32 = amd64;
    amd32.name = "AMD Radeon RX 6800 XT (profile)";
    amd32.subgroup_size = 32;
    amd32.compute_units = 72;
    amd32.coop_khr.clear();
    amd32.heaps = {{16 * kGiB, true}, {32 * kGiB, false}};
    out.push_back({"amd-wave32", "AMD RDNA 2 (RX 6800 XT: wave32 by default, 32..64, 64 KiB shared, no "
                                 "cooperative matrices)", amd32});

    // Intel Arc A770 (ANV): the compiler picks SIMD8, 16 or 32 per shader unless a size is required,
    // so the reported 32 is only the largest; 64 KiB of shared local memory; no compute-unit count.
    DeviceCaps intel = gpu("Intel Arc A770 (profile)", "discrete");
    subgroups(intel, 32, 8, 32, true, 64);
    intel.max_shared_memory = 64 * 1024;
    intel.max_storage_buffer_range = kGiB;
    intel.min_storage_buffer_offset_alignment = 64;
    intel.max_buffer_size = 4 * kGiB;
    intel.max_push_constants = 256;
    intel.max_storage_buffers_per_stage = 8388606;
    intel.vulkan_memory_model = true;
    intel.coop_khr = {f16_shape(8, 8, 16)};
    intel.heaps = {{16 * kGiB, true}, {32 * kGiB, false}};
    out.push_back({"intel-arc", "Intel Arc A770 (subgroup 8..32, 64 KiB shared, KHR cooperative matrices at 8x8x16)",
                   intel});

    // An Apple M2 through MoltenVK (Vulkan 1.2 on Metal): SIMD groups of 32 with no size control,
    // 32 KiB threadgroup memory, Metal's 31 buffer slots per stage, no cooperative matrices (Metal's
    // simdgroup matrices are not exposed), no memory model; unified memory.
    DeviceCaps apple = gpu("Apple M2 (profile)", "integrated");
    apple.api_version = vulkan_1(2);
    subgroups(apple, 32, 32, 32, false, 32);
    apple.max_shared_memory = 32 * 1024;
    apple.max_storage_buffer_range = kGiB;
    apple.min_storage_buffer_offset_alignment = 16;
    apple.max_buffer_size = kGiB;
    apple.max_push_constants = 4096;
    apple.max_storage_buffers_per_stage = 31;
    apple.portability_subset = true;
    apple.heaps = {{16 * kGiB, true}};
    out.push_back({"apple-m2", "Apple M2 via MoltenVK (subgroup 32, 32 KiB shared, 31 buffers per stage, no "
                               "cooperative matrices)", apple});

    // Mesa lavapipe as CI sees it (DESIGN.md): a CPU driver that ends long loops.
    DeviceCaps cpu = gpu("llvmpipe (profile)", "cpu");
    subgroups(cpu, 8, 8, 8, true, 32);
    cpu.max_shared_memory = 32 * 1024;
    cpu.max_storage_buffer_range = 128 << 20;
    cpu.min_storage_buffer_offset_alignment = 16;
    cpu.max_buffer_size = 2 * kGiB;
    cpu.max_storage_buffers_per_stage = 32;
    cpu.vulkan_memory_model = true;
    cpu.max_loop_iterations = 65535;
    cpu.heaps = {{2 * kGiB, false}};
    out.push_back({"lavapipe", "Mesa lavapipe (CPU, subgroup 8, 32 KiB shared, loops end after 65,535 iterations)",
                   cpu});
    return out;
}

}  // namespace

const std::vector<CapsProfile>& caps_profiles() {
    static const std::vector<CapsProfile> profiles = make_profiles();
    return profiles;
}

const CapsProfile* find_caps_profile(const std::string& name) {
    for (const CapsProfile& p : caps_profiles())
        if (p.name == name) return &p;
    return nullptr;
}

}  // namespace mn::rt
