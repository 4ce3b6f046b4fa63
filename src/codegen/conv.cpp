// Convolution family: conv2d and both of its derivatives as implicit GEMMs over the matmul tiles.
//
// Each of the three is a matrix product per group g (workgroup z) whose operands are gathered
// from the NCHW tensors on the fly, never materialized (no im2col buffer). With Cg = C / groups,
// Og = O / groups and taps t = (kh, kw):
//   forward      y[n, o, p]  = sum_(c,t)   w[o, c, t]       * x[n, c, p*s - pad + t*d]
//                M = Og, N = batch * OH * OW, K = Cg * KH * KW
//   grad input   gx[n, c, q] = sum_(o,t)   w[o, c, t]       * gy[n, o, (q + pad - t*d) / s]
//                M = Cg, N = batch * H * W,   K = Og * KH * KW   (taps that land outside the output
//                read zero; strided, one GEMM per stride phase over the taps that land: kGradInputByPhase)
//   grad weight  gw[o, c, t] = sum_(n,p)   gy[n, o, p]      * x[n, c, p*s - pad + t*d]
//                M = Og, N = Cg * KH * KW,  K = batch * OH * OW
// The tile loop is the matmul family's: BK-deep slices of A and B staged in shared memory, a TM x TN
// register tile per thread, the next slice's gathers in registers while the current one is
// multiplied out. Staging walks whichever index is contiguous in memory (A is always contiguous
// along K; B along N except for the weight gradient). All sizes are specialization constants, so
// the index arithmetic divides by constants the driver folds. The tile and split-K follow the
// matmul family's choice for the same GEMM (matmul.cpp): the late layers' grids (7x7 images) and
// every weight gradient (K = batch * OH * OW, up to 50176 in ResNet-50's stem) are far too small
// to fill a large GPU unsplit. Split pieces write f32 partial outputs in the output's layout,
// summed by the workgroup that stores a tile's last piece (kPieceSum), or with MEGANEURA_SPLIT_SUM=dispatch
// by the matmul family's split-sum pass.
//
// A 1x1 convolution with stride 1, no padding and one group is a plain matmul per image, and goes
// to the matmul family itself (its vector loads and cooperative-matrix path): see as_matmul.
#include <optional>

#include "codegen/matmul_common.hpp"

namespace mn::codegen {

namespace {

const char* const kDims = R"(
const uint CG = C / GROUPS, OG = O / GROUPS, KK = KH * KW, OHW = OH * OW, HW = H * W;
)";

// Every mode but the strided input gradient's is one GEMM per group (see kGradInputByPhase).
const char* const kOnePhase = R"(
const uint PHASES = 1u;
void enter_phase(uint phase) {}
)";

// x[base + (c * H + ih) * W + iw] (base: the image's and group's offset), zero outside the image;
// the forward and the weight gradient read x through a tap.
const char* const kReadX = R"(
float x_at(uint base, uint c, int ih, int iw) {
    if (ih < 0 || iw < 0 || ih >= int(H) || iw >= int(W)) return 0.0;
    return float(X.d[base + (c * H + uint(ih)) * W + uint(iw)]);
}
)";

// Per mode: GEMM sizes, A(m, k), B(k, n) and C(m, n) of group g: its index c_at in the output, its
// value c_value (the epilogue: the forward's and the input gradient's) and its store c_put. B is read as
// load_b(col_of(g, n), k): Col holds what depends on n only, which the tile loop computes once
// per thread where a thread's column is the same in every slice (B_K_MAJOR 0).
const char* const kForward = R"(
const uint M = OG, N = BATCH * OHW, K = CG * KK, OUT_ELEMS = BATCH * O * OHW;
#define B_K_MAJOR 0
float load_a(uint g, uint m, uint k) { return float(Wt.d[(g * OG + m) * K + k]); }
struct Col { uint base; int ih, iw; };  // x offset of the image and group; input origin of the window
Col col_of(uint g, uint n) {
    uint b = n / OHW, p = n % OHW;
    return Col((b * C + g * CG) * HW, int((p / OW) * SH) - int(PH), int((p % OW) * SW) - int(PW));
}
float load_b(Col col, uint k) {
    uint c = k / KK, t = k % KK;
    return x_at(col.base, c, col.ih + int((t / KW) * DH), col.iw + int((t % KW) * DW));
}
#if K_OCTETS
// k = ((c / 8) * KK + t) * 8 + c % 8: group kb / 8's 8 k are channels c..c+7 at tap t, read through one
// window position.
void load_a8(uint g, uint m, uint kb, out float v[8]) {
    uint t = (kb / 8u) % KK, c = kb / (8u * KK) * 8u;
    [[unroll]] for (uint q = 0u; q < 8u; ++q) v[q] = float(Wt.d[((g * OG + m) * CG + c + q) * KK + t]);
}
void load_b8(Col col, uint kb, out float v[8]) {
    uint t = (kb / 8u) % KK, c = kb / (8u * KK) * 8u;
    int ih = col.ih + int((t / KW) * DH), iw = col.iw + int((t % KW) * DW);
    bool inside = ih >= 0 && iw >= 0 && ih < int(H) && iw < int(W);
    uint at = col.base + (c * H + uint(max(ih, 0))) * W + uint(max(iw, 0));
    [[unroll]] for (uint q = 0u; q < 8u; ++q) v[q] = inside ? float(X.d[at + q * HW]) : 0.0;
}
#endif
uint c_at(uint g, uint m, uint n) { return ((n / OHW) * O + g * OG + m) * OHW + n % OHW; }
float c_value(uint i, float v) { return C_EPI(i, v); }  // an epilogue only where K is whole
void c_put(uint at, float v) { Y.d[at] = STORE(v); }
const bool QUAD_N = OHW % 4u == 0u;  // 4 columns from a multiple of 4 are 4 consecutive outputs
vec4 c_value4(uint i, vec4 v) { return C_EPI4(i, v); }
)";

const char* const kGradInput = R"(
const uint M = CG, N = BATCH * HW, K = OG * KK, OUT_ELEMS = BATCH * C * HW;
#define B_K_MAJOR 0
float load_a(uint g, uint m, uint k) { return float(Wt.d[((g * OG + k / KK) * CG + m) * KK + k % KK]); }
struct Col { uint base; int ih, iw; };  // gy offset of the image and group; padded input coordinates
Col col_of(uint g, uint n) {
    uint b = n / HW, q = n % HW;
    return Col((b * O + g * OG) * OHW, int(q / W + PH), int(q % W + PW));
}
// the output coordinate whose tap at offset `reach` lands on padded input coordinate i, or -1
int tapped(int i, uint reach, uint s, uint extent) {
    int u = i - int(reach);
    if (u < 0 || u % int(s) != 0) return -1;
    u /= int(s);
    return u < int(extent) ? u : -1;
}
float load_b(Col col, uint k) {
    uint o = k / KK, t = k % KK;
    int oh = tapped(col.ih, (t / KW) * DH, SH, OH), ow = tapped(col.iw, (t % KW) * DW, SW, OW);
    if (oh < 0 || ow < 0) return 0.0;
    return float(GY.d[col.base + (o * OH + uint(oh)) * OW + uint(ow)]);
}
#if K_OCTETS
// k = ((o / 8) * KK + t) * 8 + o % 8: group kb / 8's 8 k are output channels o..o+7 at tap t, read through
// one output position.
void load_a8(uint g, uint m, uint kb, out float v[8]) {
    uint t = (kb / 8u) % KK, o = kb / (8u * KK) * 8u;
    [[unroll]] for (uint q = 0u; q < 8u; ++q) v[q] = float(Wt.d[((g * OG + o + q) * CG + m) * KK + t]);
}
void load_b8(Col col, uint kb, out float v[8]) {
    uint t = (kb / 8u) % KK, o = kb / (8u * KK) * 8u;
    int oh = tapped(col.ih, (t / KW) * DH, SH, OH), ow = tapped(col.iw, (t % KW) * DW, SW, OW);
    bool inside = oh >= 0 && ow >= 0;
    uint at = col.base + (o * OH + uint(max(oh, 0))) * OW + uint(max(ow, 0));
    [[unroll]] for (uint q = 0u; q < 8u; ++q) v[q] = inside ? float(GY.d[at + q * OHW]) : 0.0;
}
#endif
uint c_at(uint g, uint m, uint n) { return ((n / HW) * C + g * CG + m) * HW + n % HW; }
float c_value(uint i, float v) { return C_EPI(i, v); }  // an epilogue only where K is whole
void c_put(uint at, float v) { GX.d[at] = STORE(v); }
const bool QUAD_N = HW % 4u == 0u;
vec4 c_value4(uint i, vec4 v) { return C_EPI4(i, v); }
)";

// The input gradient of a strided convolution (dilation 1), by phases: the input pixels whose padded
// coordinates leave the same remainders (rh, rw) by the stride are reached by the taps of those
// remainders alone, kh = rh + SH * i and kw = rw + SW * j, tap (i, j) from output pixel (U - i, V - j)
// where U = (ih + PH) / SH and V = (iw + PW) / SW. Each phase is a GEMM of its own over its pixels
// and its taps only, workgroup z's (enter_phase); none multiplies a tap that cannot land. The grid
// is sized for the largest phase; a smaller one's extra columns and depth read zeros and store
// nothing. N runs over (image, row, column) of the phase's pixels and K over (tap t = i * tw + j,
// output channel): k = t * OG + o, divided by the constant OG (so a group of 8 k, in octets, is 8
// channels at one tap), and t by the phase's tw through a float reciprocal (exact for so few taps):
// with integer divisions by the phase's sizes in every load, ResNet-50's strict input gradients took
// 1.68 -> 1.82 ms on the H200 where the unphased kernel's wasted taps had cost less.
const char* const kGradInputByPhase = R"(
const uint PHASES = SH * SW;
const uint M = CG, OUT_ELEMS = BATCH * C * HW;
#define B_K_MAJOR 0
// The phase's remainders, first input row and column, input rows and columns, taps down and across, and GEMM size.
uint rh, rw, ih0, iw0, hp, wp, th, tw, N, K;
float tw_inverse;
// how many of 0 .. extent - 1 step from first by stride
uint count_from(uint first, uint stride, uint extent) { return first < extent ? (extent - first + stride - 1u) / stride : 0u; }
void enter_phase(uint phase) {
    rh = phase / SW, rw = phase % SW;
    ih0 = (rh + SH - PH % SH) % SH, iw0 = (rw + SW - PW % SW) % SW;
    hp = count_from(ih0, SH, H), wp = count_from(iw0, SW, W);
    th = count_from(rh, SH, KH), tw = count_from(rw, SW, KW);
    N = BATCH * hp * wp, K = OG * th * tw;
    tw_inverse = 1.0 / float(max(tw, 1u));
}
// the phase's tap t as (i, j)
uvec2 tap(uint t) {
    uint i = uint((float(t) + 0.5) * tw_inverse);
    return uvec2(i, t - i * tw);
}
// the weight's index of output channel o (of the group), input channel m, at the phase's tap (i, j)
uint weight_at(uint g, uint o, uint m, uvec2 ij) {
    return ((g * OG + o) * CG + m) * KK + (rh + SH * ij.x) * KW + rw + SW * ij.y;
}
float load_a(uint g, uint m, uint k) { return float(Wt.d[weight_at(g, k % OG, m, tap(k / OG))]); }
struct Col { uint base; int oh, ow; };  // gy offset of the image and group; the output pixel of tap (0, 0)
Col col_of(uint g, uint n) {
    uint b = n / (hp * wp), q = n % (hp * wp);
    uint ih = ih0 + SH * (q / wp), iw = iw0 + SW * (q % wp);
    return Col((b * O + g * OG) * OHW, int((ih + PH) / SH), int((iw + PW) / SW));
}
// gy's index of output channel o at the output pixel of tap (i, j), or -1 outside the output
int gy_at(Col col, uint o, uvec2 ij) {
    int oh = col.oh - int(ij.x), ow = col.ow - int(ij.y);
    if (oh < 0 || ow < 0 || oh >= int(OH) || ow >= int(OW)) return -1;
    return int(col.base + (o * OH + uint(oh)) * OW + uint(ow));
}
float load_b(Col col, uint k) {
    int at = gy_at(col, k % OG, tap(k / OG));
    return at < 0 ? 0.0 : float(GY.d[at]);
}
#if K_OCTETS
void load_a8(uint g, uint m, uint kb, out float v[8]) {
    uvec2 ij = tap(kb / OG);
    [[unroll]] for (uint q = 0u; q < 8u; ++q) v[q] = float(Wt.d[weight_at(g, kb % OG + q, m, ij)]);
}
void load_b8(Col col, uint kb, out float v[8]) {
    int at = gy_at(col, kb % OG, tap(kb / OG));
    [[unroll]] for (uint q = 0u; q < 8u; ++q) v[q] = at < 0 ? 0.0 : float(GY.d[uint(at) + q * OHW]);
}
#endif
uint c_at(uint g, uint m, uint n) {
    uint b = n / (hp * wp), q = n % (hp * wp);
    return ((b * C + g * CG + m) * H + ih0 + SH * (q / wp)) * W + iw0 + SW * (q % wp);
}
float c_value(uint i, float v) { return C_EPI(i, v); }  // an epilogue only where K is whole
void c_put(uint at, float v) { GX.d[at] = STORE(v); }
const bool QUAD_N = false;  // a phase's columns are strided in the input
vec4 c_value4(uint i, vec4 v) { return v; }
)";

// k-major staging: a thread's k is the same for all its elements of a slice, so what depends on k
// only (Row) is computed once per slice, and its columns' Cols once per thread.
const char* const kGradWeight = R"(
const uint M = OG, N = CG * KK, K = BATCH * OHW, OUT_ELEMS = O * N;
#define B_K_MAJOR 1
struct Row { uint gy, x; int ih, iw; };  // gy offset of (image, pixel); x offset of the image; window origin
Row row_of(uint k) {
    uint b = k / OHW, p = k % OHW;
    return Row(b * O * OHW + p, b * C * HW, int((p / OW) * SH), int((p % OW) * SW));
}
float load_a(uint g, uint m, Row r) { return float(GY.d[r.gy + (g * OG + m) * OHW]); }
struct Col { uint base; int dh, dw; };  // x offset of the group's channel; the tap's offset from the window origin
Col col_of(uint g, uint n) {
    uint c = n / KK, t = n % KK;
    return Col((g * CG + c) * HW, int((t / KW) * DH) - int(PH), int((t % KW) * DW) - int(PW));
}
float load_b(Col col, Row r) { return x_at(r.x + col.base, 0u, r.ih + col.dh, r.iw + col.dw); }
uint c_at(uint g, uint m, uint n) { return (g * OG + m) * N + n; }
float c_value(uint i, float v) { return v; }
void c_put(uint at, float v) { GW.d[at] = STORE(v); }
const bool QUAD_N = N % 4u == 0u;
vec4 c_value4(uint i, vec4 v) { return v; }
)";

// Workgroup z = (split * PHASES + phase) * GROUPS + group, read in one place for both kernels (after the mode's
// enter_phase and the kernel's globals g and k_end; sum_pieces counts a tile's pieces by the same layout): sets g, enters
// the phase, and returns the split piece, which covers k in [split * KSPLIT, k_end) and writes its partial output
// OUT_ELEMS further on per split.
const char* const kWorkgroupZ = R"(
uint enter_workgroup() {
    g = gl_WorkGroupID.z % GROUPS;
    enter_phase(gl_WorkGroupID.z / GROUPS % PHASES);
    uint split = gl_WorkGroupID.z / (GROUPS * PHASES);
    k_end = min(K, split * KSPLIT + KSPLIT);
    return split;
}
)";

const char* const kTileLoop = R"(
// After the matmul family's shared layout (matmul_detail::kTiledSharedGlsl): a thread owns TM rows x TN
// columns in groups of 4 strided across the tile, read as vec4s.
const uint LA = BM * BK / WG, LB = BN * BK / WG;  // elements of each slice a thread stages
float ra[LA], rb[LB];
uint lid, m0, n0, g, k_end;
#if B_K_MAJOR == 1
// k-major staging of both operands: element e of a slice is row / column e / BK at depth e % BK, so
// a thread's depth is lid % BK in every slice (WG is a multiple of BK) and its columns never change.
Col bcols[LB];

void fetch(uint k0) {
    uint gk = k0 + lid % BK;
    bool in_k = gk < k_end;
    Row r = row_of(gk);
    [[unroll]] for (uint p = 0u; p < LA; ++p) {
        uint gm = m0 + (lid + p * WG) / BK;
        ra[p] = gm < M && in_k ? load_a(g, gm, r) : 0.0;
    }
    [[unroll]] for (uint p = 0u; p < LB; ++p) {
        uint gn = n0 + (lid + p * WG) / BK;
        rb[p] = gn < N && in_k ? load_b(bcols[p], r) : 0.0;
    }
}
#else
Col bcol;  // this thread's column of B, the same in every slice (WG is a multiple of BN)

void fetch(uint k0) {
    [[unroll]] for (uint p = 0u; p < LA; ++p) {
        uint e = lid + p * WG, gm = m0 + e / BK, gk = k0 + e % BK;
        ra[p] = gm < M && gk < k_end ? load_a(g, gm, gk) : 0.0;
    }
    [[unroll]] for (uint p = 0u; p < LB; ++p) {
        uint e = lid + p * WG, gk = k0 + e / BN;
        rb[p] = n0 + e % BN < N && gk < k_end ? load_b(bcol, gk) : 0.0;
    }
}
#endif

void stash() {
    [[unroll]] for (uint p = 0u; p < LA; ++p) {
        uint e = lid + p * WG, row = e / BK;
        As[st * BK + e % BK][row >> 2][row & 3u] = ra[p];
    }
    [[unroll]] for (uint p = 0u; p < LB; ++p) {
        uint e = lid + p * WG, col, kk;
        if (B_K_MAJOR == 1) { col = e / BK; kk = e % BK; } else { kk = e / BN; col = e % BN; }
        Bs[st * BK + kk][col >> 2][col & 3u] = rb[p];
    }
}

)";

// After the shared register-tile product (matmul_common.hpp): the kernel itself.
const char* const kTileMain = R"(
void main() {
    lid = gl_LocalInvocationID.x;
    uint tx = lid % TX, ty = lid / TX;
    m0 = gl_WorkGroupID.y * BM;
    n0 = gl_WorkGroupID.x * BN;
    uint split = enter_workgroup(), k_begin = split * KSPLIT;
#if B_K_MAJOR == 1
    [[unroll]] for (uint p = 0u; p < LB; ++p) bcols[p] = col_of(g, n0 + (lid + p * WG) / BK);
#else
    bcol = col_of(g, n0 + lid % BN);
#endif

    multiply_range(k_begin, k_end, tx, ty);
    [[unroll]] for (uint r = 0u; r < TM; ++r) {
        uint gm = m0 + (r >> 2) * TY * 4u + ty * 4u + (r & 3u);
        if (gm >= M) continue;
        [[unroll]] for (uint j = 0u; j < TN / 4u; ++j) [[unroll]] for (uint q = 0u; q < 4u; ++q) {
            uint gn = n0 + j * TX * 4u + tx * 4u + q;
            if (gn >= N) continue;
            uint i = c_at(g, gm, gn);
            c_put(split * OUT_ELEMS + i, c_value(i, acc[r][j][q]));
        }
    }
#if SUMS
    sum_pieces();
#endif
}
)";

// Where the kernel sums its own pieces (MatmulKernels::tile_counters): the last of a tile's pieces sums them all in
// piece order through the epilogue into `result`, as the split sum's dispatch would. After m0, n0 and g.
const char* const kPieceSum = R"(
// A tile's pieces are the grid's splits (K is the phase's, not always the largest), and it is counted per phase and group.
void sum_pieces() {
    uint splits = gl_NumWorkGroups.z / (GROUPS * PHASES), tile = gl_WorkGroupID.z % (GROUPS * PHASES);
    if (!last_piece((tile * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x, splits)) return;
    for (uint e = gl_LocalInvocationID.x; e < BM * BN; e += WG) {
        uint gm = m0 + e / BN, gn = n0 + e % BN;
        if (gm >= M || gn >= N) continue;
        uint i = c_at(g, gm, gn);
        float s = 0.0;
        for (uint q = 0u; q < splits; ++q) s += float(pieces.d[q * OUT_ELEMS + i]);
        result.d[i] = STORE(EPI(i, s));
    }
}
)";

// The cooperative-matrix variant (precision Fast; matmul_coop.cpp's core). Both operands are staged k
// inner, 8 consecutive k per thread, each element gathered on its own, converted to f16 and stored
// as one uvec4 (A's rows are contiguous along k; the forward's f16 weight is read 16 bytes at a time).
// B's k runs over pixels in the weight gradient, and its groups go to threads as the core orders
// them, sharing the 8 Rows of a thread's k with A. In the forward and the input gradient B's k runs
// over (channel, tap) and n over pixels: there a warp's lanes take 32 consecutive pixels at the same
// 8 k (B_ROW_OF), so that each gather of the warp reads neighbouring addresses, and a thread's 8 k
// are the same in all its groups, which share their index arithmetic. Eight consecutive pixels a
// thread, as before, read 32-byte strided runs across 8 cache lines per warp load; the change took
// ResNet-50's fast convolutions from 0.652 to 0.616 ms on the H200 (bench/results/2026-12-02-h200-session14.md).
// Where the channels summed over come in whole groups of 8, K is ordered in octets (conv_k_octets): a group
// is 8 channels at one tap, whose window position and bounds are computed once, not per element. On the
// H200 that took ResNet-50's fast forward convolutions from 0.473 to 0.386 ms and their input gradients from
// 1.334 to 0.972, the U-Net's forward from 0.209 to 0.153 (bench/results/2026-12-03-h200-session15.md).
// A thread's columns, and their Cols, are the same in every slice. C goes through the subgroups'
// staging areas to c_put.
const char* const kCoopStaging = R"(
#define A_K_INNER 1
#define B_K_INNER 1
const uint KC = BK / 8u;  // groups of 8 along a row's k (the core's A_G and B_G)
#if B_K_MAJOR == 0
#define B_ROW_OF(e) ((e) / (SG * KC) * SG + (e) % SG)
#define B_GROUP_OF(e) ((e) / SG % KC)
#endif
uint m0, n0, g, k_end, out_off;
)";

const char* const kCoopMain = R"(
Col bcols[GB];  // the column of each of the thread's groups
void fetch(uint k0) {
    uint kb = k0 + (lid % KC) * 8u;  // A's 8 k (and the weight gradient's B's)
#if B_K_MAJOR == 1
    Row r[8];
    [[unroll]] for (uint q = 0u; q < 8u; ++q) r[q] = row_of(kb + q);
#define AT(q) r[q]
#else
#define AT(q) (kb + q)
#endif
    [[unroll]] for (uint p = 0u; p < GA; ++p) {
        uint gm = m0 + (lid + p * WG) / KC;
#if A_RAW8
        // The forward's f16 weight, K a multiple of 8 (so is every piece of a split K): one 16-byte load
        // (in octets: the weight's copy is stored in that order, ConvSpec::weight_octets).
        ra[p] = gm < M && kb < k_end ? a8.d[((g * OG + gm) * K + kb) >> 3] : uvec4(0u);
#else
        float v[8];
#if K_OCTETS
        if (gm < M && kb < k_end) load_a8(g, gm, kb, v);
        else v = float[8](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
#else
        [[unroll]] for (uint q = 0u; q < 8u; ++q) v[q] = gm < M && kb + q < k_end ? load_a(g, gm, AT(q)) : 0.0;
#endif
        put_a(p, vec4(v[0], v[1], v[2], v[3]), vec4(v[4], v[5], v[6], v[7]));
#endif
    }
    [[unroll]] for (uint p = 0u; p < GB; ++p) {
        float v[8];
        uint e = lid + p * WG;
        bool in_n = n0 + B_ROW_OF(e) < N;
#if B_K_MAJOR == 1
        [[unroll]] for (uint q = 0u; q < 8u; ++q) v[q] = in_n && kb + q < k_end ? load_b(bcols[p], AT(q)) : 0.0;
#else
        uint bk = k0 + B_GROUP_OF(e) * 8u;
#if K_OCTETS
        if (in_n && bk < k_end) load_b8(bcols[p], bk, v);
        else v = float[8](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
#else
        [[unroll]] for (uint q = 0u; q < 8u; ++q) v[q] = in_n && bk + q < k_end ? load_b(bcols[p], bk + q) : 0.0;
#endif
#endif
        put_b(p, vec4(v[0], v[1], v[2], v[3]), vec4(v[4], v[5], v[6], v[7]));
    }
#undef AT
}

float element_value(uint m, uint n, float v) {
    uint gm = m0 + m, gn = n0 + n;
    return gm < M && gn < N ? c_value(c_at(g, gm, gn), v) : v;
}
void store_element(uint m, uint n, float v) {
    uint gm = m0 + m, gn = n0 + n;
    if (gm < M && gn < N) c_put(out_off + c_at(g, gm, gn), v);
}

#if QUAD_C
// Where QUAD_N: 4 columns at a time, stored as one vec4 (the cooperative kernels' outputs are f32).
layout(std430, set = 0, binding = 2) writeonly buffer B_out4 { vec4 d[]; } out4;
vec4 element_value4(uint m, uint n, vec4 v) {
    uint gm = m0 + m, gn = n0 + n;
    return gm < M && gn < N ? c_value4(c_at(g, gm, gn), v) : v;
}
void store_element4(uint m, uint n, vec4 v) {
    uint gm = m0 + m, gn = n0 + n;
    if (gm < M && gn < N) out4.d[(out_off + c_at(g, gm, gn)) >> 2] = v;
}
#endif

void main() {
    coop_start();
    m0 = gl_WorkGroupID.y * BM;
    n0 = gl_WorkGroupID.x * BN;
    uint split = enter_workgroup(), k_begin = split * KSPLIT;
    out_off = split * OUT_ELEMS;
    [[unroll]] for (uint p = 0u; p < GB; ++p) bcols[p] = col_of(g, n0 + B_ROW_OF(lid + p * WG));
    coop_product(k_begin, k_end);
#if QUAD_C
    if (QUAD_N) coop_store_quads(); else
#endif
    coop_store_elements();
#if SUMS
    sum_pieces();
#endif
}
)";

// A 1x1 convolution with stride 1, no padding and one group, as matmuls over images n (P = H * W):
//   forward      y[n]  = W[O, C] @ x[n][C, P]
//   grad input   gx[n] = W^T @ gy[n][O, P]
//   grad weight  gw    = sum_n gy[n][O, P] @ x[n]^T: a batched product into f32 partials
//                [split][n][O][C], all summed by the split-sum pass (so only f32 unless batch 1)
// The weight is the left operand each time: the product binds the node's inputs swapped.
std::optional<MatmulKernels> as_matmul(const ConvSpec& spec, const MatmulTuning& t) {
    const bool pointwise = conv_is_pointwise(spec.weight, spec.attrs);
    const int64_t batch = spec.x[0], c = spec.x[1], o = spec.weight[0], p = spec.x[2] * spec.x[3];
    if (!pointwise || (spec.mode == ConvMode::GradWeight && batch > 1 && spec.dtype != DType::F32)) return std::nullopt;
    MatmulSpec m{.dtype = spec.dtype, .batch = {batch}, .epilogue = spec.epilogue, .a_f16 = spec.weight_f16};
    switch (spec.mode) {
        case ConvMode::Forward:
            m.m = o, m.n = p, m.k = c, m.a_batch_strides = {0}, m.b_batch_strides = {c * p};
            break;
        case ConvMode::GradInput:
            m.m = c, m.n = p, m.k = o, m.trans_a = true, m.a_batch_strides = {0}, m.b_batch_strides = {o * p};
            break;
        case ConvMode::GradWeight:
            m.m = o, m.n = c, m.k = p, m.trans_b = true, m.a_batch_strides = {o * p}, m.b_batch_strides = {c * p};
            break;
    }
    const bool images_summed = spec.mode == ConvMode::GradWeight && batch > 1;  // by the split sum, with the pieces
    MatmulTuning tuning = t;
    tuning.pieces_summed_in_product = tuning.pieces_summed_in_product && !images_summed;
    MatmulKernels k = matmul_kernels(m, tuning);
    if (images_summed) {
        const int64_t splits = k.sum ? k.partial_elements / (batch * o * c) : 1;
        k.partial_elements = splits * batch * o * c;
        k.sum = matmul_detail::split_sum_kernel(spec.dtype, o * c, checked_u32(splits * batch, "conv2d partial count"),
                                                t.max_groups);
    }
    return k;
}

// The epilogue: where K is whole, the kernel's own stores' (C_EPI); where the kernel sums its own pieces (`summed`),
// the sum's, with the bindings cnt and result (C) and the epilogue's after the kernel's three (the output's a coherent
// view `pieces` then); else, K split, the split sum's.
std::string epilogue_of(KernelSource& k, const ConvSpec& spec, bool split, bool summed) {
    if (!summed) {
        return epilogue_glsl(split ? nullptr : spec.epilogue, k) +
               "#define SUMS 0\n#define C_EPI(i, v) EPI(i, v)\n#define C_EPI4(i, v) EPI4(i, v)\n";
    }
    k.iface.bindings[2].coherent = true;
    k.iface.bindings.push_back({"cnt", DType::I32, true});
    k.iface.bindings.push_back({"result", spec.dtype, true});
    return epilogue_glsl(spec.epilogue, k) + "layout(std430, set = 0, binding = 2) coherent readonly buffer B_pieces { " +
           storage_type(spec.dtype) + " d[]; } pieces;\n#define SUMS 1\n#define C_EPI(i, v) (v)\n#define C_EPI4(i, v) (v)\n";
}

}  // namespace

bool conv_k_octets(const ConvSpec& spec, const MatmulTuning& tuning) {
    const int64_t groups = spec.attrs[6];
    const int64_t summed = spec.mode == ConvMode::Forward ? spec.x[1] / groups : spec.weight[0] / groups;
    return tuning.coop_subgroup && spec.dtype == DType::F32 && spec.mode != ConvMode::GradWeight && summed % 8 == 0 &&
           !conv_is_pointwise(spec.weight, spec.attrs);
}

bool conv_weight_in_octets(const ConvSpec& spec, const MatmulTuning& tuning) {
    // One tap (a strided 1x1): octets are the weight's own order.
    return spec.weight_f16 && !tuning.coop_split && spec.weight[2] * spec.weight[3] > 1 && conv_k_octets(spec, tuning);
}

bool conv_is_pointwise(const Shape& weight, const std::vector<int64_t>& a) {
    return weight[2] == 1 && weight[3] == 1 && a[0] == 1 && a[1] == 1 && a[2] == 0 && a[3] == 0 && a[6] == 1;
}

ConvKernels conv2d_kernels(const ConvSpec& spec, const MatmulTuning& tuning) {
    if (auto k = as_matmul(spec, tuning)) {
        k->product.choice = "1x1, stride 1: as a matmul, " + k->product.choice;
        return {std::move(*k), true};
    }
    const Shape& x = spec.x;
    const Shape& w = spec.weight;
    const Shape& y = spec.y;
    const std::vector<int64_t>& a = spec.attrs;
    KernelSource k;
    const int64_t groups = a[6], cg = x[1] / groups, og = w[0] / groups, kk = w[2] * w[3];
    int64_t m = 0, n = 0, depth = 0, out_elems = 0, phases = 1;
    const char* mode = nullptr;
    switch (spec.mode) {
        case ConvMode::Forward:
            k.label = "conv2d";
            k.iface.bindings = {{"X", spec.dtype}, {"Wt", spec.weight_f16 ? DType::F16 : spec.dtype}, {"Y", spec.dtype, true}};
            m = og, n = x[0] * y[2] * y[3], depth = cg * kk, out_elems = numel(y), mode = kForward;
            break;
        case ConvMode::GradInput:
            k.label = "conv2d_grad_input";
            k.iface.bindings = {{"GY", spec.dtype}, {"Wt", spec.dtype}, {"GX", spec.dtype, true}};
            m = cg, n = x[0] * x[2] * x[3], depth = og * kk, out_elems = numel(x), mode = kGradInput;
            if ((a[0] > 1 || a[1] > 1) && a[4] == 1 && a[5] == 1) {  // the largest phase's GEMM (kGradInputByPhase)
                auto per_phase = [](int64_t extent, int64_t stride) { return (extent + stride - 1) / stride; };
                phases = a[0] * a[1], mode = kGradInputByPhase;
                n = x[0] * per_phase(x[2], a[0]) * per_phase(x[3], a[1]);
                depth = og * per_phase(w[2], a[0]) * per_phase(w[3], a[1]);
            }
            break;
        case ConvMode::GradWeight:
            k.label = "conv2d_grad_weight";
            k.iface.bindings = {{"X", spec.dtype}, {"GY", spec.dtype}, {"GW", spec.dtype, true}};
            m = og, n = cg * kk, depth = x[0] * y[2] * y[3], out_elems = numel(w), mode = kGradWeight;
            break;
    }
    checked_u32(numel(x), "conv2d input size");
    checked_u32(numel(y), "conv2d output size");
    checked_u32(x[0] * y[2] * y[3] * std::max(cg, og) * kk, "conv2d GEMM size");
    // The tile and K pieces the matmul family would pick for this GEMM, one batch entry per group.
    const MatmulSpec gemm{.dtype = spec.dtype, .m = m, .n = n, .k = depth, .batch = {groups * phases}};
    k.iface.spec_constants = {"BATCH", "C", "H", "W", "O", "KH", "KW", "OH", "OW",
                              "SH", "SW", "PH", "PW", "DH", "DW", "GROUPS", "KSPLIT"};
    for (int64_t v : {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], a[0], a[1], a[2], a[3], a[4], a[5], a[6]}) {
        k.spec_values.push_back(checked_u32(v, "conv2d size"));
    }
    const char* read_x = spec.mode == ConvMode::GradInput ? "" : kReadX;  // grad input has no X binding
    const bool octets = conv_k_octets(spec, tuning), octet_weight = conv_weight_in_octets(spec, tuning);
    if (spec.weight_octets && !octet_weight) {
        throw Error("conv2d: a weight stored in octets is for the cooperative kernel's f16 weight of taps only");
    }
    const std::string head = std::string("#define STORE ") + storage_type(spec.dtype) + "\n#define K_OCTETS " +
                             (octets ? "1" : "0") + "\n" + kDims + read_x + (phases > 1 ? "" : kOnePhase) + mode;
    uint32_t bm, bn, k_split;
    bool summed;  // the kernel sums its own pieces
    if (tuning.coop_subgroup && spec.dtype == DType::F32) {
        std::string why;
        const matmul_detail::CoopGeometry t =
            matmul_detail::choose_coop_geometry(gemm, tuning, matmul_detail::CoopProduct::ImplicitGemm, &why);
        k.choice = "cooperative implicit GEMM " + why;
        matmul_detail::check_coop_geometry(t, tuning.coop_subgroup);
        // A warp's lanes take consecutive columns of B (kCoopStaging's B_ROW_OF).
        if (t.bn % tuning.coop_subgroup) throw Error("conv2d tiles must divide evenly");
        bm = t.bm, bn = t.bn;
        k_split = matmul_detail::choose_k_split(gemm, tuning, matmul_detail::workgroups(gemm, bm, bn), t.bk, t.resident);
        k.spec_values.push_back(k_split);  // KSPLIT, before the epilogue's constants
        k.label += matmul_detail::coop_label_suffix(tuning);
        k.iface.local_size = t.subgroups() * tuning.coop_subgroup;
        k.required_subgroup_size = tuning.coop_subgroup;
        summed = k_split < depth && matmul_detail::coop_pieces_sum_fits(t, tuning);
        const std::string epilogue = epilogue_of(k, spec, k_split < depth, summed);
        // An f16 weight whose rows are whole groups of 8 is fetched 8 halves at a time and staged as it is (read
        // one half at a time it made ResNet-50's convolutions 25% slower on the H200 than f32 weights).
        const bool raw8 = spec.weight_f16 && depth % 8 == 0 && !tuning.coop_split && (!octet_weight || spec.weight_octets);
        const std::string quads = std::string("#define QUAD_C ") + (summed ? "0\n" : "1\n");
        const std::string fetch_a = raw8 ? "#define A_RAW8 1\n#define B_RAW8 0\n"
                                           "layout(std430, set = 0, binding = 1) readonly buffer B_a8 { uvec4 d[]; } a8;\n"
                                         : "";
        // last_piece's flag before the cooperative code (the top of matmul_coop.cpp says why).
        k.glsl = matmul_detail::preamble(k.iface, matmul_detail::kCoopExtensions) +
                 matmul_detail::coop_defines(t, tuning) + quads + fetch_a + epilogue + head + kCoopStaging + (summed ? kLastPieceGlsl : "") +
                 matmul_detail::kCoopTypesGlsl + matmul_detail::kCoopProductGlsl + (summed ? kPieceSum : "") + kWorkgroupZ + kCoopMain;
    } else {
        std::string why;
        const matmul_detail::TiledGeometry t = matmul_detail::choose_tiled_geometry(gemm, tuning, &why);
        k.choice = std::string("tiled f32 implicit GEMM (cooperative declined: ") +
                   matmul_detail::no_coop_reason(gemm, tuning) + ") " + why;
        bm = t.bm, bn = t.bn;
        k_split = matmul_detail::choose_k_split(gemm, tuning, matmul_detail::workgroups(gemm, bm, bn), t.bk, t.resident);
        k.spec_values.push_back(k_split);
        k.iface.local_size = t.threads();
        const uint32_t wg = k.iface.local_size;
        if (t.bm % t.tm || t.bn % t.tn || t.tm % 4 || t.tn % 4 || (t.bm * t.bk) % wg || (t.bn * t.bk) % wg ||
            wg % t.bn || wg % t.bk) {
            throw Error("conv2d tiles must divide evenly");
        }
        summed = k_split < depth && tuning.pieces_summed_in_product;
        const std::string epilogue = epilogue_of(k, spec, k_split < depth, summed);
        k.glsl = matmul_detail::preamble(k.iface, "") + matmul_detail::tiled_defines(t) + epilogue + head +
                 matmul_detail::kTiledSharedGlsl + kTileLoop + matmul_detail::kRegisterTileProductGlsl +
                 (summed ? std::string(kLastPieceGlsl) + kPieceSum : "") + kWorkgroupZ + kTileMain;
    }
    const int64_t splits = (depth + k_split - 1) / k_split;
    if (splits > 1) {
        k.choice += "; K split in pieces of " + std::to_string(k_split) +
                    matmul_detail::pieces_sum_words(tuning, summed, "the tile leaves no shared memory for last_piece's flag");
    }
    if (phases > 1) k.choice += "; by " + std::to_string(a[0]) + "x" + std::to_string(a[1]) + " stride phases";
    k.choice += "; " + matmul_detail::gemm_size(gemm);
    const int64_t gx = (n + bn - 1) / bn, gy = (m + bm - 1) / bm, gz = groups * phases * splits;
    if (gx > tuning.max_groups || gy > tuning.max_groups || gz > tuning.max_groups) {
        throw Error("conv2d grid " + std::to_string(gx) + "x" + std::to_string(gy) + "x" + std::to_string(gz) +
                    " exceeds the device's workgroup limit");
    }
    k.groups = {static_cast<uint32_t>(gx), static_cast<uint32_t>(gy), static_cast<uint32_t>(gz)};
    ConvKernels out{.operands_swapped = false};
    out.kernels.product = std::move(k);
    if (splits > 1) {
        out.kernels.partial_elements = splits * out_elems;
        checked_u32(out.kernels.partial_elements, "conv2d split-K partial outputs");
        if (summed) {
            out.kernels.tile_counters = gx * gy * groups * phases;
        } else {
            out.kernels.sum = matmul_detail::split_sum_kernel(spec.dtype, out_elems, static_cast<uint32_t>(splits),
                                                              tuning.max_groups, spec.epilogue);
        }
    }
    return out;
}

}  // namespace mn::codegen
