// The NV -> KHR cooperative-matrix rewrite (codegen/spirv_khr.hpp). Debian's SPIRV-Tools (2023.1) does
// not know SPV_KHR_cooperative_matrix, so spirv-val cannot check the rewritten modules (it validates the
// NV inputs); khr_problems below checks them structurally instead: no NV opcode, capability or extension
// left, every KHR matrix type with a Use, every product's operands of uses A, B and accumulator and of
// matching shapes, loads, stores, conversions and arithmetic between matching types, ids defined once
// and before use, the header's id bound. A hand-written 16x16x16 product is checked word for word, and
// every cooperative kernel of every model, as the H200 would get it, structurally. Once, by hand
// (2026-12-02), a newer spirv-val (SPIRV-Tools v2026.4 built from source, --target-env vulkan1.3) passed
// all of them (`MEGANEURA_COOP=khr meganeura shaders --caps nvidia-h200 --precision fast`, the five models
// tiny and full, and with MEGANEURA_FAST_GRADIENTS=f16: 172 modules) and rejected a B type given the A
// or the accumulator use. Whether the result computes what the NV module does is the H200's to say
// (scripts/h200_coop_khr.sh).
#define SPV_ENABLE_UTILITY_CODE  // spv::HasResultAndType
#include <glslang/SPIRV/spirv.hpp>
#include <gtest/gtest.h>
#include <spirv-tools/libspirv.hpp>

#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

#include "codegen/spirv_khr.hpp"
#include "common/caps_profiles.hpp"
#include "error_of.hpp"
#include "every_kernel.hpp"
#include "meganeura/autodiff.hpp"
#include "temp_dir.hpp"

namespace mn::test {
namespace {

using Words = std::vector<uint32_t>;

// ---- a little assembler --------------------------------------------------------------------------

void op(Words& m, uint32_t opcode, Words operands) {
    m.push_back(uint32_t(operands.size() + 1) << 16 | opcode);
    m.insert(m.end(), operands.begin(), operands.end());
}

Words text(const std::string& s) {
    Words w(s.size() / 4 + 1, 0u);
    std::memcpy(w.data(), s.data(), s.size());
    return w;
}

Words cat(Words a, const Words& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// ---- the structural check -------------------------------------------------------------------------

struct Instruction {
    uint32_t op;
    Words w;  // w[0] is the first operand's word
};

std::vector<Instruction> instructions(const Words& m) {
    std::vector<Instruction> out;
    for (size_t at = 5; at < m.size(); at += m[at] >> 16) {
        if ((m[at] >> 16) == 0 || at + (m[at] >> 16) > m.size()) throw Error("truncated module");
        out.push_back({m[at] & 0xFFFFu, Words(m.begin() + long(at) + 1, m.begin() + long(at + (m[at] >> 16)))});
    }
    return out;
}

// Result type and result positions in w (-1: none), the KHR instructions included.
std::pair<int, int> slots(uint32_t opcode) {
    if (opcode == codegen::khr::OpTypeCooperativeMatrix) return {-1, 0};
    if (opcode == codegen::khr::OpCooperativeMatrixLoad || opcode == codegen::khr::OpCooperativeMatrixMulAdd ||
        opcode == codegen::khr::OpCooperativeMatrixLength)
        return {0, 1};
    if (opcode == codegen::khr::OpCooperativeMatrixStore) return {-1, -1};
    bool result = false, type = false;
    spv::HasResultAndType(spv::Op(opcode), &result, &type);
    return {type ? 0 : -1, result ? (type ? 1 : 0) : -1};
}

bool is_nv(uint32_t opcode) {
    return opcode >= spv::OpTypeCooperativeMatrixNV && opcode <= spv::OpCooperativeMatrixLengthNV;
}

struct Counts {
    int loads = 0, stores = 0, products = 0;
    bool operator==(const Counts&) const = default;
};

Counts count(const Words& m) {
    Counts c;
    for (const Instruction& in : instructions(m)) {
        c.loads += in.op == spv::OpCooperativeMatrixLoadNV || in.op == codegen::khr::OpCooperativeMatrixLoad;
        c.stores += in.op == spv::OpCooperativeMatrixStoreNV || in.op == codegen::khr::OpCooperativeMatrixStore;
        c.products += in.op == spv::OpCooperativeMatrixMulAddNV || in.op == codegen::khr::OpCooperativeMatrixMulAdd;
    }
    return c;
}

// What is wrong with a KHR module, one line each.
std::vector<std::string> khr_problems(const Words& m) {
    std::vector<std::string> out;
    struct Matrix {
        uint32_t component, rows, cols, use;
    };
    std::unordered_map<uint32_t, size_t> defined;  // id -> instruction index
    std::unordered_map<uint32_t, uint32_t> type_of, value, pointee, element;
    std::unordered_map<uint32_t, Matrix> matrices;
    uint32_t max_id = 0;
    bool capability = false, extension = false;
    const std::vector<Instruction> code = instructions(m);
    for (size_t i = 0; i < code.size(); ++i) {
        const Instruction& in = code[i];
        const std::string at = "instruction " + std::to_string(i) + " (opcode " + std::to_string(in.op) + ")";
        auto before = [&](uint32_t id, const char* what) {
            const auto d = defined.find(id);
            if (d == defined.end() || d->second >= i) out.push_back(at + ": " + what + " %" + std::to_string(id) + " is not defined before");
            return d != defined.end();
        };
        auto constant = [&](uint32_t id, const char* what) -> uint32_t {
            if (!value.count(id)) {
                out.push_back(at + ": " + what + " %" + std::to_string(id) + " is not a 32-bit constant");
                return UINT32_MAX;
            }
            before(id, what);
            return value.at(id);
        };
        auto matrix_of = [&](uint32_t id, const char* what) -> Matrix {
            const auto t = type_of.find(id);
            if (t == type_of.end() || !matrices.count(t->second)) {
                out.push_back(at + ": " + what + " %" + std::to_string(id) + " is not a cooperative matrix");
                return {0, 0, 0, UINT32_MAX};
            }
            return matrices.at(t->second);
        };
        if (is_nv(in.op)) out.push_back(at + ": an NV opcode");
        const auto [type, result] = slots(in.op);
        if (result >= 0) {
            const uint32_t id = in.w[size_t(result)];
            if (!defined.emplace(id, i).second) out.push_back(at + ": %" + std::to_string(id) + " is defined twice");
            max_id = std::max(max_id, id);
        }
        if (type >= 0) {
            before(in.w[size_t(type)], "result type");
            type_of[in.w[size_t(result)]] = in.w[size_t(type)];
        }
        switch (in.op) {
            case spv::OpCapability:
                if (in.w[0] == spv::CapabilityCooperativeMatrixNV) out.push_back(at + ": the NV capability");
                capability = capability || in.w[0] == codegen::khr::CapabilityCooperativeMatrix;
                break;
            case spv::OpExtension: {
                const std::string name(reinterpret_cast<const char*>(in.w.data()));
                if (name == "SPV_NV_cooperative_matrix") out.push_back(at + ": the NV extension");
                extension = extension || name == codegen::khr::kExtension;
                break;
            }
            case spv::OpConstant:
                if (in.w.size() == 3) value[in.w[1]] = in.w[2];
                break;
            case spv::OpTypeArray:
                before(in.w[1], "element type");
                before(in.w[2], "length");
                element[in.w[0]] = in.w[1];
                break;
            case spv::OpTypeRuntimeArray:
                before(in.w[1], "element type");
                element[in.w[0]] = in.w[1];
                break;
            case spv::OpTypePointer:
                before(in.w[2], "pointee");
                pointee[in.w[0]] = in.w[2];
                break;
            case codegen::khr::OpTypeCooperativeMatrix: {
                if (in.w.size() != 6) {
                    out.push_back(at + ": a matrix type of " + std::to_string(in.w.size()) + " operands, not 6 (with its Use)");
                    break;
                }
                before(in.w[1], "component type");
                constant(in.w[2], "scope");
                const Matrix t{in.w[1], constant(in.w[3], "rows"), constant(in.w[4], "columns"), constant(in.w[5], "use")};
                if (t.use > codegen::khr::MatrixAccumulator) out.push_back(at + ": use " + std::to_string(t.use));
                matrices[in.w[0]] = t;
                break;
            }
            case codegen::khr::OpCooperativeMatrixLoad:     // type, result, pointer, layout, stride, [memory]
            case codegen::khr::OpCooperativeMatrixStore: {  // pointer, object, layout, stride, [memory]
                const bool load = in.op == codegen::khr::OpCooperativeMatrixLoad;
                const size_t pointer = load ? 2 : 0, layout = load ? 3 : 2;
                before(in.w[pointer], "pointer");
                if (!load) before(in.w[1], "stored object");
                matrix_of(in.w[1], load ? "loaded value" : "stored object");
                if (constant(in.w[layout], "layout") > codegen::khr::ColumnMajor) out.push_back(at + ": a layout past ColumnMajorKHR");
                before(in.w[layout + 1], "stride");
                break;
            }
            case codegen::khr::OpCooperativeMatrixMulAdd: {  // type, result, A, B, C
                for (size_t k = 2; k < 5; ++k) before(in.w[k], "operand");
                const Matrix a = matrix_of(in.w[2], "A"), b = matrix_of(in.w[3], "B"), c = matrix_of(in.w[4], "C"),
                             r = matrix_of(in.w[1], "result");
                if (a.use != codegen::khr::MatrixA || b.use != codegen::khr::MatrixB || c.use != codegen::khr::MatrixAccumulator ||
                    r.use != codegen::khr::MatrixAccumulator)
                    out.push_back(at + ": operand uses " + std::to_string(a.use) + ", " + std::to_string(b.use) + ", " +
                                  std::to_string(c.use) + " -> " + std::to_string(r.use) + ", not A, B, accumulator -> accumulator");
                if (a.rows != r.rows || a.cols != b.rows || b.cols != r.cols || c.rows != r.rows || c.cols != r.cols)
                    out.push_back(at + ": shapes that do not multiply");
                break;
            }
            case codegen::khr::OpCooperativeMatrixLength:
                if (!matrices.count(in.w[2])) out.push_back(at + ": the length of a type that is no matrix");
                break;
            case spv::OpAccessChain: {  // type, result, base, indices: each index into an array takes its element type
                uint32_t t = pointee[type_of[in.w[2]]];
                for (size_t k = 3; k < in.w.size() && element.count(t); ++k) t = element.at(t);
                const uint32_t want = pointee[in.w[0]];
                uint32_t inner = want;
                while (element.count(inner)) inner = element.at(inner);
                if (matrices.count(inner) && t != want)
                    out.push_back(at + ": an access chain to a matrix (or an array of them) of another type than its base's");
                break;
            }
            case spv::OpLoad:
                if (matrices.count(in.w[0]) && pointee[type_of[in.w[2]]] != in.w[0])
                    out.push_back(at + ": a matrix loaded through a pointer to another type");
                break;
            case spv::OpStore:
                if (matrices.count(pointee[type_of[in.w[0]]]) && pointee[type_of[in.w[0]]] != type_of[in.w[1]])
                    out.push_back(at + ": a matrix stored through a pointer to another type");
                break;
            case spv::OpFConvert:
                if (matrices.count(in.w[0])) {
                    const Matrix from = matrix_of(in.w[2], "converted value"), to = matrices.at(in.w[0]);
                    if (from.use != to.use || from.rows != to.rows || from.cols != to.cols)
                        out.push_back(at + ": a conversion between matrices of other uses or shapes");
                }
                break;
            case spv::OpFAdd:
            case spv::OpFSub:
            case spv::OpFMul:
            case spv::OpFDiv:
            case spv::OpMatrixTimesScalar:
                if (matrices.count(in.w[0]) && (type_of[in.w[2]] != in.w[0] ||
                                                (in.op != spv::OpMatrixTimesScalar && type_of[in.w[3]] != in.w[0])))
                    out.push_back(at + ": matrix arithmetic between different types");
                break;
            default: break;
        }
    }
    if (!matrices.empty() && !(capability && extension)) out.push_back("KHR matrices without the KHR capability and extension");
    if (m[3] != max_id + 1) out.push_back("id bound " + std::to_string(m[3]) + ", largest id " + std::to_string(max_id));
    return out;
}

// ---- a hand-written product -------------------------------------------------------------------------

// Ids of the hand-written modules: types and constants, then the NV matrix types, then the function.
enum : uint32_t {
    kVoid = 1, kFn, kUint, kHalf, kFloat, kBool, kU3, kU16, kU256, kU0, kU2, kFalse, kTrue, kF0,
    kMh, kMf,  // NV f16 and f32 16x16 matrices
    kCf,       // an f32 matrix of zeros
    kArrH, kPArrH, kPH, kS, kArrF, kPArrF, kPF, kT, kMain, kLabel,
    kFirstLocal  // the function's own values start here
};

// The module's words up to its NV matrix types, with this capability and extension.
Words head(uint32_t bound, uint32_t capability, const std::string& extension) {
    Words m = {0x07230203, 0x00010600, 0, bound, 0};  // SPIR-V 1.6
    for (uint32_t c : {uint32_t(spv::CapabilityShader), uint32_t(spv::CapabilityFloat16),
                       uint32_t(spv::CapabilityVulkanMemoryModel), capability})
        op(m, spv::OpCapability, {c});
    op(m, spv::OpExtension, text(extension));
    op(m, spv::OpMemoryModel, {spv::AddressingModelLogical, spv::MemoryModelVulkan});
    op(m, spv::OpEntryPoint, cat(cat({spv::ExecutionModelGLCompute, kMain}, text("main")), {kS, kT}));
    op(m, spv::OpExecutionMode, {kMain, spv::ExecutionModeLocalSize, 32, 1, 1});
    op(m, spv::OpTypeVoid, {kVoid});
    op(m, spv::OpTypeFunction, {kFn, kVoid});
    op(m, spv::OpTypeInt, {kUint, 32, 0});
    op(m, spv::OpTypeFloat, {kHalf, 16});
    op(m, spv::OpTypeFloat, {kFloat, 32});
    op(m, spv::OpTypeBool, {kBool});
    op(m, spv::OpConstant, {kUint, kU3, 3});  // Subgroup
    op(m, spv::OpConstant, {kUint, kU16, 16});
    op(m, spv::OpConstant, {kUint, kU256, 256});
    op(m, spv::OpConstant, {kUint, kU0, 0});
    op(m, spv::OpConstant, {kUint, kU2, 2});  // Workgroup; also MatrixAccumulatorKHR
    op(m, spv::OpConstantFalse, {kBool, kFalse});
    op(m, spv::OpConstantTrue, {kBool, kTrue});
    op(m, spv::OpConstant, {kFloat, kF0, 0});
    return m;
}

// After the matrix types: the zero matrix, shared f16 and f32 arrays S and T, and main's opening.
Words middle() {
    Words m;
    op(m, spv::OpConstantComposite, {kMf, kCf, kF0});
    op(m, spv::OpTypeArray, {kArrH, kHalf, kU256});
    op(m, spv::OpTypePointer, {kPArrH, spv::StorageClassWorkgroup, kArrH});
    op(m, spv::OpTypePointer, {kPH, spv::StorageClassWorkgroup, kHalf});
    op(m, spv::OpVariable, {kPArrH, kS, spv::StorageClassWorkgroup});
    op(m, spv::OpTypeArray, {kArrF, kFloat, kU256});
    op(m, spv::OpTypePointer, {kPArrF, spv::StorageClassWorkgroup, kArrF});
    op(m, spv::OpTypePointer, {kPF, spv::StorageClassWorkgroup, kFloat});
    op(m, spv::OpVariable, {kPArrF, kT, spv::StorageClassWorkgroup});
    op(m, spv::OpFunction, {kVoid, kMain, spv::FunctionControlMaskNone, kFn});
    op(m, spv::OpLabel, {kLabel});
    return m;
}

Words tail() {
    Words m;
    op(m, spv::OpReturn, {});
    op(m, spv::OpFunctionEnd, {});
    return m;
}

// An NV module whose main is `body` (ids from kFirstLocal).
Words nv_module(uint32_t bound, const std::function<void(Words&)>& body) {
    Words m = head(bound, spv::CapabilityCooperativeMatrixNV, "SPV_NV_cooperative_matrix");
    op(m, spv::OpTypeCooperativeMatrixNV, {kMh, kHalf, kU3, kU16, kU16});
    op(m, spv::OpTypeCooperativeMatrixNV, {kMf, kFloat, kU3, kU16, kU16});
    m = cat(m, middle());
    body(m);
    return cat(m, tail());
}

constexpr uint32_t kVisible = uint32_t(spv::MemoryAccessMakePointerVisibleMask) | spv::MemoryAccessNonPrivatePointerMask;
constexpr uint32_t kAvailable = uint32_t(spv::MemoryAccessMakePointerAvailableMask) | spv::MemoryAccessNonPrivatePointerMask;

// d = a b + 0 with a = S row-major and b = S column-major (f16), d stored to T as it is and to S as
// f16: the f16 type is A, B and an accumulator at once.
enum : uint32_t { kPa = kFirstLocal, kA, kB, kD, kPt, kH, kProductBound };
Words nv_product() {
    return nv_module(kProductBound, [](Words& m) {
        op(m, spv::OpAccessChain, {kPH, kPa, kS, kU0});
        op(m, spv::OpCooperativeMatrixLoadNV, {kMh, kA, kPa, kU16, kFalse, kVisible, kU2});
        op(m, spv::OpCooperativeMatrixLoadNV, {kMh, kB, kPa, kU16, kTrue});
        op(m, spv::OpCooperativeMatrixMulAddNV, {kMf, kD, kA, kB, kCf});
        op(m, spv::OpAccessChain, {kPF, kPt, kT, kU0});
        op(m, spv::OpCooperativeMatrixStoreNV, {kPt, kD, kU16, kFalse, kAvailable, kU2});
        op(m, spv::OpFConvert, {kMh, kH, kD});
        op(m, spv::OpCooperativeMatrixStoreNV, {kPa, kH, kU16, kTrue});
    });
}

void expect_valid_nv(const Words& m) {
    spvtools::SpirvTools tools(SPV_ENV_VULKAN_1_3);
    std::string log;
    tools.SetMessageConsumer([&](spv_message_level_t, const char*, const spv_position_t&, const char* message) {
        log += std::string(message) + "\n";
    });
    EXPECT_TRUE(tools.Validate(m)) << log;
}

TEST(SpirvKhr, AHandWrittenProductIsRewrittenWordForWord) {
    const Words nv = nv_product();
    expect_valid_nv(nv);  // the input is a real module (spirv-val knows NV)
    // The f16 type keeps its id as MatrixA and is declared again as MatrixB and as an accumulator (the
    // conversion's result keeps the f32 product's use); the constants 0 and 2 exist, 1 is new.
    enum : uint32_t { kMhB = kProductBound, kMhC, kOne, kBound };
    Words want = head(kBound, codegen::khr::CapabilityCooperativeMatrix, "SPV_KHR_cooperative_matrix");
    op(want, spv::OpConstant, {kUint, kOne, 1});
    op(want, codegen::khr::OpTypeCooperativeMatrix, {kMh, kHalf, kU3, kU16, kU16, kU0});
    op(want, codegen::khr::OpTypeCooperativeMatrix, {kMhB, kHalf, kU3, kU16, kU16, kOne});
    op(want, codegen::khr::OpTypeCooperativeMatrix, {kMhC, kHalf, kU3, kU16, kU16, kU2});
    op(want, codegen::khr::OpTypeCooperativeMatrix, {kMf, kFloat, kU3, kU16, kU16, kU2});
    want = cat(want, middle());
    op(want, spv::OpAccessChain, {kPH, kPa, kS, kU0});
    op(want, codegen::khr::OpCooperativeMatrixLoad, {kMh, kA, kPa, kU0, kU16, kVisible, kU2});  // row major: 0
    op(want, codegen::khr::OpCooperativeMatrixLoad, {kMhB, kB, kPa, kOne, kU16});               // column major: 1
    op(want, codegen::khr::OpCooperativeMatrixMulAdd, {kMf, kD, kA, kB, kCf});
    op(want, spv::OpAccessChain, {kPF, kPt, kT, kU0});
    op(want, codegen::khr::OpCooperativeMatrixStore, {kPt, kD, kU0, kU16, kAvailable, kU2});
    op(want, spv::OpFConvert, {kMhC, kH, kD});
    op(want, codegen::khr::OpCooperativeMatrixStore, {kPa, kH, kOne, kU16});
    want = cat(want, tail());

    const Words got = codegen::nv_to_khr(nv);
    const std::vector<Instruction> g = instructions(got), w = instructions(want);
    ASSERT_EQ(g.size(), w.size());
    for (size_t i = 0; i < w.size(); ++i) {
        EXPECT_EQ(g[i].op, w[i].op) << "instruction " << i;
        EXPECT_EQ(g[i].w, w[i].w) << "instruction " << i << " (opcode " << w[i].op << ")";
    }
    EXPECT_EQ(got, want);
    for (const std::string& p : khr_problems(got)) ADD_FAILURE() << p;
}

TEST(SpirvKhr, AMatrixInNoProductIsAnAccumulator) {
    // Loaded and stored only (as a kernel would load a matrix of indices to learn where an accumulator's elements
    // lie): it is laid out as an accumulator.
    const Words nv = nv_module(kFirstLocal + 2, [](Words& m) {
        op(m, spv::OpAccessChain, {kPH, kFirstLocal, kS, kU0});
        op(m, spv::OpCooperativeMatrixLoadNV, {kMh, kFirstLocal + 1, kFirstLocal, kU16, kFalse});
        op(m, spv::OpCooperativeMatrixStoreNV, {kFirstLocal, kFirstLocal + 1, kU16, kTrue});
    });
    expect_valid_nv(nv);
    const Words got = codegen::nv_to_khr(nv);
    for (const std::string& p : khr_problems(got)) ADD_FAILURE() << p;
    int declared = 0;
    for (const Instruction& in : instructions(got)) {
        if (in.op != codegen::khr::OpTypeCooperativeMatrix || in.w[0] != kMh) continue;
        ++declared;
        EXPECT_EQ(in.w.back(), kU2) << "the f16 matrix's use (the constant 2: MatrixAccumulator)";
    }
    EXPECT_EQ(declared, 1);
}

TEST(SpirvKhr, AModuleWithoutNvMatricesComesBackUnchanged) {
    Words m = head(kFirstLocal, spv::CapabilityFloat16, "SPV_KHR_vulkan_memory_model");
    m = cat(m, tail());
    EXPECT_EQ(codegen::nv_to_khr(m), m);
}

TEST(SpirvKhr, WhatKhrCannotSayIsAnErrorNamingTheValue) {
    // One matrix as both operands of a product: a KHR type has one use.
    const Words both = nv_module(kFirstLocal + 3, [](Words& m) {
        op(m, spv::OpAccessChain, {kPH, kFirstLocal, kS, kU0});
        op(m, spv::OpCooperativeMatrixLoadNV, {kMh, kFirstLocal + 1, kFirstLocal, kU16, kFalse});
        op(m, spv::OpCooperativeMatrixMulAddNV, {kMf, kFirstLocal + 2, kFirstLocal + 1, kFirstLocal + 1, kCf});
    });
    expect_valid_nv(both);
    EXPECT_EQ(error_of([&] { codegen::nv_to_khr(both); }),
              "SPIR-V NV -> KHR cooperative matrices: %" + std::to_string(kFirstLocal + 1) +
                  " is used both as MatrixA and as MatrixB of cooperative products, and a KHR matrix type has one use");
    // Not SPIR-V, or cut short.
    EXPECT_EQ(error_of([] { codegen::nv_to_khr({1, 2, 3}); }), "SPIR-V NV -> KHR cooperative matrices: not a SPIR-V module");
    Words cut = nv_product();
    cut.resize(cut.size() - 3);
    EXPECT_NE(error_of([&] { codegen::nv_to_khr(cut); }).find("truncated"), std::string::npos);
}

// ---- every cooperative kernel -------------------------------------------------------------------------

bool declares_nv(const Words& m) {
    for (const Instruction& in : instructions(m)) {
        if (in.op == spv::OpCapability && in.w[0] == spv::CapabilityCooperativeMatrixNV) return true;
    }
    return false;
}

// Every cooperative kernel the H200 runs in precision fast (the five models' inference and training
// programs and the decode step, as the caps tests walk them, and a scaled gradient product), compiled
// to NV SPIR-V, rewritten, checked; and the shader compiler's KHR option gives that same rewrite.
TEST(SpirvKhr, EveryCooperativeKernelOfTheModelsIsRewritten) {
    const rt::DeviceCaps& h200 = rt::find_caps_profile("nvidia-h200")->caps;
    const ScopedEnv nv("MEGANEURA_COOP", "nv");
    std::vector<ProgramKernels> programs = every_program(h200);
    {
        const ScopedEnv f16("MEGANEURA_FAST_GRADIENTS", "f16");
        Graph g;
        const Tensor x = g.parameter("x", {64, 96}), w = g.parameter("w", {80, 96});
        const Tensor loss = g.sum(g.linear(x, w));
        for (const Tensor& d : grad(loss, {x, w})) g.output("d" + std::to_string(d.id), d);
        programs.push_back({"linear gradients, f16", compiler::program_kernels(g, h200, {.precision = Precision::Fast})});
    }
    const std::map<std::string, codegen::Spirv> spirv = compile_every_kernel(programs, h200);
    std::set<std::string> families;
    std::set<std::string> seen;
    for (const ProgramKernels& program : programs) {
        for (const codegen::KernelSource& k : program.kernels) {
            const Words& nv_words = *spirv.at(k.glsl);
            if (!declares_nv(nv_words) || !seen.insert(k.glsl).second) continue;
            SCOPED_TRACE(program.name + ", kernel " + k.label);
            families.insert(k.label.substr(0, k.label.find('+')));
            Words khr;
            try {
                khr = codegen::nv_to_khr(nv_words);
            } catch (const Error& e) {
                ADD_FAILURE() << e.what();
                continue;
            }
            for (const std::string& p : khr_problems(khr)) ADD_FAILURE() << p;
            EXPECT_EQ(count(khr), count(nv_words));
        }
    }
    EXPECT_EQ(families, (std::set<std::string>{"attention_coop", "attention_coop_chunks", "attention_grad_kv_coop", "attention_grad_q_coop",
                                               "conv2d_coop", "conv2d_coop_split", "conv2d_grad_input_coop_scaled",
                                               "conv2d_grad_weight_coop_scaled", "matmul_coop", "matmul_coop_scaled",
                                               "matmul_coop_split"}));
    EXPECT_GE(seen.size(), 20u);
    // What compile does on the KHR path: the same rewrite, in the shader compiler.
    codegen::ShaderOptions options = compiler::shader_options(h200);
    EXPECT_FALSE(options.coop_khr);
    options.coop_khr = true;
    const std::string& glsl = *seen.begin();
    EXPECT_EQ(*codegen::compile_glsl(glsl, options), codegen::nv_to_khr(*spirv.at(glsl)));
}

}  // namespace
}  // namespace mn::test
