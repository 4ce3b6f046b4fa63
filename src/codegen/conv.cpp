// Convolution family: conv2d and both of its derivatives as implicit GEMMs over the matmul tiles.
//
// Each of the three is a matrix product per group g (workgroup z) whose operands are gathered
// from the NCHW tensors on the fly, never materialized (no im2col buffer). With Cg = C / groups,
// Og = O / groups and taps t = (kh, kw):
//   forward      y[n, o, p]  = sum_(c,t)   w[o, c, t]       * x[n, c, p*s - pad + t*d]
//                M = Og, N = batch * OH * OW, K = Cg * KH * KW
//   grad input   gx[n, c, q] = sum_(o,t)   w[o, c, t]       * gy[n, o, (q + pad - t*d) / s]
//                M = Cg, N = batch * H * W,   K = Og * KH * KW   (taps whose division is inexact
//                or lands outside the output read zero)
//   grad weight  gw[o, c, t] = sum_(n,p)   gy[n, o, p]      * x[n, c, p*s - pad + t*d]
//                M = Og, N = Cg * KH * KW,  K = batch * OH * OW
// The tile loop follows the register-tiled matmul's: BK-deep slices of A and B staged in shared memory, a TM x TN
// register tile per thread. Staging walks whichever index is contiguous in memory (A is always
// contiguous along K; B along N except for the weight gradient). All sizes are specialization
// constants, so the index arithmetic divides by constants the driver folds.
//
// The weight gradient is a small matrix with a long K (every pixel of the batch): its few tiles
// alone would leave the device idle, so K is split across SPLITS workgroups (z = split * groups +
// g) that write partial products side by side, and a second pass sums them.
#include <algorithm>

#include "codegen/families.hpp"

namespace mn::codegen {

namespace {

const char* const kDims = R"(
const uint CG = C / GROUPS, OG = O / GROUPS, KK = KH * KW, OHW = OH * OW, HW = H * W;
#define SPLIT (gl_WorkGroupID.z / GROUPS)
)";

// Reads of x through a tap (the forward and the weight gradient).
const char* const kReadX = R"(
// x[b, c, ih, iw], zero outside the image
float x_at(uint b, uint c, int ih, int iw) {
    if (ih < 0 || iw < 0 || ih >= int(H) || iw >= int(W)) return 0.0;
    return float(X.d[((b * C + c) * H + uint(ih)) * W + uint(iw)]);
}
// input row of output row oh through tap kh (and likewise for columns)
int in_row(uint oh, uint kh) { return int(oh * SH + kh * DH) - int(PH); }
int in_col(uint ow, uint kw) { return int(ow * SW + kw * DW) - int(PW); }
)";

// Per mode: GEMM sizes, A(m, k), B(k, n) and the store of C(m, n), for group g.
const char* const kForward = R"(
const uint M = OG, N = BATCH * OHW, K = CG * KK;
#define B_K_MAJOR 0
float load_a(uint g, uint m, uint k) { return float(Wt.d[(g * OG + m) * K + k]); }
float load_b(uint g, uint k, uint n) {
    uint c = k / KK, t = k % KK, b = n / OHW, p = n % OHW;
    return x_at(b, g * CG + c, in_row(p / OW, t / KW), in_col(p % OW, t % KW));
}
void store_c(uint g, uint m, uint n, float v) { Y.d[((n / OHW) * O + g * OG + m) * OHW + n % OHW] = STORE(v); }
)";

const char* const kGradInput = R"(
const uint M = CG, N = BATCH * HW, K = OG * KK;
#define B_K_MAJOR 0
float load_a(uint g, uint m, uint k) { return float(Wt.d[((g * OG + k / KK) * CG + m) * KK + k % KK]); }
// the output coordinate whose tap t lands on input coordinate i, or -1
int tapped(uint i, uint pad, uint t, uint d, uint s, uint extent) {
    int u = int(i + pad) - int(t * d);
    if (u < 0 || u % int(s) != 0) return -1;
    u /= int(s);
    return u < int(extent) ? u : -1;
}
float load_b(uint g, uint k, uint n) {
    uint o = k / KK, t = k % KK, b = n / HW, q = n % HW;
    int oh = tapped(q / W, PH, t / KW, DH, SH, OH), ow = tapped(q % W, PW, t % KW, DW, SW, OW);
    if (oh < 0 || ow < 0) return 0.0;
    return float(GY.d[((b * O + g * OG + o) * OH + uint(oh)) * OW + uint(ow)]);
}
void store_c(uint g, uint m, uint n, float v) { GX.d[((n / HW) * C + g * CG + m) * HW + n % HW] = STORE(v); }
)";

const char* const kGradWeight = R"(
const uint M = OG, N = CG * KK, K = BATCH * OHW;
#define B_K_MAJOR 1
float load_a(uint g, uint m, uint k) { return float(GY.d[((k / OHW) * O + g * OG + m) * OHW + k % OHW]); }
float load_b(uint g, uint k, uint n) {
    uint c = n / KK, t = n % KK, b = k / OHW, p = k % OHW;
    return x_at(b, g * CG + c, in_row(p / OW, t / KW), in_col(p % OW, t % KW));
}
// one partial product per split, each the size of the weight
void store_c(uint g, uint m, uint n, float v) { GW.d[SPLIT * O * N + (g * OG + m) * N + n] = STORE(v); }
)";

const char* const kTileLoop = R"(
shared float As[BK][BM + 1];
shared float Bs[BK][BN + 1];
const uint TX = BN / TN;   // threads along n
const uint TY = BM / TM;   // threads along m

void main() {
    uint lid = gl_LocalInvocationID.x;
    uint tx = lid % TX, ty = lid / TX;
    uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN, g = gl_WorkGroupID.z % GROUPS;

    float acc[TM][TN];
    for (uint i = 0u; i < TM; ++i) for (uint j = 0u; j < TN; ++j) acc[i][j] = 0.0;

    uint k_begin = SPLIT * K_PER_SPLIT, k_end = min(K, k_begin + K_PER_SPLIT);
    for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
        for (uint e = lid; e < BM * BK; e += WG) {
            uint row = e / BK, kk = e % BK, gm = m0 + row, gk = k0 + kk;
            As[kk][row] = gm < M && gk < k_end ? load_a(g, gm, gk) : 0.0;
        }
        for (uint e = lid; e < BN * BK; e += WG) {
            uint col, kk;
            if (B_K_MAJOR == 1) { col = e / BK; kk = e % BK; } else { kk = e / BN; col = e % BN; }
            uint gn = n0 + col, gk = k0 + kk;
            Bs[kk][col] = gn < N && gk < k_end ? load_b(g, gk, gn) : 0.0;
        }
        barrier();
        for (uint kk = 0u; kk < BK; ++kk) {
            float av[TM], bv[TN];
            for (uint i = 0u; i < TM; ++i) av[i] = As[kk][ty + i * TY];
            for (uint j = 0u; j < TN; ++j) bv[j] = Bs[kk][tx + j * TX];
            for (uint i = 0u; i < TM; ++i) for (uint j = 0u; j < TN; ++j) acc[i][j] += av[i] * bv[j];
        }
        barrier();
    }
    for (uint i = 0u; i < TM; ++i) {
        uint gm = m0 + ty + i * TY;
        if (gm >= M) continue;
        for (uint j = 0u; j < TN; ++j) {
            uint gn = n0 + tx + j * TX;
            if (gn < N) store_c(g, gm, gn, acc[i][j]);
        }
    }
}
)";

struct Tiles {
    uint32_t bm = 64, bn = 64, bk = 16, tm = 4, tn = 4;  // workgroup tile, per-thread tile
};

// A 64x64 tile, 16 deep (on a CPU driver an 8x8 register tile per thread measured faster). A GEMM
// with few rows (a layer with few channels) would leave most of that tile idle: halve its height,
// and each thread's share of it, while the rows still fit (the thread count stays).
Tiles tiles_for(const MatmulTuning& tuning, int64_t m) {
    Tiles t;
    if (tuning.cpu) t.tm = t.tn = 8;
    while (t.bm > 16 && t.bm / 2 >= m && t.tm % 2 == 0) t.bm /= 2, t.tm /= 2;
    return t;
}

// The GEMM's rows and columns for a spec: (m, n, k).
std::array<int64_t, 3> gemm_dims(const ConvSpec& spec) {
    const Shape &x = spec.x, &w = spec.weight, &y = spec.y;
    const int64_t groups = spec.attrs[6], cg = x[1] / groups, og = w[0] / groups, kk = w[2] * w[3];
    switch (spec.mode) {
        case ConvMode::Forward: return {og, x[0] * y[2] * y[3], cg * kk};
        case ConvMode::GradInput: return {cg, x[0] * x[2] * x[3], og * kk};
        case ConvMode::GradWeight: break;
    }
    return {og, cg * kk, x[0] * y[2] * y[3]};
}

// K per split, a multiple of BK, for `splits` splits.
int64_t k_per_split(int64_t k, int64_t splits, uint32_t bk) {
    const int64_t per = (k + splits - 1) / splits;
    return (per + bk - 1) / bk * bk;
}

}  // namespace

int64_t conv2d_weight_splits(const ConvSpec& spec, const MatmulTuning& tuning) {
    if (spec.mode != ConvMode::GradWeight) return 1;
    const auto [m, n, k] = gemm_dims(spec);
    const Tiles t = tiles_for(tuning, m);
    const int64_t groups = ((m + t.bm - 1) / t.bm) * ((n + t.bn - 1) / t.bn) * spec.attrs[6];
    // two workgroups per compute unit, as the matmul family aims for
    const int64_t target_groups = 2 * static_cast<int64_t>(tuning.compute_units ? tuning.compute_units : 32);
    // Each split keeps at least 16 K-tiles of work; no split is left empty.
    const int64_t most = std::max<int64_t>(1, k / (16 * static_cast<int64_t>(t.bk)));
    const int64_t splits = std::clamp<int64_t>(target_groups / groups, 1, most);
    return (k + k_per_split(k, splits, t.bk) - 1) / k_per_split(k, splits, t.bk);
}

KernelSource conv2d_kernel(const ConvSpec& spec, const MatmulTuning& tuning, int64_t splits) {
    const Shape &x = spec.x, &w = spec.weight, &y = spec.y;
    const std::vector<int64_t>& a = spec.attrs;
    const auto [m, n, depth] = gemm_dims(spec);  // the GEMM's rows, columns and depth
    if (splits > 1 && spec.mode != ConvMode::GradWeight) throw Error("conv2d: only the weight gradient splits K");
    const Tiles t = tiles_for(tuning, m);
    const uint32_t max_groups = tuning.max_groups;
    KernelSource k;
    k.iface.local_size = (t.bm / t.tm) * (t.bn / t.tn);
    k.iface.spec_constants = {"BATCH", "C", "H", "W", "O", "KH", "KW", "OH", "OW",
                              "SH", "SW", "PH", "PW", "DH", "DW", "GROUPS", "K_PER_SPLIT"};
    for (int64_t v : {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], a[0], a[1], a[2], a[3], a[4], a[5], a[6],
                      k_per_split(depth, splits, t.bk)}) {
        k.spec_values.push_back(checked_u32(v, "conv2d size"));
    }
    const char* mode = nullptr;
    switch (spec.mode) {
        case ConvMode::Forward:
            k.label = "conv2d";
            k.iface.bindings = {{"X", spec.dtype}, {"Wt", spec.dtype}, {"Y", spec.dtype, true}};
            mode = kForward;
            break;
        case ConvMode::GradInput:
            k.label = "conv2d_grad_input";
            k.iface.bindings = {{"GY", spec.dtype}, {"Wt", spec.dtype}, {"GX", spec.dtype, true}};
            mode = kGradInput;
            break;
        case ConvMode::GradWeight:
            k.label = "conv2d_grad_weight";
            // with splits > 1, GW is the [splits, weight] scratch that conv2d_split_sum_kernel reduces
            k.iface.bindings = {{"X", spec.dtype}, {"GY", spec.dtype}, {"GW", splits > 1 ? DType::F32 : spec.dtype, true}};
            mode = kGradWeight;
            break;
    }
    checked_u32(numel(x), "conv2d input size");
    checked_u32(numel(y), "conv2d output size");
    checked_u32(numel(w) * splits, "conv2d weight-gradient partials");
    const char* store = splits > 1 ? "float" : storage_type(spec.dtype);
    const std::string defs = "#define BM " + std::to_string(t.bm) + "u\n#define BN " + std::to_string(t.bn) +
                             "u\n#define BK " + std::to_string(t.bk) + "u\n#define TM " + std::to_string(t.tm) +
                             "u\n#define TN " + std::to_string(t.tn) + "u\n#define STORE " + store + "\n";
    const char* read_x = spec.mode == ConvMode::GradInput ? "" : kReadX;  // grad input has no X binding
    k.glsl = glsl_preamble(k.iface) + defs + kDims + read_x + mode + kTileLoop;
    const int64_t gx = (n + t.bn - 1) / t.bn, gy = (m + t.bm - 1) / t.bm, gz = a[6] * splits;
    if (gx > max_groups || gy > max_groups || gz > max_groups) {
        throw Error("conv2d grid " + std::to_string(gx) + "x" + std::to_string(gy) + "x" + std::to_string(gz) +
                    " exceeds the device's workgroup limit");
    }
    k.groups = {static_cast<uint32_t>(gx), static_cast<uint32_t>(gy), static_cast<uint32_t>(gz)};
    return k;
}

KernelSource conv2d_split_sum_kernel(DType dtype, int64_t count, int64_t splits, const Launch& launch) {
    KernelSource k;
    k.label = "conv2d_grad_weight_sum";
    k.iface.local_size = launch.local_size;
    k.iface.spec_constants = {"COUNT", "SPLITS"};
    k.spec_values = {checked_u32(count, "weight size"), checked_u32(splits, "splits")};
    k.iface.bindings = {{"partial", DType::F32}, {"gw", dtype, true}};
    k.glsl = glsl_preamble(k.iface) + kFlatGroupId +
             "void main() {\n"
             "    uint i = mn_group_id() * WG + gl_LocalInvocationID.x;\n"
             "    if (i >= COUNT) return;\n"
             "    float total = 0.0;\n"
             "    for (uint s = 0u; s < SPLITS; ++s) total += partial.d[s * COUNT + i];\n"
             "    gw.d[i] = " + storage_type(dtype) + "(total);\n}\n";
    k.groups = grid_for((static_cast<uint64_t>(count) + launch.local_size - 1) / launch.local_size, launch.max_groups);
    return k;
}

}  // namespace mn::codegen
