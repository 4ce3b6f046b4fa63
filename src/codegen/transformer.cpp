// Transformer kernels: embedding gather and its deterministic scatter-add, the norms (RMSNorm,
// LayerNorm, and GroupNorm as a LayerNorm over (image, group) rows with per-channel affine
// parameters) and their input gradients, RoPE, and the KV-cache row write (as a copy of the cache
// with the rows in it, or in place: the rows alone).
//
// The norms run one workgroup per row (LESSONS.md: a thread per row was 20-40x slower) and reduce
// a pair of sums at a time through shared memory, so the backward's two row means cost one tree.

#include "codegen/families.hpp"

namespace mn::codegen {

namespace {

const char* const kNaN = "uintBitsToFloat(0x7fc00000u)";

uint32_t pow2_at_most(uint32_t v) {
    uint32_t p = 1;
    while (p * 2 <= v) p *= 2;
    return p;
}

// A kernel of one thread per element of `count`.
KernelSource elementwise(const char* label, int64_t count, const Launch& launch) {
    KernelSource k;
    k.label = label;
    k.iface.local_size = launch.local_size;
    k.groups = grid_for((static_cast<uint64_t>(count) + launch.local_size - 1) / launch.local_size, launch.max_groups);
    return k;
}

const char* const kThreadIndex =
    "    uint i = mn_group_id() * WG + gl_LocalInvocationID.x;\n";


// The head of both norm kernels: leaves the row's mean (0 for RMSNorm) and reciprocal std, and
// CH(j), the channel of the row's element j, whose weight (and bias) it takes.
std::string norm_head(NormMode mode) {
    std::string s =
        "#define CH(j) ((row % G) * (D / S) + (j) / S)\n"
        "void main() {\n"
        "    uint row = mn_group_id();\n"
        "    if (row >= ROWS) return;\n"
        "    uint lid = gl_LocalInvocationID.x;\n"
        "    uint base = row * D;\n"
        "    float mean = 0.0;\n";
    if (mode == NormMode::Layer) {
        s += "    float s = 0.0;\n"
             "    for (uint j = lid; j < D; j += WG) s += X_AT(base + j);\n"
             "    mean = wg_sum(vec2(s, 0.0)).x / float(D);\n";
    }
    s += "    float q = 0.0;\n"
         "    for (uint j = lid; j < D; j += WG) { float c = X_AT(base + j) - mean; q += c * c; }\n"
         "    float rstd = inversesqrt(wg_sum(vec2(q, 0.0)).x / float(D) + uintBitsToFloat(EPS_BITS));\n";
    return s;
}

KernelSource row_kernel(const char* label, const NormSpec& spec, const Launch& launch) {
    KernelSource k;
    k.label = label;
    k.iface.local_size = pow2_at_most(launch.local_size);
    k.iface.spec_constants = {"ROWS", "D", "G", "S", "EPS_BITS"};
    if (spec.groups < 1 || spec.spatial < 1 || spec.dim % spec.spatial) {
        throw Error("codegen: norm rows of " + std::to_string(spec.dim) + " elements do not hold whole channels of " +
                    std::to_string(spec.spatial));
    }
    k.spec_values = {checked_u32(spec.rows, "rows"), checked_u32(spec.dim, "row length"),
                     checked_u32(spec.groups, "groups"), checked_u32(spec.spatial, "channel size"), float_bits(spec.eps)};
    checked_u32(spec.rows * spec.dim, "norm size");
    k.groups = grid_for(static_cast<uint64_t>(spec.rows), launch.max_groups);
    return k;
}

const char* norm_label(const NormSpec& spec, bool grad) {
    if (spec.mode == NormMode::Rms) return grad ? "rms_norm_grad" : "rms_norm";
    if (spec.groups > 1 || spec.spatial > 1) return grad ? "group_norm_grad" : "group_norm";
    return grad ? "layer_norm_grad" : "layer_norm";
}

}  // namespace

KernelSource embedding_kernel(DType dtype, int64_t positions, int64_t vocab, int64_t dim, const Launch& launch) {
    KernelSource k = elementwise("embedding", positions * dim, launch);
    k.iface.spec_constants = {"N", "VOCAB", "D"};
    k.spec_values = {checked_u32(positions * dim, "embedding size"), checked_u32(vocab, "vocabulary"),
                     checked_u32(dim, "embedding dim")};
    checked_u32(vocab * dim, "embedding table size");
    k.iface.bindings = {{"ids", DType::I32}, {"weight", dtype}, {"out0", dtype, true}};
    const std::string st = storage_type(dtype);
    k.glsl = glsl_preamble(k.iface) + kFlatGroupId + "void main() {\n" + kThreadIndex +
             "    if (i >= N) return;\n"
             "    int id = ids.d[i / D];\n"
             "    out0.d[i] = id >= 0 && uint(id) < VOCAB ? weight.d[uint(id) * D + i % D] : " + st + "(" + kNaN + ");\n"
             "}\n";
    return k;
}

KernelSource fill_zero_kernel(DType dtype, int64_t count, const Launch& launch) {
    KernelSource k = elementwise("fill_zero", count, launch);
    k.iface.spec_constants = {"N"};
    k.spec_values = {checked_u32(count, "element count")};
    k.iface.bindings = {{"out0", dtype, true}};
    k.glsl = glsl_preamble(k.iface) + kFlatGroupId + "void main() {\n" + kThreadIndex +
             "    if (i < N) out0.d[i] = " + storage_type(dtype) + "(0.0);\n}\n";
    return k;
}

KernelSource embedding_grad_kernel(DType dtype, int64_t positions, int64_t vocab, int64_t dim, const Launch& launch) {
    KernelSource k;
    k.label = "embedding_grad";
    k.iface.local_size = pow2_at_most(launch.local_size);
    k.iface.spec_constants = {"POSITIONS", "VOCAB", "D"};
    k.spec_values = {checked_u32(positions, "positions"), checked_u32(vocab, "vocabulary"), checked_u32(dim, "embedding dim")};
    checked_u32(vocab * dim, "embedding table size");
    checked_u32(positions * dim, "upstream size");
    k.iface.bindings = {{"ids", DType::I32}, {"up", dtype}, {"grad", dtype, true}};
    k.glsl = glsl_preamble(k.iface) + kFlatGroupId +
             "shared uint seen_before;\n"
             "void main() {\n"
             "    uint n = mn_group_id();\n"
             "    if (n >= POSITIONS) return;\n"
             "    uint lid = gl_LocalInvocationID.x;\n"
             "    int id = ids.d[n];\n"
             "    if (lid == 0u) seen_before = 0u;\n"
             "    barrier();\n"
             "    for (uint m = lid; m < n; m += WG) if (ids.d[m] == id) atomicOr(seen_before, 1u);\n"
             "    barrier();\n"
             "    if (seen_before != 0u || id < 0 || uint(id) >= VOCAB) return;\n"
             "    for (uint j = lid; j < D; j += WG) {\n"
             "        float acc = 0.0;\n"
             "        for (uint m = n; m < POSITIONS; ++m) if (ids.d[m] == id) acc += float(up.d[m * D + j]);\n"
             "        grad.d[uint(id) * D + j] = " + storage_type(dtype) + "(acc);\n"
             "    }\n"
             "}\n";
    k.groups = grid_for(static_cast<uint64_t>(positions), launch.max_groups);
    return k;
}

KernelSource norm_kernel(const NormSpec& spec, const Launch& launch) {
    const bool layer = spec.mode == NormMode::Layer;
    KernelSource k = row_kernel(norm_label(spec, false), spec, launch);
    k.iface.bindings = {{"x", spec.dtype}, {"w", spec.dtype}};
    if (layer) k.iface.bindings.push_back({"b", spec.dtype});
    k.iface.bindings.push_back({"y", spec.dtype, true});
    const std::string epilogue = epilogue_glsl(spec.epilogue, k);
    const std::string input = input_glsl(k, spec.prologue);
    if (spec.prologue) k.iface.bindings.push_back({"x_out", spec.dtype, true});
    const std::string st = storage_type(spec.dtype);
    k.glsl = glsl_preamble(k.iface) + kFlatGroupId + kWorkgroupPairSum + epilogue + input + norm_head(spec.mode) +
             "    for (uint j = lid; j < D; j += WG) {\n"
             "        float xv = X_AT(base + j);\n" +
             (spec.prologue ? "        x_out.d[base + j] = " + st + "(xv);\n" : "") +
             "        float v = (xv - mean) * rstd * float(w.d[CH(j)])" + (layer ? " + float(b.d[CH(j)])" : "") + ";\n"
             "        y.d[base + j] = " + st + "(EPI(base + j, v));\n"
             "    }\n}\n";
    return k;
}

// With g = up * w and xhat = (x - mean) * rstd: dx = rstd (g - mean(g) - xhat mean(g xhat)),
// the mean(g) term only when mean-centered.
KernelSource norm_grad_kernel(const NormSpec& spec, const Launch& launch) {
    const bool layer = spec.mode == NormMode::Layer;
    KernelSource k = row_kernel(norm_label(spec, true), spec, launch);
    k.iface.bindings = {{"x", spec.dtype}, {"w", spec.dtype}, {"up", spec.dtype}, {"dx", spec.dtype, true}};
    const std::string epilogue = epilogue_glsl(spec.epilogue, k);
    if (spec.stores_up_xhat) k.iface.bindings.push_back({"up_xhat", spec.dtype, true});
    const std::string st = storage_type(spec.dtype);
    k.glsl = glsl_preamble(k.iface) + kFlatGroupId + kWorkgroupPairSum + epilogue + input_glsl(k, nullptr) + norm_head(spec.mode) +
             "    vec2 acc = vec2(0.0);\n"
             "    for (uint j = lid; j < D; j += WG) {\n"
             "        float g = float(up.d[base + j]) * float(w.d[CH(j)]);\n"
             "        acc += vec2(g, g * (float(x.d[base + j]) - mean) * rstd);\n"
             "    }\n"
             "    vec2 m = wg_sum(acc) / float(D);\n"
             "    for (uint j = lid; j < D; j += WG) {\n"
             "        float g = float(up.d[base + j]) * float(w.d[CH(j)]);\n"
             "        float xhat = (float(x.d[base + j]) - mean) * rstd;\n"
             "        dx.d[base + j] = " + st + "(EPI(base + j, rstd * (g - " + (layer ? "m.x" : "0.0") + " - xhat * m.y)));\n" +
             (spec.stores_up_xhat ? "        up_xhat.d[base + j] = " + st + "(float(up.d[base + j]) * xhat);\n" : "") +
             "    }\n}\n";
    return k;
}

// The angle position * inv_freq is one f32 product, as Hugging Face forms it (the reference
// rounds it the same way), reduced into [-pi, pi] with a two-constant (Cody-Waite) 2 pi before
// cos/sin: GPU sin/cos lose accuracy on large arguments, and positions run into the thousands.
const char* const kRopeRotate = R"(
void rope_rotate(inout float a, inout float b, float position, float inv_freq, float sign) {
    precise float angle = position * inv_freq;
    float turns = floor(angle * 0.15915494309189535 + 0.5);
    angle = (angle - turns * 6.28125) - turns * 1.9353071795864769e-3;
    float c = cos(angle), s = sign * sin(angle), x = a;
    a = x * c - b * s;
    b = b * c + x * s;
}
)";

const char* const kCacheStart = "uint cache_start(uint rows, uint len) { return uint(clamp(start.d[0], 0, int(rows) - int(len))); }\n";

KernelSource rope_kernel(DType dtype, int64_t rows, int64_t seq, int64_t dim, bool inverse, const Launch& launch,
                         const RopeLayout& layout) {
    const int64_t half = dim / 2;
    KernelSource k = elementwise(inverse ? "rope_inverse" : "rope", rows * half, launch);
    k.iface.spec_constants = {"PAIRS", "SEQ", "HALF"};
    k.spec_values = {checked_u32(rows * half, "rope pairs"), checked_u32(seq, "sequence length"), checked_u32(half, "half dim")};
    checked_u32(rows * dim, "rope size");
    k.iface.bindings = {{"x", dtype}, {"positions", DType::I32}, {"inv_freq", dtype}, {"y", dtype, true}};
    const std::string st = storage_type(dtype);
    const std::string heads = std::to_string(layout.heads) + "u";
    std::string out_row = "uint out_row(uint r) { return r; }\n";
    if (layout.writes_merged) out_row = heads_row_fn("out_row", "SEQ", heads);
    if (layout.cache_rows > 0) {
        k.iface.bindings.push_back({"start", DType::I32});
        const std::string cache = std::to_string(checked_u32(layout.cache_rows, "cache rows")) + "u";
        out_row = kCacheStart + ("uint out_row(uint r) { return (r / SEQ) * " + cache + " + cache_start(" + cache +
                                 ", SEQ) + r % SEQ; }\n");
    }
    const std::string rows_glsl = (layout.reads_split ? heads_row_fn("in_row", "SEQ", heads) : "uint in_row(uint r) { return r; }\n") +
                                  out_row;
    k.glsl = glsl_preamble(k.iface) + kFlatGroupId + kRopeRotate + rows_glsl + "void main() {\n" + kThreadIndex +
             "    if (i >= PAIRS) return;\n"
             "    uint r = i / HALF, p = i % HALF;\n"
             "    uint lo = out_row(r) * 2u * HALF + p, hi = lo + HALF, at = in_row(r) * 2u * HALF + p;\n"
             "    float a = float(x.d[at]), b = float(x.d[at + HALF]);\n"
             "    rope_rotate(a, b, float(positions.d[r % SEQ]), float(inv_freq.d[p]), " + (inverse ? "-1.0" : "1.0") + ");\n"
             "    y.d[lo] = " + st + "(a);\n"
             "    y.d[hi] = " + st + "(b);\n"
             "}\n";
    return k;
}

namespace {

// The two cache writes share their sizes and the clamped start row `s`.
KernelSource scatter_head(const char* label, int64_t threads, int64_t dim, int64_t len, int64_t inner, const Launch& launch) {
    KernelSource k = elementwise(label, threads, launch);
    k.iface.spec_constants = {"N", "DIM", "LEN", "INNER"};
    k.spec_values = {checked_u32(threads, "element count"), checked_u32(dim, "axis length"), checked_u32(len, "rows written"),
                     checked_u32(inner, "inner size")};
    return k;
}
const char* const kScatterStart =
    "    if (i >= N) return;\n"
    "    uint s = cache_start(DIM, LEN);\n";

}  // namespace

KernelSource slice_scatter_kernel(DType dtype, int64_t outer, int64_t dim, int64_t len, int64_t inner,
                                  const Launch& launch) {
    KernelSource k = scatter_head("slice_scatter", outer * dim * inner, dim, len, inner, launch);
    k.iface.bindings = {{"x", dtype}, {"src", dtype}, {"start", DType::I32}, {"y", dtype, true}};
    k.glsl = glsl_preamble(k.iface) + kFlatGroupId + kCacheStart + "void main() {\n" + kThreadIndex + kScatterStart +
             "    uint c = (i / INNER) % DIM;\n"
             "    y.d[i] = c >= s && c < s + LEN ? src.d[((i / (INNER * DIM)) * LEN + c - s) * INNER + i % INNER] : x.d[i];\n"
             "}\n";
    return k;
}

KernelSource slice_write_kernel(DType dtype, int64_t outer, int64_t dim, int64_t len, int64_t inner, const Launch& launch) {
    KernelSource k = scatter_head("slice_write", outer * len * inner, dim, len, inner, launch);
    k.iface.bindings = {{"src", dtype}, {"start", DType::I32}, {"y", dtype, true}};
    k.glsl = glsl_preamble(k.iface) + kFlatGroupId + kCacheStart + "void main() {\n" + kThreadIndex + kScatterStart +
             "    uint o = i / (LEN * INNER), r = i % (LEN * INNER);\n"
             "    y.d[(o * DIM + s) * INNER + r] = src.d[i];\n"
             "}\n";
    return k;
}

}  // namespace mn::codegen
