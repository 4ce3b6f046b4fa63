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
// The tile loop is the matmul family's: BK-deep slices of A and B staged in shared memory, a TM x TN
// register tile per thread. Staging walks whichever index is contiguous in memory (A is always
// contiguous along K; B along N except for the weight gradient). All sizes are specialization
// constants, so the index arithmetic divides by constants the driver folds.
#include "codegen/families.hpp"

namespace mn::codegen {

namespace {

const char* const kDims = R"(
const uint CG = C / GROUPS, OG = O / GROUPS, KK = KH * KW, OHW = OH * OW, HW = H * W;
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
void store_c(uint g, uint m, uint n, float v) { GW.d[(g * OG + m) * N + n] = STORE(v); }
)";

const char* const kTileLoop = R"(
shared float As[BK][BM + 1];
shared float Bs[BK][BN + 1];
const uint TX = BN / TN;   // threads along n
const uint TY = BM / TM;   // threads along m

void main() {
    uint lid = gl_LocalInvocationID.x;
    uint tx = lid % TX, ty = lid / TX;
    uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN, g = gl_WorkGroupID.z;

    float acc[TM][TN];
    for (uint i = 0u; i < TM; ++i) for (uint j = 0u; j < TN; ++j) acc[i][j] = 0.0;

    for (uint k0 = 0u; k0 < K; k0 += BK) {
        for (uint e = lid; e < BM * BK; e += WG) {
            uint row = e / BK, kk = e % BK, gm = m0 + row, gk = k0 + kk;
            As[kk][row] = gm < M && gk < K ? load_a(g, gm, gk) : 0.0;
        }
        for (uint e = lid; e < BN * BK; e += WG) {
            uint col, kk;
            if (B_K_MAJOR == 1) { col = e / BK; kk = e % BK; } else { kk = e / BN; col = e % BN; }
            uint gn = n0 + col, gk = k0 + kk;
            Bs[kk][col] = gn < N && gk < K ? load_b(g, gk, gn) : 0.0;
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

}  // namespace

KernelSource conv2d_kernel(const ConvSpec& spec, const MatmulTuning& tuning) {
    // A 64x64 tile, 16 deep; on a CPU driver an 8x8 register tile per thread measured faster.
    struct {
        uint32_t bm = 64, bn = 64, bk = 16, tm = 4, tn = 4;
    } t;
    if (tuning.cpu) t.tm = t.tn = 8;
    const uint32_t max_groups = tuning.max_groups;
    const Shape& x = spec.x;
    const Shape& w = spec.weight;
    const Shape& y = spec.y;
    const std::vector<int64_t>& a = spec.attrs;
    KernelSource k;
    k.iface.local_size = (t.bm / t.tm) * (t.bn / t.tn);
    k.iface.spec_constants = {"BATCH", "C", "H", "W", "O", "KH", "KW", "OH", "OW",
                              "SH", "SW", "PH", "PW", "DH", "DW", "GROUPS"};
    for (int64_t v : {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], a[0], a[1], a[2], a[3], a[4], a[5], a[6]}) {
        k.spec_values.push_back(checked_u32(v, "conv2d size"));
    }
    const int64_t groups = a[6], cg = x[1] / groups, og = w[0] / groups, kk = w[2] * w[3];
    int64_t m = 0, n = 0;
    const char* mode = nullptr;
    switch (spec.mode) {
        case ConvMode::Forward:
            k.label = "conv2d";
            k.iface.bindings = {{"X", spec.dtype}, {"Wt", spec.dtype}, {"Y", spec.dtype, true}};
            m = og, n = x[0] * y[2] * y[3], mode = kForward;
            break;
        case ConvMode::GradInput:
            k.label = "conv2d_grad_input";
            k.iface.bindings = {{"GY", spec.dtype}, {"Wt", spec.dtype}, {"GX", spec.dtype, true}};
            m = cg, n = x[0] * x[2] * x[3], mode = kGradInput;
            break;
        case ConvMode::GradWeight:
            k.label = "conv2d_grad_weight";
            k.iface.bindings = {{"X", spec.dtype}, {"GY", spec.dtype}, {"GW", spec.dtype, true}};
            m = og, n = cg * kk, mode = kGradWeight;
            break;
    }
    checked_u32(numel(x), "conv2d input size");
    checked_u32(numel(y), "conv2d output size");
    checked_u32(x[0] * y[2] * y[3] * std::max(cg, og) * kk, "conv2d GEMM size");
    const std::string defs = "#define BM " + std::to_string(t.bm) + "u\n#define BN " + std::to_string(t.bn) +
                             "u\n#define BK " + std::to_string(t.bk) + "u\n#define TM " + std::to_string(t.tm) +
                             "u\n#define TN " + std::to_string(t.tn) + "u\n#define STORE " +
                             storage_type(spec.dtype) + "\n";
    const char* read_x = spec.mode == ConvMode::GradInput ? "" : kReadX;  // grad input has no X binding
    k.glsl = glsl_preamble(k.iface) + defs + kDims + read_x + mode + kTileLoop;
    const int64_t gx = (n + t.bn - 1) / t.bn, gy = (m + t.bm - 1) / t.bm;
    if (gx > max_groups || gy > max_groups || groups > max_groups) {
        throw Error("conv2d grid " + std::to_string(gx) + "x" + std::to_string(gy) + "x" + std::to_string(groups) +
                    " exceeds the device's workgroup limit");
    }
    k.groups = {static_cast<uint32_t>(gx), static_cast<uint32_t>(gy), static_cast<uint32_t>(groups)};
    return k;
}

}  // namespace mn::codegen
