// The device-fit check of device_fit.hpp. Shared memory is read from the SPIR-V rather than from the
// families' own estimates (matmul's coop_shared_bytes, attention's Footprint), so a family whose
// estimate drifts from the arrays it declares is caught too. A Workgroup variable's size is its
// type's: scalars and vectors at their width, arrays at their length, which may be a specialization
// constant (attention's rows are head_dim + 1 long) or an expression of them, evaluated with the
// dispatch's values. Drivers may pad a little more.
#include "codegen/device_fit.hpp"
#include "codegen/spirv_khr.hpp"

#include <glslang/SPIRV/spirv.hpp>

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "meganeura/error.hpp"

namespace mn::codegen {

namespace {

// The capabilities a device must report for a module that declares them.
struct Requirement {
    uint32_t capability;
    const char* what;
    bool (*has)(const rt::DeviceCaps&);
};
const Requirement kRequirements[] = {
    {spv::CapabilityFloat16, "f16 arithmetic", [](const rt::DeviceCaps& c) { return c.shader_float16; }},
    {spv::CapabilityInt8, "8-bit integers", [](const rt::DeviceCaps& c) { return c.shader_int8; }},
    {spv::CapabilityStorageBuffer16BitAccess, "16-bit storage", [](const rt::DeviceCaps& c) { return c.storage_16bit; }},
    {spv::CapabilityGroupNonUniformArithmetic, "subgroup arithmetic",
     [](const rt::DeviceCaps& c) { return c.subgroup_arithmetic; }},
    {spv::CapabilityGroupNonUniformShuffle, "subgroup shuffles", [](const rt::DeviceCaps& c) { return c.subgroup_shuffle; }},
    {spv::CapabilityCooperativeMatrixNV, "NV cooperative matrices", [](const rt::DeviceCaps& c) { return !c.coop_nv.empty(); }},
    {khr::CapabilityCooperativeMatrix, "KHR cooperative matrices",
     [](const rt::DeviceCaps& c) { return !c.coop_khr.empty(); }},
    {spv::CapabilityVulkanMemoryModel, "the Vulkan memory model", [](const rt::DeviceCaps& c) { return c.vulkan_memory_model; }},
    {spv::CapabilityPhysicalStorageBufferAddresses, "buffer device addresses",
     [](const rt::DeviceCaps& c) { return c.buffer_device_address; }},
};

// The value of an OpSpecConstantOp on 32-bit unsigned operands; nullopt for an operation that no
// array length of ours uses.
std::optional<uint32_t> spec_op(uint32_t op, uint32_t a, uint32_t b) {
    switch (op) {
        case spv::OpIAdd: return a + b;
        case spv::OpISub: return a - b;
        case spv::OpIMul: return a * b;
        case spv::OpUDiv:
        case spv::OpSDiv: return b ? std::optional<uint32_t>(a / b) : std::nullopt;
        case spv::OpUMod: return b ? std::optional<uint32_t>(a % b) : std::nullopt;
        case spv::OpShiftLeftLogical: return a << (b & 31);
        case spv::OpShiftRightLogical: return a >> (b & 31);
        case spv::OpBitwiseAnd: return a & b;
        case spv::OpBitwiseOr: return a | b;
        default: return std::nullopt;
    }
}

// Capabilities whose code depends on how invocations are grouped into subgroups.
bool subgroup_dependent(uint32_t capability) {
    return (capability >= spv::CapabilityGroupNonUniform && capability <= spv::CapabilityGroupNonUniformQuad) ||
           capability == spv::CapabilityCooperativeMatrixNV || capability == khr::CapabilityCooperativeMatrix;
}

}  // namespace

SpirvNeeds spirv_needs(const std::vector<uint32_t>& spirv, const std::vector<uint32_t>& spec_values) {
    constexpr size_t kHeaderWords = 5;
    SpirvNeeds needs;
    std::unordered_map<uint32_t, uint64_t> type_bytes;
    std::unordered_map<uint32_t, uint32_t> constants, spec_ids;  // id -> value; id -> constant_id
    std::unordered_set<uint32_t> unsized;  // types holding an array whose length is not known
    std::unordered_map<uint32_t, std::pair<uint32_t, uint32_t>> pointers;  // id -> (storage class, pointee)
    for (size_t at = kHeaderWords; at < spirv.size();) {
        const uint32_t count = spirv[at] >> 16, op = spirv[at] & 0xFFFF;
        if (count == 0 || at + count > spirv.size()) throw Error("SPIR-V: a truncated instruction at word " + std::to_string(at));
        const uint32_t* w = &spirv[at + 1];
        auto bytes_of = [&](uint32_t type) {
            auto it = type_bytes.find(type);
            return it == type_bytes.end() ? uint64_t(0) : it->second;
        };
        switch (op) {
            case spv::OpCapability: needs.capabilities.push_back(w[0]); break;
            case spv::OpTypeBool: type_bytes[w[0]] = 4; break;
            case spv::OpTypeInt:
            case spv::OpTypeFloat: type_bytes[w[0]] = w[1] / 8; break;
            case spv::OpTypeVector:
            case spv::OpTypeMatrix: type_bytes[w[0]] = bytes_of(w[1]) * w[2]; break;
            case spv::OpTypeArray: {
                const auto length = constants.find(w[2]);
                if (length == constants.end() || unsized.count(w[1])) unsized.insert(w[0]);
                else type_bytes[w[0]] = bytes_of(w[1]) * length->second;
                break;
            }
            case spv::OpTypeStruct: {
                uint64_t sum = 0;
                for (uint32_t i = 1; i + 1 < count; ++i) {  // w[0] is the result
                    if (unsized.count(w[i])) unsized.insert(w[0]);
                    sum += bytes_of(w[i]);
                }
                type_bytes[w[0]] = sum;
                break;
            }
            case spv::OpTypePointer: pointers[w[0]] = {w[1], w[2]}; break;
            case spv::OpDecorate:
                if (w[1] == spv::DecorationSpecId) spec_ids[w[0]] = w[2];
                break;
            case spv::OpConstant: constants[w[1]] = w[2]; break;
            case spv::OpSpecConstant: {
                const auto id = spec_ids.find(w[1]);
                constants[w[1]] = id != spec_ids.end() && id->second < spec_values.size() ? spec_values[id->second] : w[2];
                break;
            }
            case spv::OpSpecConstantOp: {
                const auto a = constants.find(w[3]), b = count > 5 ? constants.find(w[4]) : constants.end();
                if (count != 6 || a == constants.end() || b == constants.end()) break;
                if (const auto v = spec_op(w[2], a->second, b->second)) constants[w[1]] = *v;
                break;
            }
            case spv::OpVariable:
                if (w[2] != spv::StorageClassWorkgroup) break;
                if (unsized.count(pointers.at(w[0]).second))
                    throw Error("SPIR-V: a shared array whose length this check cannot evaluate");
                needs.shared_bytes += bytes_of(pointers.at(w[0]).second);
                break;
            default: break;
        }
        at += count;
    }
    return needs;
}

std::vector<std::string> device_misfits(const KernelSource& k, const SpirvNeeds& needs, const rt::DeviceCaps& caps) {
    std::vector<std::string> out;
    auto misfit = [&](const std::string& what, uint64_t needed, uint64_t has) {
        out.push_back(what + ": " + std::to_string(needed) + ", the device's limit " + std::to_string(has));
    };
    const uint32_t wg = k.iface.local_size;
    if (wg > std::min(caps.max_workgroup_invocations, caps.max_workgroup_size[0]))
        misfit("workgroup invocations", wg, std::min(caps.max_workgroup_invocations, caps.max_workgroup_size[0]));
    for (size_t d = 0; d < 3; ++d) {
        if (k.groups[d] > caps.max_workgroup_count[d]) misfit("workgroups along dimension " + std::to_string(d), k.groups[d], caps.max_workgroup_count[d]);
    }
    if (k.iface.bindings.size() > caps.max_storage_buffers_per_stage)
        misfit("storage buffers", k.iface.bindings.size(), caps.max_storage_buffers_per_stage);
    if (needs.shared_bytes > caps.max_shared_memory) misfit("shared memory bytes", needs.shared_bytes, caps.max_shared_memory);

    bool uses_subgroups = false;
    for (uint32_t c : needs.capabilities) {
        uses_subgroups = uses_subgroups || subgroup_dependent(c);
        for (const Requirement& r : kRequirements) {
            if (r.capability == c && !r.has(caps)) out.push_back(std::string("needs ") + r.what + ", which the device lacks");
        }
    }
    const uint32_t sg = k.required_subgroup_size;
    const std::string range = std::to_string(caps.min_subgroup_size) + ".." + std::to_string(caps.max_subgroup_size);
    if (sg == 0) {
        if (uses_subgroups && caps.min_subgroup_size != caps.max_subgroup_size)
            out.push_back("uses subgroup operations without requiring a subgroup size, on a device whose subgroups are " +
                          range + " wide");
        return out;
    }
    if (!caps.subgroup_size_control) out.push_back("requires subgroup size " + std::to_string(sg) + ", the device has no subgroup size control");
    if (sg < caps.min_subgroup_size || sg > caps.max_subgroup_size)
        out.push_back("requires subgroup size " + std::to_string(sg) + ", outside the device's " + range);
    if (wg % sg) out.push_back("a workgroup of " + std::to_string(wg) + " is not whole subgroups of " + std::to_string(sg));
    if (caps.max_workgroup_subgroups && wg / sg > caps.max_workgroup_subgroups)
        misfit("subgroups per workgroup", wg / sg, caps.max_workgroup_subgroups);
    return out;
}

}  // namespace mn::codegen
