// Matmul family: C[b] = op(A[b]) @ op(B[b]) with broadcast batch dims (up to 4) and transposes
// read in place. This file holds what the kernels share and the choice among them:
//   - GEMV (matmul_gemv.cpp) when M or N is 1: the product is a matrix-vector product, bound by
//     reading the matrix once; tiles would leave most threads idle.
//   - cooperative matrix (matmul_coop.cpp) in precision Fast on devices that have NV f16
//     cooperative matrices: f16 tiles, f32 accumulation.
//   - the register-tiled f32 kernel (matmul_tiled.cpp) otherwise.
// Tile sizes follow the grid: the largest tile that still launches about two workgroups per
// compute unit, since at these model sizes occupancy beats per-workgroup efficiency.
#include <algorithm>

#include "codegen/matmul_common.hpp"

namespace mn::codegen {

namespace matmul_detail {

namespace {

constexpr int kMaxBatchRank = 4;

void add_batch_constants(KernelSource& k, const std::string& prefix, const std::vector<int64_t>& v, int64_t pad) {
    if (v.size() > kMaxBatchRank) throw Error("matmul supports at most 4 batch dims");
    const size_t lead = kMaxBatchRank - v.size();
    for (size_t d = 0; d < kMaxBatchRank; ++d) {
        k.iface.spec_constants.push_back(prefix + std::to_string(d));
        k.spec_values.push_back(checked_u32(d < lead ? pad : v[d - lead], "matmul batch stride"));
    }
}

// The operand's contiguous dimension: K for A and for B^T, M for A^T, N for B.
int64_t inner_dim(const MatmulSpec& spec, char operand) {
    if (operand == 'a') return spec.trans_a ? spec.m : spec.k;
    return spec.trans_b ? spec.k : spec.n;
}

}  // namespace

std::string define(const std::string& name, int64_t value) {
    return "#define " + name + " " + std::to_string(value) + "u\n";
}

KernelSource base_kernel(const MatmulSpec& spec, uint32_t local_size, const std::string& label) {
    KernelSource k;
    k.label = label;
    k.iface.local_size = local_size;
    k.iface.spec_constants = {"M", "N", "K"};
    k.spec_values = {checked_u32(spec.m, "matmul M"), checked_u32(spec.n, "matmul N"), checked_u32(spec.k, "matmul K")};
    add_batch_constants(k, "BD", spec.batch, 1);
    add_batch_constants(k, "AS", spec.a_batch_strides, 0);
    add_batch_constants(k, "BS", spec.b_batch_strides, 0);
    k.iface.bindings = {{"a", spec.dtype}, {"b", spec.dtype}, {"c", spec.dtype, true}};
    checked_u32(numel(spec.batch) * spec.m * spec.n, "matmul output size");
    return k;
}

bool vec4_operand(const MatmulSpec& spec, char operand) { return inner_dim(spec, operand) % 4 == 0; }

std::string common_glsl(const MatmulSpec& spec) {
    const std::string s4 = spec.dtype == DType::F16 ? "f16vec4" : "vec4";
    std::string g = "#define STORE " + std::string(storage_type(spec.dtype)) + "\n#define STORE4 " + s4 + "\n";
    // Second views of the same bindings, 4 elements wide (Vulkan allows aliased descriptors).
    g += "layout(std430, set = 0, binding = 0) readonly buffer B_a4 { STORE4 d[]; } a4;\n"
         "layout(std430, set = 0, binding = 1) readonly buffer B_b4 { STORE4 d[]; } b4;\n"
         "layout(std430, set = 0, binding = 2) writeonly buffer B_c4 { STORE4 d[]; } c4;\n";
    g += R"(
void batch_offsets(uint z, out uint a_off, out uint b_off) {
    uint c3 = z % BD3; z /= BD3; uint c2 = z % BD2; z /= BD2; uint c1 = z % BD1; z /= BD1; uint c0 = z;
    a_off = c0 * AS0 + c1 * AS1 + c2 * AS2 + c3 * AS3;
    b_off = c0 * BS0 + c1 * BS1 + c2 * BS2 + c3 * BS3;
}
)";
    return g;
}

std::string loader_glsl(const MatmulSpec& spec, char operand) {
    const bool a = operand == 'a';
    const bool trans = a ? spec.trans_a : spec.trans_b;
    const std::string x(1, operand), X(1, static_cast<char>(operand - 'a' + 'A'));
    // Memory order: A is [M][K] (A^T: [K][M]); B is [K][N] (B^T: [N][K]).
    const char* outer = a ? (trans ? "K" : "M") : (trans ? "N" : "K");
    const char* inner = a ? (trans ? "M" : "K") : (trans ? "K" : "N");
    std::string g = "#define " + X + "_OUTER " + outer + "\n#define " + X + "_INNER " + inner + "\n";
    g += "vec4 load_" + x + "(uint off, uint o, uint i) {\n"
         "    vec4 v = vec4(0.0);\n"
         "    if (o >= " + X + "_OUTER) return v;\n"
         "    uint at = off + o * " + X + "_INNER + i;\n";
    if (vec4_operand(spec, operand)) {
        // i is a multiple of 4 and so is the row length: the 4 elements are all in or all out.
        g += "    if (i < " + X + "_INNER) v = vec4(" + x + "4.d[at >> 2]);\n";
    } else {
        g += "    for (uint q = 0u; q < 4u; ++q) if (i + q < " + X + "_INNER) v[q] = float(" + x + ".d[at + q]);\n";
    }
    return g + "    return v;\n}\n";
}

std::array<uint32_t, 3> tile_grid(const MatmulSpec& spec, uint32_t bm, uint32_t bn, uint32_t max_groups) {
    const int64_t batch = std::max<int64_t>(numel(spec.batch), 1);
    const int64_t gx = (spec.n + bn - 1) / bn, gy = (spec.m + bm - 1) / bm;
    if (gx > max_groups || gy > max_groups || batch > max_groups) {
        throw Error("matmul grid " + std::to_string(gx) + "x" + std::to_string(gy) + "x" + std::to_string(batch) +
                    " exceeds the device's workgroup limit");
    }
    return {static_cast<uint32_t>(std::max<int64_t>(gx, 1)), static_cast<uint32_t>(std::max<int64_t>(gy, 1)),
            static_cast<uint32_t>(batch)};
}

}  // namespace matmul_detail

namespace {

using namespace matmul_detail;

int64_t workgroups(const MatmulSpec& spec, uint32_t bm, uint32_t bn) {
    return ((spec.m + bm - 1) / bm) * ((spec.n + bn - 1) / bn) * std::max<int64_t>(numel(spec.batch), 1);
}

// The first candidate (largest first) that fits the device and launches at least `target`
// workgroups; else the smallest that fits. `forced_bm` (tests, tuning) picks by tile height.
template <typename G, typename Fits>
G pick(const std::vector<G>& candidates, const MatmulSpec& spec, const MatmulTuning& t, Fits fits) {
    // Unknown compute-unit count: assume a mid-size GPU.
    const int64_t target = 2 * static_cast<int64_t>(t.compute_units ? t.compute_units : 32);
    const G* chosen = nullptr;
    for (const G& g : candidates) {
        if (!fits(g)) continue;
        if (t.forced_bm) {
            if (g.bm == t.forced_bm) return g;
            continue;
        }
        chosen = &g;
        if (workgroups(spec, g.bm, g.bn) >= target) break;
    }
    if (!chosen) {
        throw Error("matmul: no tile fits this device" +
                    (t.forced_bm ? " with MEGANEURA_MATMUL_TILE=" + std::to_string(t.forced_bm) : std::string()));
    }
    return *chosen;
}

}  // namespace

KernelSource matmul_kernel(const MatmulSpec& spec, const MatmulTuning& t) {
    if (spec.m == 1 || spec.n == 1) return gemv_kernel(spec, t.max_groups);
    if (t.coop_subgroup && spec.dtype == DType::F32) {
        const std::vector<CoopGeometry> coop = {{128, 128, 64, 32}, {64, 64, 32, 32}, {32, 32, 16, 16}};
        const CoopGeometry g = pick(coop, spec, t, [&](const CoopGeometry& c) {
            return c.subgroups() * t.coop_subgroup <= t.max_invocations && coop_shared_bytes(c) <= t.max_shared_memory;
        });
        return coop_kernel(spec, g, t.coop_subgroup, t.max_groups);
    }
    // A CPU driver runs a workgroup as one thread's loop: few invocations, a big register tile
    // (8x8 measured 1.6x faster than 4x4 on lavapipe).
    const std::vector<TiledGeometry> tiled =
        t.cpu && !t.forced_bm ? std::vector<TiledGeometry>{{64, 64, 16, 8, 8}}
                              : std::vector<TiledGeometry>{{128, 128, 16, 8, 8}, {64, 64, 16, 4, 4}, {32, 32, 16, 4, 4}};
    const TiledGeometry g = pick(tiled, spec, t, [&](const TiledGeometry& c) {
        return c.threads() <= t.max_invocations && c.shared_bytes() <= t.max_shared_memory;
    });
    return tiled_kernel(spec, g, t.max_groups);
}

}  // namespace mn::codegen
