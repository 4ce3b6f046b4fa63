#pragma once
// Whether a compiled kernel fits a device: the limits a driver would reject the pipeline or the
// dispatch for (or, worse, silently run it wrong), checked from the kernel and its SPIR-V before
// anything reaches the driver. compile runs it on every dispatch, so an oversized tile is an error
// that names the kernel and the limit; the caps tests run it on device classes absent here.
#include <string>
#include <vector>

#include "codegen/kernel.hpp"
#include "common/device_caps.hpp"

namespace mn::codegen {

// What the SPIR-V asks of a device, read from the module itself, with `spec_values` as its
// specialization constants (constant_id i: spec_values[i]; the module's defaults for the others).
struct SpirvNeeds {
    std::vector<uint32_t> capabilities;  // OpCapability operands
    uint64_t shared_bytes = 0;           // Workgroup-storage variables, each at its declared size
};
SpirvNeeds spirv_needs(const std::vector<uint32_t>& spirv, const std::vector<uint32_t>& spec_values);

// One line per limit the kernel passes on this device ("shared memory: 40960 bytes, the device has
// 32768"); empty when it fits. Checks the workgroup size and grid, the storage-buffer bindings, the
// shared memory, the capabilities (f16, 16-bit storage, subgroup arithmetic, cooperative matrices,
// the memory model) and the subgroup assumptions: a kernel that uses subgroup operations on a device
// whose subgroup size varies must require a size, which must be one the device can run with full
// subgroups.
std::vector<std::string> device_misfits(const KernelSource& kernel, const SpirvNeeds& needs, const rt::DeviceCaps& caps);

}  // namespace mn::codegen
