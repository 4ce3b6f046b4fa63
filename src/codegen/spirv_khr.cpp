// The NV -> KHR cooperative-matrix rewrite of spirv_khr.hpp, on the module's words.
//
// Why a rewrite and not a second shader compiler: glslang 12 (Debian bookworm) has no
// GL_KHR_cooperative_matrix, and the two SPIR-V extensions say the same thing almost word for word
// (the KHR text grew out of the NV one). Loads and stores take the same pointer into an array and a
// stride counted in elements of the pointee (a uvec4 for our staged f16 tiles, in both), so offsets
// and strides pass through unchanged. What differs, and what this file bridges:
//   - A KHR matrix type has a Use (MatrixA, MatrixB or MatrixAccumulator); an NV one does not. Our f16
//     16x16 type is both operands of every product and also the f16 accumulator that a product is
//     converted to for storing, so each value's use is found by dataflow. Values joined by an
//     instruction that keeps the type (a variable and the loads, stores and access chains through it,
//     a copy, a conversion, arithmetic, a phi or select, a composite and its parts) form one class
//     (union-find); OpCooperativeMatrixMulAddNV says which use its operands' classes have (A, B, and
//     the accumulator for C and the result); a conversion keeps its operand's use, as KHR requires.
//     A class that reaches no product is an accumulator. Every type on the way (the matrix, arrays of it,
//     pointers to those) is then declared once per use it is needed in, the first use keeping the original
//     id, and every value takes its class's.
//   - NV's ColumnMajor is a bool constant after the stride; KHR's MemoryLayout a 32-bit integer
//     constant (RowMajorKHR 0, ColumnMajorKHR 1) before it.
//   - KHR's MulAdd says through an operand that integer components are signed, where NV reads the
//     component type's signedness.
// KHR asks for the Vulkan memory model, which our cooperative kernels declare anyway.
//
// Why words and not SPIRV-Tools' IR: Debian's SPIRV-Tools (2023.1) predates the KHR opcodes, so it could
// neither print nor check what it built, and the rewrite needs only result slots (spv::HasResultAndType)
// and the operand positions of the ~30 instructions it follows. It costs 0.2 to 0.4 ms a kernel (the
// models' 45 cooperative kernels, 5,000 to 11,000 words each, on the development machine), once per
// kernel before the shader cache stores the result. For the same reason spirv-val cannot check the
// result: tests/spirv_khr_test.cpp checks it structurally, and the device by running it.
#define SPV_ENABLE_UTILITY_CODE  // spv::HasResultAndType
#include "codegen/spirv_khr.hpp"

#include <glslang/SPIRV/spirv.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "meganeura/error.hpp"

namespace mn::codegen {

namespace {

constexpr uint32_t kMagic = 0x07230203;
constexpr size_t kHeaderWords = 5;  // magic, version, generator, id bound, schema
constexpr const char* kNvExtension = "SPV_NV_cooperative_matrix";

std::string id_text(uint32_t id) {
    std::string s = "%";  // not "%" + to_string: GCC 12 warns of a memcpy overlap there (-Wrestrict, a false positive)
    return s += std::to_string(id);
}

[[noreturn]] void fail(const std::string& what) { throw Error("SPIR-V NV -> KHR cooperative matrices: " + what); }

struct Instruction {
    std::vector<uint32_t> words;  // words[0]: word count << 16 | opcode
    uint32_t op() const { return words[0] & 0xFFFFu; }
    uint32_t operator[](size_t i) const { return words[i]; }
    size_t size() const { return words.size(); }
};

Instruction make(uint32_t op, std::vector<uint32_t> operands) {
    operands.insert(operands.begin(), uint32_t(operands.size() + 1) << 16 | op);
    return {std::move(operands)};
}

std::string string_at(const Instruction& in, size_t first) {
    std::string s(reinterpret_cast<const char*>(in.words.data() + first), (in.size() - first) * 4);
    return s.substr(0, s.find('\0'));
}

std::vector<uint32_t> string_words(const std::string& s) {
    std::vector<uint32_t> words(s.size() / 4 + 1, 0u);  // with at least one terminating NUL
    std::memcpy(words.data(), s.data(), s.size());
    return words;
}

// Where an instruction's result type and result id are (0: it has none).
struct Slots {
    size_t type = 0, result = 0;
};
Slots slots(uint32_t op) {
    bool result = false, type = false;
    spv::HasResultAndType(spv::Op(op), &result, &type);
    return {type ? 1u : 0u, result ? (type ? 2u : 1u) : 0u};
}

// The fewest words of the instructions whose operands the rewrite reads by position.
const std::unordered_map<uint32_t, size_t> kShortest = {
    {spv::OpCapability, 2}, {spv::OpExtension, 2}, {spv::OpName, 3}, {spv::OpDecorate, 3}, {spv::OpTypeInt, 4},
    {spv::OpTypeArray, 4}, {spv::OpTypeRuntimeArray, 3}, {spv::OpTypePointer, 4}, {spv::OpTypeCooperativeMatrixNV, 6},
    {spv::OpConstant, 4}, {spv::OpStore, 3}, {spv::OpCopyMemory, 3}, {spv::OpCooperativeMatrixLoadNV, 6},
    {spv::OpCooperativeMatrixStoreNV, 5}, {spv::OpCooperativeMatrixMulAddNV, 6}, {spv::OpCooperativeMatrixLengthNV, 4},
    {spv::OpLoad, 4}, {spv::OpAccessChain, 4}, {spv::OpInBoundsAccessChain, 4}, {spv::OpPtrAccessChain, 4},
    {spv::OpCompositeExtract, 4}, {spv::OpMatrixTimesScalar, 5},
};

class Rewrite {
public:
    explicit Rewrite(const std::vector<uint32_t>& spirv);
    bool has_nv() const { return first_matrix_ != kNone; }
    std::vector<uint32_t> run();

private:
    static constexpr size_t kNone = SIZE_MAX;
    void scan();
    void link();
    void resolve();
    void plan_types();
    std::vector<uint32_t> emit();

    uint32_t find(uint32_t id);
    void unite(uint32_t a, uint32_t b) {
        const uint32_t root = find(a);
        parent_[root] = find(b);
    }
    // The declaration of a type that is or holds an NV matrix (the matrix, an array, a pointer).
    bool declares_holding_type(const Instruction& in) const {
        const uint32_t op = in.op();
        return (op == spv::OpTypeCooperativeMatrixNV || op == spv::OpTypeArray || op == spv::OpTypeRuntimeArray ||
                op == spv::OpTypePointer) && holds_.count(in[1]);
    }
    // A value of a type that is or holds an NV matrix: a node of the union-find.
    bool is_matrix_value(uint32_t id) const {
        const auto t = type_of_.find(id);
        return t != type_of_.end() && holds_.count(t->second);
    }
    std::string describe(uint32_t id);
    uint32_t type_for(uint32_t type, uint32_t use) const { return type_ids_.at(uint64_t(type) << 2 | use); }
    uint32_t constant(uint32_t value) const { return constants_.at(value); }
    uint32_t layout(uint32_t column_major) const;
    Instruction retyped(Instruction in);
    uint32_t signed_operands(const Instruction& in) const;

    std::array<uint32_t, kHeaderWords> header_{};
    std::vector<Instruction> code_;
    size_t first_matrix_ = kNone;  // the first OpTypeCooperativeMatrixNV: new constants go before it
    uint32_t uint32_type_ = 0;
    size_t uint32_index_ = kNone;  // where OpTypeInt 32 0 is
    std::unordered_map<uint32_t, uint32_t> type_of_;        // value -> its type
    std::unordered_set<uint32_t> holds_;                    // types that are or hold an NV matrix
    std::unordered_map<uint32_t, std::string> names_;       // OpName, for errors
    std::unordered_map<uint32_t, bool> bools_;              // OpConstantTrue / OpConstantFalse
    std::unordered_map<uint32_t, uint32_t> component_;      // NV matrix type -> its component type
    std::unordered_set<uint32_t> signed_ints_;
    std::unordered_map<uint32_t, uint32_t> parent_;         // union-find over matrix values
    std::vector<std::pair<uint32_t, uint32_t>> seeds_;      // (value, use) from the products
    std::unordered_map<uint32_t, uint32_t> use_of_;         // class root -> use
    std::unordered_map<uint32_t, uint32_t> uses_;           // holding type -> bit mask of the uses it is needed in
    std::unordered_map<uint64_t, uint32_t> type_ids_;       // type << 2 | use -> the KHR-side type
    std::map<uint32_t, uint32_t> constants_;                // value -> a uint32 constant declared before first_matrix_
    std::vector<Instruction> new_constants_;
};

Rewrite::Rewrite(const std::vector<uint32_t>& spirv) {
    if (spirv.size() < kHeaderWords || spirv[0] != kMagic) fail("not a SPIR-V module");
    std::copy_n(spirv.begin(), kHeaderWords, header_.begin());
    for (size_t at = kHeaderWords; at < spirv.size();) {
        const uint32_t count = spirv[at] >> 16;
        if (count == 0 || at + count > spirv.size()) fail("a truncated instruction at word " + std::to_string(at));
        code_.push_back({std::vector<uint32_t>(spirv.begin() + long(at), spirv.begin() + long(at + count))});
        const Instruction& in = code_.back();
        const auto shortest = kShortest.find(in.op());
        if (in.size() <= slots(in.op()).result || (shortest != kShortest.end() && in.size() < shortest->second))
            fail("opcode " + std::to_string(in.op()) + " at word " + std::to_string(at) + " is too short");
        at += count;
    }
    scan();
}

uint32_t Rewrite::find(uint32_t id) {
    uint32_t root = parent_.try_emplace(id, id).first->second;
    while (parent_.at(root) != root) root = parent_.at(root);
    for (uint32_t next; (next = parent_.at(id)) != root; id = next) parent_[id] = root;  // path compression
    return root;
}

std::string Rewrite::describe(uint32_t id) {
    std::string text = id_text(id);
    if (const auto own = names_.find(id); own != names_.end()) return text + " ('" + own->second + "')";
    const uint32_t root = find(id);
    for (const auto& [named, name] : names_) {  // else its class's (the variable's)
        if (parent_.count(named) && find(named) == root) return text + " (of '" + name + "')";
    }
    return text;
}

// Types, names and constants; which types hold a matrix.
void Rewrite::scan() {
    for (size_t i = 0; i < code_.size(); ++i) {
        const Instruction& in = code_[i];
        const Slots s = slots(in.op());
        if (s.type) type_of_[in[s.result]] = in[s.type];
        switch (in.op()) {
            case spv::OpName: names_[in[1]] = string_at(in, 2); break;
            case spv::OpTypeInt:
                if (in[2] == 32 && in[3] == 0) {
                    uint32_type_ = in[1];
                    uint32_index_ = i;
                }
                if (in[3] == 1) signed_ints_.insert(in[1]);
                break;
            case spv::OpTypeCooperativeMatrixNV:
                holds_.insert(in[1]);
                component_[in[1]] = in[2];
                if (first_matrix_ == kNone) first_matrix_ = i;
                break;
            case spv::OpTypeArray:
            case spv::OpTypeRuntimeArray:
                if (holds_.count(in[2])) holds_.insert(in[1]);
                break;
            case spv::OpTypePointer:
                if (holds_.count(in[3])) holds_.insert(in[1]);
                break;
            case spv::OpTypeStruct:
            case spv::OpTypeFunction:
                for (size_t k = 2; k < in.size(); ++k) {
                    if (holds_.count(in[k]))
                        fail("type " + id_text(in[1]) + " is a struct or function over a cooperative matrix, which "
                             "the rewrite does not follow");
                }
                break;
            case spv::OpConstant:
                if (in[1] == uint32_type_ && first_matrix_ == kNone) constants_.try_emplace(in[3], in[2]);
                break;
            case spv::OpConstantTrue:
            case spv::OpConstantFalse: bools_[in[2]] = in.op() == spv::OpConstantTrue; break;
            default: break;
        }
    }
}

// Joins the values that must share a type, and notes the uses the products give them.
void Rewrite::link() {
    for (const Instruction& in : code_) {
        const Slots s = slots(in.op());
        const bool makes_matrix = s.type && is_matrix_value(in[s.result]);
        const uint32_t result = s.result ? in[s.result] : 0;
        auto join = [&](size_t operand) {
            if (operand < in.size() && is_matrix_value(in[operand])) unite(result, in[operand]);
        };
        switch (in.op()) {
            case spv::OpCooperativeMatrixMulAddNV:  // result type, result, A, B, C
                for (size_t k = 3; k < 6; ++k) {
                    if (!is_matrix_value(in[k]))
                        fail("operand " + id_text(in[k]) + " of product " + describe(result) + " is not a matrix");
                }
                seeds_.insert(seeds_.end(), {{in[3], khr::MatrixA}, {in[4], khr::MatrixB},
                                             {in[5], khr::MatrixAccumulator}, {result, khr::MatrixAccumulator}});
                continue;
            case spv::OpStore:  // pointer, object
            case spv::OpCopyMemory:  // target, source
                if (is_matrix_value(in[1])) unite(in[1], in[2]);
                continue;
            default: break;
        }
        if (!makes_matrix) continue;
        find(result);
        switch (in.op()) {
            case spv::OpCooperativeMatrixLoadNV:
            case spv::OpConstantNull:
            case spv::OpUndef: break;
            case spv::OpVariable: join(4); break;  // the initializer
            case spv::OpLoad:
            case spv::OpAccessChain:
            case spv::OpInBoundsAccessChain:
            case spv::OpPtrAccessChain:
            case spv::OpCopyObject:
            case spv::OpFConvert:
            case spv::OpSConvert:
            case spv::OpUConvert:
            case spv::OpConvertFToS:
            case spv::OpConvertFToU:
            case spv::OpConvertSToF:
            case spv::OpConvertUToF:
            case spv::OpBitcast:
            case spv::OpFNegate:
            case spv::OpSNegate:
            case spv::OpMatrixTimesScalar:
            case spv::OpCompositeExtract: join(3); break;
            case spv::OpFAdd:
            case spv::OpFSub:
            case spv::OpFMul:
            case spv::OpFDiv:
            case spv::OpIAdd:
            case spv::OpISub:
            case spv::OpIMul:
            case spv::OpSDiv:
            case spv::OpUDiv:
            case spv::OpCompositeInsert:  // object, composite
                join(3);
                join(4);
                break;
            case spv::OpSelect: // condition, object 1, object 2
                join(4);
                join(5);
                break;
            case spv::OpPhi:  // (value, parent block) pairs
                for (size_t k = 3; k < in.size(); k += 2) join(k);
                break;
            case spv::OpCompositeConstruct:
            case spv::OpConstantComposite:
            case spv::OpSpecConstantComposite:
                for (size_t k = 3; k < in.size(); ++k) join(k);
                break;
            default:
                fail("opcode " + std::to_string(in.op()) + " makes " + describe(result) +
                     ", a cooperative-matrix value; the rewrite follows matrices only through variables, loads, stores, "
                     "access chains, copies, conversions, arithmetic, phis, selects and composites");
        }
    }
}

// Each class's use, from the products; a class with two, or none, cannot be a KHR type.
void Rewrite::resolve() {
    static const char* const kUseNames[] = {"MatrixA", "MatrixB", "MatrixAccumulator"};
    for (const auto& [value, use] : seeds_) {
        const auto [it, fresh] = use_of_.try_emplace(find(value), use);
        if (!fresh && it->second != use)
            fail(describe(value) + " is used both as " + kUseNames[it->second] + " and as " + kUseNames[use] +
                 " of cooperative products, and a KHR matrix type has one use");
    }
    for (const Instruction& in : code_) {
        const Slots s = slots(in.op());
        if (!s.type || !is_matrix_value(in[s.result])) continue;
        // A matrix that reaches no product (loaded, worked on element by element, stored) is an accumulator: the
        // use whose elements a kernel works on (it is what products return).
        const uint32_t use = use_of_.try_emplace(find(in[s.result]), khr::MatrixAccumulator).first->second;
        uses_[in[s.type]] |= 1u << use;
    }
}

// The uses each holding type is needed in (a pointer's pointee and an array's elements in those of the
// pointer or array), the ids of its per-use copies, and the constants the KHR instructions need.
void Rewrite::plan_types() {
    for (size_t i = code_.size(); i-- > 0;) {
        const Instruction& in = code_[i];
        if (in.op() == spv::OpTypePointer && holds_.count(in[1])) uses_[in[3]] |= uses_[in[1]];
        if ((in.op() == spv::OpTypeArray || in.op() == spv::OpTypeRuntimeArray) && holds_.count(in[1]))
            uses_[in[2]] |= uses_[in[1]];
    }
    uint32_t& bound = header_[3];
    std::set<uint32_t> values;  // the uint32 constants the KHR instructions name
    for (const Instruction& in : code_) {
        if (!declares_holding_type(in)) continue;
        bool first = true;
        for (uint32_t use = 0; use < 3; ++use) {
            if (!(uses_[in[1]] >> use & 1u)) continue;
            type_ids_[uint64_t(in[1]) << 2 | use] = first ? in[1] : bound++;
            first = false;
            if (in.op() == spv::OpTypeCooperativeMatrixNV) values.insert(use);
        }
    }
    for (const Instruction& in : code_) {
        if (in.op() == spv::OpCooperativeMatrixLoadNV) values.insert(layout(in[5]));
        if (in.op() == spv::OpCooperativeMatrixStoreNV) values.insert(layout(in[4]));
    }
    if (uint32_index_ > first_matrix_)
        fail("the module declares no 32-bit unsigned integer type before its first cooperative-matrix type");
    for (const uint32_t v : values) {
        if (constants_.count(v)) continue;
        constants_[v] = bound;
        new_constants_.push_back(make(spv::OpConstant, {uint32_type_, bound++, v}));
    }
}

uint32_t Rewrite::layout(uint32_t column_major) const {
    const auto b = bools_.find(column_major);
    if (b == bools_.end())
        fail("a load or store's ColumnMajor " + id_text(column_major) +
             " is not OpConstantTrue or OpConstantFalse, the only layouts the rewrite maps");
    return b->second ? khr::ColumnMajor : khr::RowMajor;
}

// The instruction with its result type, if a matrix one, replaced by its result's use's.
Instruction Rewrite::retyped(Instruction in) {
    const Slots s = slots(in.op());
    if (s.type && holds_.count(in[s.type])) in.words[s.type] = type_for(in[s.type], use_of_.at(find(in[s.result])));
    return in;
}

// KHR's Cooperative Matrix Operands for a product: Matrix{A,B,C,Result}SignedComponentsKHR (bits 0 to 3)
// where that matrix's components are signed integers, which NV read from the component type.
uint32_t Rewrite::signed_operands(const Instruction& in) const {
    uint32_t flags = 0;
    const uint32_t types[] = {type_of_.at(in[3]), type_of_.at(in[4]), type_of_.at(in[5]), in[1]};
    for (uint32_t k = 0; k < 4; ++k) {
        if (signed_ints_.count(component_.at(types[k]))) flags |= 1u << k;
    }
    return flags;
}

std::vector<uint32_t> Rewrite::emit() {
    std::vector<uint32_t> out(header_.begin(), header_.end());
    auto put = [&](const Instruction& in) { out.insert(out.end(), in.words.begin(), in.words.end()); };
    for (size_t i = 0; i < code_.size(); ++i) {
        const Instruction& in = code_[i];
        if (i == first_matrix_) {
            for (const Instruction& c : new_constants_) put(c);
        }
        if (declares_holding_type(in)) {
            for (uint32_t use = 0; use < 3; ++use) {
                if (!(uses_.at(in[1]) >> use & 1u)) continue;
                const uint32_t id = type_for(in[1], use);
                switch (in.op()) {
                    case spv::OpTypeCooperativeMatrixNV:  // component, scope, rows, columns (+ use)
                        put(make(khr::OpTypeCooperativeMatrix, {id, in[2], in[3], in[4], in[5], constant(use)}));
                        break;
                    case spv::OpTypeArray: put(make(in.op(), {id, type_for(in[2], use), in[3]})); break;
                    case spv::OpTypeRuntimeArray: put(make(in.op(), {id, type_for(in[2], use)})); break;
                    default: put(make(in.op(), {id, in[2], type_for(in[3], use)})); break;  // OpTypePointer
                }
            }
            continue;
        }
        switch (in.op()) {
            case spv::OpCapability:
                put(in[1] == spv::CapabilityCooperativeMatrixNV ? make(spv::OpCapability, {khr::CapabilityCooperativeMatrix})
                                                                : in);
                break;
            case spv::OpExtension:
                put(string_at(in, 1) == kNvExtension ? make(spv::OpExtension, string_words(khr::kExtension)) : in);
                break;
            case spv::OpCooperativeMatrixLoadNV: {  // type, result, pointer, stride, column major, [memory access]
                const Instruction t = retyped(in);
                std::vector<uint32_t> operands = {t[1], t[2], t[3], constant(layout(t[5])), t[4]};
                operands.insert(operands.end(), t.words.begin() + 6, t.words.end());
                put(make(khr::OpCooperativeMatrixLoad, std::move(operands)));
                break;
            }
            case spv::OpCooperativeMatrixStoreNV: {  // pointer, object, stride, column major, [memory access]
                std::vector<uint32_t> operands = {in[1], in[2], constant(layout(in[4])), in[3]};
                operands.insert(operands.end(), in.words.begin() + 5, in.words.end());
                put(make(khr::OpCooperativeMatrixStore, std::move(operands)));
                break;
            }
            case spv::OpCooperativeMatrixMulAddNV: {  // type, result, A, B, C
                const Instruction t = retyped(in);
                std::vector<uint32_t> operands = {t[1], t[2], t[3], t[4], t[5]};
                if (const uint32_t flags = signed_operands(in)) operands.push_back(flags);
                put(make(khr::OpCooperativeMatrixMulAdd, std::move(operands)));
                break;
            }
            case spv::OpCooperativeMatrixLengthNV: {  // type, result, matrix type: its one use
                const uint32_t mask = uses_.count(in[3]) ? uses_.at(in[3]) : 0u;
                if (mask == 0 || (mask & (mask - 1)))
                    fail("OpCooperativeMatrixLengthNV " + id_text(in[2]) + " asks the length of a matrix type "
                         "that has " + (mask ? "several uses" : "no value") + ", and KHR lengths are per use");
                const uint32_t use = mask == 1 ? 0u : mask == 2 ? 1u : 2u;
                put(make(khr::OpCooperativeMatrixLength, {in[1], in[2], type_for(in[3], use)}));
                break;
            }
            case spv::OpName:
            case spv::OpDecorate:
                // A matrix type no value needs is not declared again, nor named or decorated.
                if (!(holds_.count(in[1]) && !uses_[in[1]])) put(in);
                break;
            default: put(retyped(in)); break;
        }
    }
    return out;
}

std::vector<uint32_t> Rewrite::run() {
    bool memory_model = false;
    for (const Instruction& in : code_) {
        if (in.op() == spv::OpCapability && in[1] == spv::CapabilityVulkanMemoryModel) memory_model = true;
    }
    if (!memory_model) fail("SPV_KHR_cooperative_matrix needs the VulkanMemoryModel capability, which the module lacks");
    link();
    resolve();
    plan_types();
    return emit();
}

}  // namespace

std::vector<uint32_t> nv_to_khr(const std::vector<uint32_t>& spirv) {
    Rewrite rewrite(spirv);
    return rewrite.has_nv() ? rewrite.run() : spirv;
}

}  // namespace mn::codegen
