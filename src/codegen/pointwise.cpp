// Pointwise family: one thread per output element, inputs read through broadcast strides.
// Also the strided-copy family, which is the same index math with a pure move.
#include <stdexcept>

#include "codegen/families.hpp"

namespace mn::codegen {

namespace {

// GLSL helpers that builtins lack. 1 + erf(u) through erfc (Numerical Recipes' erfcc, relative
// error < 1.2e-7), so GELU stays accurate on the negative side where 1 + erf(u) is tiny.
const char* const kMathHelpers = R"(
float mn_one_plus_erf(float u) {
    float z = abs(u);
    float t = 1.0 / (1.0 + 0.5 * z);
    float c = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
              t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
              t * (-0.82215223 + t * 0.17087277)))))))));
    return u >= 0.0 ? 2.0 - c : c;
}
float mn_gelu_tanh_deriv(float x) {
    float k = 0.79788456080286536;
    float t = tanh(clamp(k * (x + 0.044715 * x * x * x), -15.0, 15.0));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 0.134145 * x * x);
}
float mn_pow(float x, float y) {
    if (y == 0.0) return 1.0;
    if (x >= 0.0) return pow(x, y);
    if (y != floor(y)) return uintBitsToFloat(0x7fc00000u);
    float m = pow(-x, y);
    return mod(y, 2.0) == 0.0 ? m : -m;
}
)";

// The expression of each op over operands x0 (and x1), in the compute type.
std::string expression(Op op, const std::string& x0, const std::string& x1, DType in, DType out) {
    const bool i = in == DType::I32;
    switch (op) {
        case Op::Neg: return "-" + x0;
        case Op::Exp: return "exp(" + x0 + ")";
        case Op::Log: return "log(" + x0 + ")";
        case Op::Sqrt: return "sqrt(" + x0 + ")";
        case Op::Rsqrt: return "inversesqrt(" + x0 + ")";
        case Op::Abs: return "abs(" + x0 + ")";
        case Op::Relu: return i ? "max(" + x0 + ", 0)" : "max(" + x0 + ", 0.0)";
        case Op::Sigmoid: return "1.0 / (1.0 + exp(-" + x0 + "))";
        case Op::Tanh: return "tanh(clamp(" + x0 + ", -15.0, 15.0))";
        case Op::Silu: return x0 + " / (1.0 + exp(-" + x0 + "))";
        case Op::GeluErf: return "0.5 * " + x0 + " * mn_one_plus_erf(" + x0 + " * 0.70710678118654752)";
        case Op::GeluTanh:
            return "0.5 * " + x0 + " * (1.0 + tanh(clamp(0.79788456080286536 * (" + x0 + " + 0.044715 * " + x0 + " * " + x0 + " * " + x0 + "), -15.0, 15.0)))";
        case Op::Cast: return std::string(compute_type(out)) + "(" + x0 + ")";
        case Op::Sign: return "sign(" + x0 + ")";
        case Op::GeluErfDeriv:
            return "0.5 * mn_one_plus_erf(" + x0 + " * 0.70710678118654752) + " + x0 + " * exp(-0.5 * " + x0 + " * " + x0 + ") * 0.39894228040143268";
        case Op::GeluTanhDeriv:
            return "mn_gelu_tanh_deriv(" + x0 + ")";
        case Op::Add: return x0 + " + " + x1;
        case Op::Sub: return x0 + " - " + x1;
        case Op::Mul: return x0 + " * " + x1;
        case Op::Div: return x0 + " / " + x1;
        case Op::Maximum: return "max(" + x0 + ", " + x1 + ")";
        case Op::Minimum: return "min(" + x0 + ", " + x1 + ")";
        case Op::Pow: return "mn_pow(" + x0 + ", " + x1 + ")";
        case Op::Greater: return std::string(compute_type(out)) + "(" + x0 + " > " + x1 + ")";
        case Op::Equal: return std::string(compute_type(out)) + "(" + x0 + " == " + x1 + ")";
        default: throw Error(std::string("codegen: ") + op_info(op).name + " is not a pointwise op");
    }
}

// The tree's steps as GLSL statements, one register r<step> each, typed by the step's dtype; input n
// reads input(n). The ops join k's label.
template <class Input>
std::string tree_glsl(const PointwiseSpec& spec, Input input, KernelSource& k) {
    std::string body;
    for (size_t i = 0; i < spec.program.size(); ++i) {
        const PointwiseSpec::Step& st = spec.program[i];
        const std::string type = compute_type(st.dtype);
        const std::string r = "r" + std::to_string(i);
        if (st.op == Op::Input) {
            body += "    " + type + " " + r + " = " + type + "(" + input(st.a) + ");\n";
            continue;
        }
        const auto reg = [](int32_t x) { return x < 0 ? std::string() : "r" + std::to_string(x); };
        const DType operand = spec.program[static_cast<size_t>(st.a)].dtype;
        body += "    " + type + " " + r + " = " + type + "(" + expression(st.op, reg(st.a), reg(st.b), operand, st.dtype) + ");\n";
        k.label += (k.label.empty() ? "" : "+") + std::string(op_info(st.op).name);
    }
    return body;
}

}  // namespace

std::string epilogue_glsl(const Epilogue* e, KernelSource& k) {
    if (!e) return "#define EPI(i, v) (v)\n#define EPI4(i, v) (v)\n";
    const PointwiseSpec& t = e->tree;
    add_rank_constants(k, "ED", t.out_shape, 1);
    std::string funcs;
    std::vector<std::string> buffers(t.in_dtypes.size());
    for (size_t in = 0; in < t.in_dtypes.size(); ++in) {
        if (static_cast<int32_t>(in) == e->product) continue;
        const std::string n = std::to_string(in);
        buffers[in] = "e" + n;
        k.iface.bindings.push_back({buffers[in], t.in_dtypes[in]});
        add_rank_constants(k, "ES" + n + "_", t.in_strides[in], 0);
        funcs += strided_offset_fn("epi_offset" + n, "ED", "ES" + n + "_");
    }
    const std::string body = tree_glsl(t, [&](int32_t n) {
        return n == e->product ? std::string("v") : buffers[static_cast<size_t>(n)] + ".d[epi_offset" + std::to_string(n) + "(i)]";
    }, k);
    std::string stores;
    for (size_t o = 0; o < t.extra_outputs.size(); ++o) {
        const auto [step, dtype] = t.extra_outputs[o];
        const std::string name = "eo" + std::to_string(o);
        k.iface.bindings.push_back({name, dtype, true});
        stores += "    " + name + ".d[i] = " + storage_type(dtype) + "(r" + std::to_string(step) + ");\n";
    }
    // The bindings are declared by the preamble, before this text: it only reads them.
    return kMathHelpers + funcs + "float mn_epilogue(uint i, float v) {\n" + body + stores + "    return float(r" +
           std::to_string(t.program.size() - 1) + ");\n}\n#define EPI(i, v) mn_epilogue(i, v)\n"
           "#define EPI4(i, v) vec4(EPI(i, v.x), EPI(i + 1u, v.y), EPI(i + 2u, v.z), EPI(i + 3u, v.w))\n";
}

KernelSource pointwise_kernel(const PointwiseSpec& spec, const Launch& launch) {
    KernelSource k;
    k.iface.local_size = launch.local_size;
    const int64_t total = numel(spec.out_shape);
    k.iface.spec_constants.push_back("N");
    k.spec_values.push_back(checked_u32(total, "element count"));
    add_rank_constants(k, "D", spec.out_shape, 1);

    std::string funcs;
    for (size_t in = 0; in < spec.in_dtypes.size(); ++in) {
        const std::string n = std::to_string(in);
        k.iface.bindings.push_back({"in" + n, spec.in_dtypes[in]});
        add_rank_constants(k, "S" + n + "_", spec.in_strides[in], 0);
        funcs += strided_offset_fn("offset" + n, "D", "S" + n + "_");
    }
    k.iface.bindings.push_back({"out0", spec.out_dtype, true});
    std::string stores;
    for (size_t o = 0; o < spec.extra_outputs.size(); ++o) {
        const auto [step, dtype] = spec.extra_outputs[o];
        const std::string name = "out" + std::to_string(o + 1);
        k.iface.bindings.push_back({name, dtype, true});
        stores += "    " + name + ".d[i] = " + storage_type(dtype) + "(r" + std::to_string(step) + ");\n";
    }

    const std::string body = tree_glsl(spec, [](int32_t n) { return "in" + std::to_string(n) + ".d[offset" + std::to_string(n) + "(i)]"; }, k);
    k.glsl = glsl_preamble(k.iface) + kFlatGroupId + kMathHelpers + funcs +
             "void main() {\n"
             "    uint i = mn_group_id() * WG + gl_LocalInvocationID.x;\n"
             "    if (i >= N) return;\n" +
             body + stores + "    out0.d[i] = " + storage_type(spec.out_dtype) + "(r" + std::to_string(spec.program.size() - 1) + ");\n}\n";
    k.groups = grid_for((static_cast<uint64_t>(total) + launch.local_size - 1) / launch.local_size, launch.max_groups);
    return k;
}

KernelSource strided_copy_kernel(const CopySpec& spec, const Launch& launch) {
    KernelSource k;
    k.label = "copy";
    k.iface.local_size = launch.local_size;
    const int64_t total = numel(spec.dims);
    k.iface.spec_constants = {"N", "IN_OFFSET", "OUT_OFFSET"};
    k.spec_values = {checked_u32(total, "element count"), checked_u32(spec.in_offset, "offset"),
                     checked_u32(spec.out_offset, "offset")};
    add_rank_constants(k, "D", spec.dims, 1);
    add_rank_constants(k, "IS", spec.in_strides, 0);
    add_rank_constants(k, "OS", spec.out_strides, 0);
    k.iface.bindings = {{"src", spec.dtype}, {"dst", spec.dtype, true}};
    k.glsl = glsl_preamble(k.iface) + kFlatGroupId + strided_offset_fn("in_offset", "D", "IS", "IN_OFFSET") +
             strided_offset_fn("out_offset", "D", "OS", "OUT_OFFSET") +
             "void main() {\n"
             "    uint i = mn_group_id() * WG + gl_LocalInvocationID.x;\n"
             "    if (i >= N) return;\n"
             "    dst.d[out_offset(i)] = src.d[in_offset(i)];\n}\n";
    k.groups = grid_for((static_cast<uint64_t>(total) + launch.local_size - 1) / launch.local_size, launch.max_groups);
    return k;
}

}  // namespace mn::codegen
