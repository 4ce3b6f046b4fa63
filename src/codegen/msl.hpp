#pragma once
// SPIR-V -> Metal Shading Language through SPIRV-Cross (its C API, linked statically), the way
// MoltenVK turns our kernels into Metal on an Apple GPU: `meganeura shaders --msl` writes them, and
// CI converts every kernel of every model so that a construct Metal cannot express is found here.
#include <cstdint>
#include <string>
#include <vector>

namespace mn::codegen {

// The kernel as MSL 2.3 for macOS (Apple silicon's baseline): storage buffer binding i is
// [[buffer(i)]], specialization constant i is [[function_constant(i)]]. Throws mn::Error with
// SPIRV-Cross's message.
std::string spirv_to_msl(const std::vector<uint32_t>& spirv);

}  // namespace mn::codegen
