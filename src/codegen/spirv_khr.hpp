#pragma once
// SPV_NV_cooperative_matrix -> SPV_KHR_cooperative_matrix on a compiled SPIR-V module: the cooperative
// kernels are written in GLSL for glslang 12, which knows only GL_NV_cooperative_matrix, and devices
// other than NVIDIA's expose only VK_KHR_cooperative_matrix (issue 19). spirv_khr.cpp says how.
#include <cstdint>
#include <vector>

namespace mn::codegen {

// SPV_KHR_cooperative_matrix's numbers (SPIRV-Headers' spirv.core.grammar.json; glslang 12's spirv.hpp
// predates the extension).
namespace khr {
inline constexpr uint32_t OpTypeCooperativeMatrix = 4456, OpCooperativeMatrixLoad = 4457,
                          OpCooperativeMatrixStore = 4458, OpCooperativeMatrixMulAdd = 4459,
                          OpCooperativeMatrixLength = 4460, CapabilityCooperativeMatrix = 6022;
enum Use : uint32_t { MatrixA = 0, MatrixB = 1, MatrixAccumulator = 2 };  // Cooperative Matrix Use
enum Layout : uint32_t { RowMajor = 0, ColumnMajor = 1 };                 // Cooperative Matrix Layout
inline constexpr const char* kExtension = "SPV_KHR_cooperative_matrix";
}  // namespace khr

// Bumped whenever nv_to_khr's output changes, so that the shader cache (its key includes this) does not
// hand out modules an older rewrite produced.
inline constexpr uint32_t kNvToKhrVersion = 1;

// The module with its NV cooperative-matrix capability, extension, types and instructions replaced by
// the KHR ones, computing the same; a module that does not declare CooperativeMatrixNV comes back
// unchanged. Throws mn::Error, naming the value and why, for a module the rewrite cannot express in
// KHR terms: a matrix used as two different operands of products (KHR types have one use each), a matrix
// passed to a function or held in a struct, a layout that is not a constant.
std::vector<uint32_t> nv_to_khr(const std::vector<uint32_t>& spirv);

}  // namespace mn::codegen
