// Pointwise family: one thread per output element, inputs read through broadcast strides.
// Also the strided-copy family, which is the same index math with a pure move.
#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include "codegen/families.hpp"

namespace mn::codegen {

namespace {

// GLSL helpers that builtins lack. 1 + erf(u) through erfc (Numerical Recipes' erfcc, relative
// error < 1.2e-7), so GELU stays accurate on the negative side where 1 + erf(u) is tiny.
const char* const kMathHelpers = R"(
#ifndef MN_MATH_HELPERS
#define MN_MATH_HELPERS
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
#endif
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
        // not pointwise
        case Op::Input: case Op::Parameter: case Op::Constant: case Op::State: case Op::Sum: case Op::Mean:
        case Op::Max: case Op::Softmax: case Op::LogSoftmax: case Op::CrossEntropy: case Op::MseLoss:
        case Op::CrossEntropyGrad: case Op::MatMul: case Op::Conv2d: case Op::Conv2dGradInput:
        case Op::Conv2dGradWeight: case Op::Attention: case Op::AttentionLse: case Op::AttentionGradQ:
        case Op::AttentionGradK: case Op::AttentionGradV: case Op::Reshape: case Op::Permute: case Op::Slice:
        case Op::Concat: case Op::Expand: case Op::Assign: case Op::Embedding: case Op::EmbeddingGrad:
        case Op::RmsNorm: case Op::LayerNorm: case Op::RmsNormGrad: case Op::LayerNormGrad: case Op::GroupNorm:
        case Op::GroupNormGrad: case Op::Rope: case Op::SliceScatter: case Op::MaxPool2d: case Op::MaxPool2dGrad:
            break;
    }
    throw Error(std::string("codegen: ") + op_info(op).name + " is not a pointwise op");
}

// The tree's steps as GLSL statements, one register r<step> each, typed by the step's dtype (or all `vector`: vec4,
// four elements at once, where componentwise is true of the tree); input n reads input(n). The ops join k's label.
template <class Input>
std::string tree_glsl(const PointwiseSpec& spec, Input input, KernelSource& k, const char* vector = nullptr) {
    std::string body;
    for (size_t i = 0; i < spec.program.size(); ++i) {
        const PointwiseSpec::Step& st = spec.program[i];
        const std::string type = vector ? vector : compute_type(st.dtype);
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

// Whether `strides` read `shape` element for element: every dim of more than one element at the stride of its place
// in the row-major order.
bool read_in_order(const Shape& shape, const std::vector<int64_t>& strides) {
    int64_t expect = 1;
    for (size_t d = shape.size(); d-- > 0; expect *= shape[d]) {
        if (shape[d] != 1 && strides[d] != expect) return false;
    }
    return true;
}

// Whether `strides` read one element everywhere (a scalar).
bool read_as_scalar(const std::vector<int64_t>& strides) {
    return std::all_of(strides.begin(), strides.end(), [](int64_t s) { return s == 0; });
}

// How EPI4 reads an input's elements i .. i + 3 (i a multiple of 4) of `shape` through `strides`: 1 where they are
// consecutive (the input read element for element: one 16-byte load), 2 where they are one element (broadcast over
// trailing dims of a multiple of 4 elements, or everywhere: one load), else 0 (four loads).
uint32_t quad_read(const Shape& shape, const std::vector<int64_t>& strides) {
    if (read_in_order(shape, strides)) return 1;
    int64_t run = 1;  // the elements of the trailing dims it broadcasts over
    for (size_t d = shape.size(); d-- > 0;) {
        if (shape[d] == 1) continue;
        if (strides[d] != 0) return run % 4 == 0 ? 2 : 0;
        run *= shape[d];
    }
    return 2;
}

}  // namespace

std::string epilogue_glsl(const Epilogue* e, KernelSource& k, const std::string& prefix) {
    const std::string epi = prefix + "EPI", fn = prefix + "mn_epilogue";
    if (!e) return "#define " + epi + "(i, v) (v)\n#define " + epi + "4(i, v) (v)\n";
    const PointwiseSpec& t = e->tree;
    if (!t.in_pieces.empty()) throw Error("codegen: only a batch's member reads a split sum's pieces");
    add_rank_constants(k, prefix + "ED", t.out_shape, 1);
    std::string funcs;
    std::vector<std::string> buffers(t.in_dtypes.size());
    std::vector<size_t> binding_of(t.in_dtypes.size());
    for (size_t in = 0; in < t.in_dtypes.size(); ++in) {
        if (static_cast<int32_t>(in) == e->product || static_cast<int32_t>(in) == e->product2) continue;
        const std::string n = std::to_string(in);
        buffers[in] = prefix + "e" + n;
        binding_of[in] = k.iface.bindings.size();
        k.iface.bindings.push_back({buffers[in], t.in_dtypes[in]});
        add_rank_constants(k, prefix + "ES" + n + "_", t.in_strides[in], 0);
        funcs += strided_offset_fn(prefix + "epi_offset" + n, prefix + "ED", prefix + "ES" + n + "_");
    }
    // The tree as a function of its inputs' values (a<n>): EPI reads them at element i, EPI4 as quads (quad_read, a spec
    // constant <prefix>EQ<n> an input: the text stays the same for every shape) where every input is a float.
    const bool quads = std::all_of(t.in_dtypes.begin(), t.in_dtypes.end(), [](DType d) { return d != DType::I32; });
    std::string params, args, quad_loads, quad_args[4];
    for (size_t in = 0; in < t.in_dtypes.size(); ++in) {
        if (buffers[in].empty()) continue;
        const std::string n = std::to_string(in), a = "a" + n, at = prefix + "epi_offset" + n;
        const std::string type = compute_type(t.in_dtypes[in]), load = type + "(" + buffers[in] + ".d[" + at + "(i)])";
        params += ", " + type + " " + a;
        args += ", " + load;
        if (!quads) continue;
        const std::string eq = prefix + "EQ" + n;
        k.iface.spec_constants.push_back(eq);
        k.spec_values.push_back(quad_read(t.out_shape, t.in_strides[in]));
        std::string consecutive;
        if (t.in_dtypes[in] == DType::F32) {
            funcs += buffer_view(binding_of[in], buffers[in] + "_4", Access::Read);
            consecutive = eq + " == 1u ? " + buffers[in] + "_4.d[i >> 2] : ";
        }
        auto element = [&](const char* plus) { return "float(" + buffers[in] + ".d[" + at + "(i" + plus + ")])"; };
        quad_loads += "    vec4 " + a + " = " + consecutive + eq + " == 2u ? vec4(" + element("") + ") : vec4(" +
                      element("") + ", " + element(" + 1u") + ", " + element(" + 2u") + ", " + element(" + 3u") + ");\n";
        for (int c = 0; c < 4; ++c) quad_args[c] += ", " + a + "." + "xyzw"[c];
    }
    const std::string body = tree_glsl(t, [&](int32_t n) {
        if (n == e->product || n == e->product2) return std::string(n == e->product ? "v" : "v2");
        return "a" + std::to_string(n);
    }, k);
    std::string stores;
    for (size_t o = 0; o < t.extra_outputs.size(); ++o) {
        const auto [step, dtype] = t.extra_outputs[o];
        const std::string name = prefix + "eo" + std::to_string(o);
        k.iface.bindings.push_back({name, dtype, true});
        stores += "    " + name + ".d[i] = " + storage_type(dtype) + "(r" + std::to_string(step) + ");\n";
    }
    // The bindings are declared by the preamble, before this text: it only reads them.
    std::string text = kMathHelpers + funcs + "float " + fn + "_at(uint i, float v, float v2" + params + ") {\n" + body +
                       stores + "    return float(r" + std::to_string(t.result_step()) + ");\n}\n" + "float " + fn +
                       "(uint i, float v, float v2) { return " + fn + "_at(i, v, v2" + args + "); }\n#define " + epi +
                       "(i, v) " + fn + "(i, v, 0.0)\n#define " + epi + "2(i, v, v2) " + fn + "(i, v, v2)\n" + "#define " +
                       epi + "2_4(i, v, v2) vec4(" + epi + "2(i, v.x, v2.x), " + epi + "2(i + 1u, v.y, v2.y), " + epi +
                       "2(i + 2u, v.z, v2.z), " + epi + "2(i + 3u, v.w, v2.w))\n";
    if (!quads) {
        return text + "#define " + epi + "4(i, v) vec4(" + epi + "(i, v.x), " + epi + "(i + 1u, v.y), " + epi +
               "(i + 2u, v.z), " + epi + "(i + 3u, v.w))\n";
    }
    text += "vec4 " + fn + "4(uint i, vec4 v) {\n" + quad_loads + "    return vec4(";
    for (int c = 0; c < 4; ++c) {
        text += std::string(c ? ", " : "") + fn + "_at(i" + (c ? " + " + std::to_string(c) + "u" : "") + ", v." +
                "xyzw"[c] + ", 0.0" + quad_args[c] + ")";
    }
    return text + ");\n}\n#define " + epi + "4(i, v) " + fn + "4(i, v)\n";
}

std::string input_glsl(KernelSource& k, const Epilogue* prologue) {
    if (!prologue) return "#define X_AT(i) float(x.d[i])\n";
    std::vector<Binding> rest(k.iface.bindings.begin() + 1, k.iface.bindings.end());  // all but x
    k.iface.bindings.clear();
    const std::string text = epilogue_glsl(prologue, k, "P");
    k.iface.bindings.insert(k.iface.bindings.end(), rest.begin(), rest.end());
    return text + "#define X_AT(i) PEPI(i, 0.0)\n";
}

KernelSource pointwise_kernel(const PointwiseSpec& spec, const Launch& launch) {
    if (!spec.in_pieces.empty()) throw Error("codegen: only a batch's member reads a split sum's pieces");
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
             body + stores + "    out0.d[i] = " + storage_type(spec.out_dtype) + "(r" + std::to_string(spec.result_step()) + ");\n}\n";
    k.groups = grid_for((static_cast<uint64_t>(total) + launch.local_size - 1) / launch.local_size, launch.max_groups);
    return k;
}

namespace {

// Where a member's thread reads input n for its element i: i itself (element for element), 0 (a scalar), or the
// element its strides over the member's shape give (a per-channel scale of a [out, in, kh, kw] weight: i / (in * kh *
// kw)), in literal constants: a batch's kernel is its members' own.
std::string batch_read_index(const PointwiseSpec& spec, size_t n) {
    const auto& st = spec.in_strides[n];
    const Shape& shape = spec.out_shape;
    if (read_as_scalar(st)) return "0";
    if (read_in_order(shape, st)) return "i";
    std::string index;
    int64_t inner = 1;
    for (size_t d = shape.size(); d-- > 0; inner *= shape[d]) {
        if (shape[d] == 1 || st[d] == 0) continue;
        std::string term = inner == 1 ? "i" : "(i / " + std::to_string(inner) + "u)";
        if (inner * shape[d] < numel(shape)) term += " % " + std::to_string(shape[d]) + "u";
        if (st[d] != 1) term = "(" + term + ") * " + std::to_string(st[d]) + "u";
        index += (index.empty() ? "" : " + ") + term;
    }
    return index;
}

// The batch's bindings in order of first use: per key, its binding and whether it is written.
struct BatchBindings {
    std::map<int32_t, size_t> of;
    std::vector<int32_t> keys;
    std::vector<Binding> bindings;

    explicit BatchBindings(const PointwiseBatch& batch) {
        for (const PointwiseBatch::Member& m : batch.members) {
            for (size_t n = 0; n < m.in_keys.size(); ++n) add(m.in_keys[n], m.spec.in_dtypes[n], false);
            add(m.out_keys[0], m.spec.out_dtype, true);
            for (size_t o = 0; o < m.spec.extra_outputs.size(); ++o) add(m.out_keys[o + 1], m.spec.extra_outputs[o].second, true);
        }
    }
    void add(int32_t key, DType dtype, bool writes) {
        const auto [it, fresh] = of.try_emplace(key, bindings.size());
        if (fresh) {
            keys.push_back(key);
            bindings.push_back({"t" + std::to_string(it->second) + "_", dtype, writes});  // "_": its view t<k>_4 names no other
        } else if (bindings[it->second].dtype != dtype) {
            throw Error("codegen: a batched pointwise kernel binds one key as two dtypes");
        }
        bindings[it->second].writes = bindings[it->second].writes || writes;
    }
    const std::string& name(int32_t key) const { return bindings[of.at(key)].name; }
};

// Whether every step of the tree is f32 and its expression (expression()) means the same of vec4 registers, element
// by element, as of floats, so that it evaluates four elements at once. Not the other ops: a helper of floats
// (mn_pow, mn_one_plus_erf), a comparison's bool, a cast's type name.
bool componentwise(const PointwiseSpec& spec) {
    static constexpr Op kOps[] = {Op::Input, Op::Neg, Op::Exp, Op::Log, Op::Sqrt, Op::Rsqrt, Op::Abs, Op::Relu,
                                  Op::Sigmoid, Op::Tanh, Op::Silu, Op::GeluTanh, Op::Sign, Op::Add, Op::Sub,
                                  Op::Mul, Op::Div, Op::Maximum, Op::Minimum};
    return std::all_of(spec.program.begin(), spec.program.end(), [](const PointwiseSpec::Step& st) {
        return st.dtype == DType::F32 && std::find(std::begin(kOps), std::end(kOps), st.op) != std::end(kOps);
    });
}

// Whether a member runs by quads, four consecutive elements a thread: every binding f32, every input read element for
// element (one 16-byte load), as a scalar (one load) or as pieces a multiple of 4 apart, its elements a multiple of 4,
// and its tree componentwise (evaluated once on vec4s). An update's kernel moves 28 bytes an element in loads and
// stores of 4: by quads, in 16-byte ones.
bool by_quads(const PointwiseSpec& spec) {
    if (numel(spec.out_shape) % 4 != 0 || spec.out_dtype != DType::F32 || !componentwise(spec)) return false;
    for (const auto& [step, dtype] : spec.extra_outputs) {
        if (dtype != DType::F32) return false;
    }
    for (size_t n = 0; n < spec.in_dtypes.size(); ++n) {
        const auto& st = spec.in_strides[n];
        const bool scalar = read_as_scalar(st);
        const auto pieces = spec.in_pieces.find(static_cast<int32_t>(n));
        if (spec.in_dtypes[n] != DType::F32 || (!scalar && !read_in_order(spec.out_shape, st)) ||
            (pieces != spec.in_pieces.end() && (scalar || pieces->second.stride % 4 != 0))) {
            return false;
        }
    }
    return true;
}

}  // namespace

uint32_t batch_member_weight(const PointwiseBatch::Member& member) { return by_quads(member.spec) ? 4 : 1; }

KernelSource pointwise_batch_kernel(const PointwiseBatch& batch, const Launch& launch, std::vector<int32_t>& binding_keys) {
    const BatchBindings b(batch);
    KernelSource k;
    k.iface.local_size = launch.local_size;
    k.iface.bindings = b.bindings;
    binding_keys = b.keys;
    // Member m runs workgroups [E<m-1>, E<m>) (E<-1> = 0) of N<m> threads: an element each, or by quads a quad each
    // (by_quads: its bindings read and written through vec4 views, <name>4).
    std::string funcs;
    std::set<size_t> quad_views;
    uint64_t groups = 0;
    for (size_t m = 0; m < batch.members.size(); ++m) {
        const PointwiseBatch::Member& member = batch.members[m];
        const PointwiseSpec& spec = member.spec;
        const std::string ms = std::to_string(m), fn = "member" + ms;
        const bool quads = by_quads(spec);
        const uint64_t threads = static_cast<uint64_t>(numel(spec.out_shape)) / (quads ? 4 : 1);
        groups += (threads + launch.local_size - 1) / launch.local_size;
        k.iface.spec_constants.insert(k.iface.spec_constants.end(), {"N" + ms, "E" + ms});
        k.spec_values.insert(k.spec_values.end(), {checked_u32(static_cast<int64_t>(threads), "element count"),
                                                   checked_u32(static_cast<int64_t>(groups), "workgroup count")});
        const auto view = [&](int32_t key) {
            quad_views.insert(b.of.at(key));
            return b.name(key) + "4";
        };
        // Input n's value for element i: its element, or the sum of its pieces (PointwiseSpec::in_pieces), read
        // through `buffer`'s view by quads.
        const auto read = [&](size_t n, const std::string& index) {
            const int32_t key = member.in_keys[n];
            const std::string buffer = quads && !read_as_scalar(spec.in_strides[n]) ? view(key) : b.name(key);
            const auto pieces = spec.in_pieces.find(static_cast<int32_t>(n));
            if (pieces == spec.in_pieces.end()) return buffer + ".d[" + index + "]";
            const std::string sum = fn + "_pieces" + std::to_string(n), type = quads ? "vec4" : "float";
            const int64_t stride = pieces->second.stride / (quads ? 4 : 1);
            funcs += type + " " + sum + "(uint at) {\n    " + type + " s = " + type + "(0.0);\n    for (uint q = 0u; q < " +
                     std::to_string(pieces->second.count) + "u; ++q) s += " + buffer + ".d[q * " +
                     std::to_string(checked_u32(stride, "element count")) + "u + at];\n    return s;\n}\n";
            return sum + "(" + index + ")";
        };
        // The values it stores: out0 after the extra outputs.
        std::vector<std::pair<int32_t, int32_t>> outputs;  // (key, step)
        for (size_t o = 0; o < spec.extra_outputs.size(); ++o) outputs.emplace_back(member.out_keys[o + 1], spec.extra_outputs[o].first);
        outputs.emplace_back(member.out_keys[0], spec.result_step());
        const std::string first = m == 0 ? "0u" : "E" + std::to_string(m - 1);
        const std::string head = "void " + fn + "(uint g) {\n    uint i = (g - " + first + ") * WG + gl_LocalInvocationID.x;\n"
                                 "    if (i >= N" + ms + ") return;\n";
        KernelSource labels;  // tree_glsl's op names: the caller labels a batch
        if (!quads) {
            std::string body = tree_glsl(spec, [&](int32_t n) { return read(static_cast<size_t>(n), batch_read_index(spec, static_cast<size_t>(n))); }, labels);
            for (size_t o = 0; o < outputs.size(); ++o) {
                const DType dtype = o + 1 < outputs.size() ? spec.extra_outputs[o].second : spec.out_dtype;
                body += "    " + b.name(outputs[o].first) + ".d[i] = " + storage_type(dtype) + "(r" + std::to_string(outputs[o].second) + ");\n";
            }
            funcs += head + body + "}\n";
            continue;
        }
        // By quads: the tree on vec4 registers (a scalar input broadcast), the inputs a<n> loaded 16 bytes at a time.
        std::string loads, stores;
        for (size_t n = 0; n < spec.in_dtypes.size(); ++n) {
            const bool scalar = read_as_scalar(spec.in_strides[n]);
            loads += std::string("    ") + (scalar ? "float a" : "vec4 a") + std::to_string(n) + " = " + read(n, scalar ? "0" : "i") + ";\n";
        }
        for (const auto& [key, step] : outputs) stores += "    " + view(key) + ".d[i] = r" + std::to_string(step) + ";\n";
        funcs += head + loads + tree_glsl(spec, [](int32_t n) { return "a" + std::to_string(n); }, labels, "vec4") + stores + "}\n";
    }
    std::string views;
    for (size_t at : quad_views) {
        const Binding& binding = k.iface.bindings[at];
        views += buffer_view(at, binding.name + "4", binding.writes ? Access::ReadWrite : Access::Read);
    }
    // The workgroup's member, by binary search over the members' last workgroups (a chain of tests took
    // SmolLM2-135M's 253 AdamW updates a mean of 127 comparisons a thread, for 28 bytes of traffic).
    const auto pick = [&](const auto& self, size_t lo, size_t hi, const std::string& indent) -> std::string {
        if (hi - lo == 1) return indent + "member" + std::to_string(lo) + "(g);\n";
        const size_t mid = (lo + hi) / 2;
        return indent + "if (g < E" + std::to_string(mid - 1) + ") {\n" + self(self, lo, mid, indent + "    ") + indent +
               "} else {\n" + self(self, mid, hi, indent + "    ") + indent + "}\n";
    };
    k.glsl = glsl_preamble(k.iface) + views + kFlatGroupId + kMathHelpers + funcs + "void main() {\n    uint g = mn_group_id();\n" +
             "    if (g >= E" + std::to_string(batch.members.size() - 1) + ") return;\n" +
             pick(pick, 0, batch.members.size(), "    ") + "}\n";
    k.groups = grid_for(groups, launch.max_groups);
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

KernelSource concat_kernel(DType dtype, const Shape& shape, size_t axis, const std::vector<ConcatPiece>& pieces,
                           const Launch& launch) {
    KernelSource k;
    k.label = "concat";
    k.iface.local_size = launch.local_size;
    int64_t inner = 1;
    for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
    const int64_t total = numel(shape);
    k.iface.spec_constants = {"N", "AXIS", "INNER"};
    k.spec_values = {checked_u32(total, "element count"), checked_u32(shape[axis], "concat size"),
                     checked_u32(inner, "concat size")};
    // Output element i at o (before the axis), c (along it), j (after it): piece p's element (o, c - its start, j).
    std::string reads, offsets;
    for (size_t p = 0; p < pieces.size(); ++p) {
        const std::string n = std::to_string(p), len = "L" + n, at = "(o * " + len + " + c) * INNER + j";
        k.iface.spec_constants.push_back(len);
        k.spec_values.push_back(checked_u32(pieces[p].length, "concat size"));
        k.iface.bindings.push_back({"piece" + n, dtype});
        std::string index = at;
        if (!pieces[p].dims.empty()) {
            add_rank_constants(k, "P" + n + "D", pieces[p].dims, 1);
            add_rank_constants(k, "P" + n + "S", pieces[p].strides, 0);
            offsets += strided_offset_fn("piece" + n + "_at", "P" + n + "D", "P" + n + "S", "0u");
            index = "piece" + n + "_at(" + at + ")";
        }
        reads += "    if (c < " + len + ") {\n        dst.d[i] = piece" + n + ".d[" + index + "];\n        return;\n    }\n"
                 "    c -= " + len + ";\n";
    }
    k.iface.bindings.push_back({"dst", dtype, true});
    k.glsl = glsl_preamble(k.iface) + kFlatGroupId + offsets +
             "void main() {\n"
             "    uint i = mn_group_id() * WG + gl_LocalInvocationID.x;\n"
             "    if (i >= N) return;\n"
             "    uint o = i / (AXIS * INNER), c = i / INNER % AXIS, j = i % INNER;\n" +
             reads + "}\n";
    k.groups = grid_for((static_cast<uint64_t>(total) + launch.local_size - 1) / launch.local_size, launch.max_groups);
    return k;
}

}  // namespace mn::codegen
