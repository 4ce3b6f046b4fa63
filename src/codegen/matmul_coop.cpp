// The cooperative-matrix product (precision Fast): f16 operands, f32 accumulation, through
// GL_NV_cooperative_matrix at 16x16x16 (its SPIR-V rewritten to SPV_KHR_cooperative_matrix where the KHR
// path is chosen: spirv_khr.hpp). A workgroup computes a BM x BN tile of C; each subgroup a
// WM x WN piece of it as (WM/16) x (WN/16) accumulators. K is staged BK deep as f16 in shared
// memory, in STAGES buffers: with two, the slice after next is stashed while this one is
// multiplied, so each slice costs one barrier, not two.
//
// Shared memory holds 8 halves per uvec4, so that a thread converts 8 consecutive f32 elements and
// stores them with one 16-byte store (glslang 12's coopMatLoadNV reads f16 matrices from a uvec4
// array, offsets and strides in uvec4s). Each operand's slice is kept in one of two orders: k inner
// (rows of BM or BN, K_INNER 1) or k outer (rows of BK); every row is padded by one uvec4 so that
// the odd 16-byte stride spreads the fragment loads over the banks.
//
// The core (kCoopProductGlsl) is shared with the convolution family: the includer defines what a
// thread fetches into registers (fetch; the core stashes it) and where C goes. The
// matmul's fetch reads the operands 4 contiguous f32 at a time (16-byte loads where the row length
// allows; zero outside the matrix, so edge tiles multiply zeros) in their memory order.
// Tiles wholly inside C with no epilogue are stored straight from the accumulators; the others go through a
// per-subgroup 16x16 staging area and threads store only in-bounds elements, 4 columns at a time where N is a
// multiple of 4 (QUAD_C: an epilogue reads its operands 16 bytes at a time and the tile is stored in 16-byte stores:
// ResNet-50's fast inference 0.97 -> 0.87 ms on the H100, its 1x1 products adding the shortcut; Whisper-tiny's 0.89
// -> 0.86, bench/results/2026-12-07-session45-h100.md).
//
// SPLIT (MatmulTuning::coop_split: forward products before a ReLU or max pool, sched::Tuning::split_forward)
// stages each operand as two f16 parts and multiplies three products of them, for about f32's precision
// on the tensor cores.
//
// Shared variables that only scalar code touches are declared before the cooperative code (last_piece's
// flag, where the kernel sums its own split-K pieces): on NVIDIA's driver (580, H100) the flag declared
// after Cs moved Cs's scalar reads one float along, so every element of a tile stored element by element
// came back as its right neighbour's sum; declared first, the kernel's sums were the sum dispatch's bit
// for bit (bench/results/2026-12-06-session42-h100.md). tests/coop_shared_order_test.cpp checks every
// cooperative kernel's SPIR-V for that order.
#include <algorithm>

#include "codegen/matmul_common.hpp"

namespace mn::codegen::matmul_detail {

const char* const kCoopExtensions =
    "#extension GL_NV_cooperative_matrix : require\n"
    "#extension GL_KHR_memory_scope_semantics : require\n"
    "#extension GL_KHR_shader_subgroup_basic : require\n"
    "#extension GL_KHR_shader_subgroup_arithmetic : require\n"
    "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n";

const char* const kCoopTypesGlsl = R"(
#define F16MAT fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define F32MAT fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

// 8 elements as f16, times s (a power of two: exact, unless f16 underflows or overflows).
uvec4 pack8(vec4 lo, vec4 hi, float s) {
    lo *= s;
    hi *= s;
    return uvec4(packFloat2x16(f16vec2(lo.xy)), packFloat2x16(f16vec2(lo.zw)), packFloat2x16(f16vec2(hi.xy)),
                 packFloat2x16(f16vec2(hi.zw)));
}

// The exponent of the power of two that takes a largest magnitude (its float's bits, positive) into
// [2^13, 2^14), where f16 keeps its full precision down to 2^-27 of it: 126 for zero (no limit: a running
// scale only ever shrinks). From the bits alone: a scaled product takes it for every slice.
int scale_exponent(uint bits) {
    if (bits == 0u || bits > 0x7f800000u) return 126;  // all zero (or NaN, which stays NaN): no limit
    if (bits == 0x7f800000u) return 0;                  // infinite
    return clamp(140 - int(bits >> 23), -126, 126);     // 13 - the unbiased exponent
}
float scale_for(uint bits) { return exp2(float(scale_exponent(bits))); }
// SPLIT: 8 elements times s as two f16 parts, hi (returned) each with its mantissa cut to f16's 10 bits
// and lo the f16 nearest what hi leaves: hi + lo keeps about 21 significant bits where the scale keeps
// hi in f16's normal range and lo above its subnormals (within 2^-17 of the slice's largest
// magnitude). hi is cut by its bits, not as x - f16(x): a compiler may take that round trip as exact.
vec4 f16_mantissa(vec4 x) { return uintBitsToFloat(floatBitsToUint(x) & 0xFFFFE000u); }
uvec4 split8(vec4 x0, vec4 x1, float s, out uvec4 lo) {
    x0 *= s;
    x1 *= s;
    vec4 h0 = f16_mantissa(x0), h1 = f16_mantissa(x1);
    f16vec4 l0 = f16vec4(x0 - h0), l1 = f16vec4(x1 - h1);
    lo = uvec4(packFloat2x16(l0.xy), packFloat2x16(l0.zw), packFloat2x16(l1.xy), packFloat2x16(l1.zw));
    return uvec4(packFloat2x16(f16vec2(h0.xy)), packFloat2x16(f16vec2(h0.zw)), packFloat2x16(f16vec2(h1.xy)),
                 packFloat2x16(f16vec2(h1.zw)));
}
float max_abs(vec4 a, vec4 b) {
    vec4 m = max(abs(a), abs(b));
    return max(max(m.x, m.y), max(m.z, m.w));
}
)";

const char* const kCoopProductGlsl = R"(
const uint WARPS_N = BN / WN;
const uint FM = WM / 16u, FN = WN / 16u;
#if A_K_INNER
const uint A_ROWS = BM, A_S4 = BK / 8u + 1u;
#else
const uint A_ROWS = BK, A_S4 = BM / 8u + 1u;
#endif
#if B_K_INNER
const uint B_ROWS = BN, B_S4 = BK / 8u + 1u;
#else
const uint B_ROWS = BK, B_S4 = BN / 8u + 1u;
#endif
// A slice is staged in groups of 8 consecutive elements along a shared row, A_G (B_G) to a row; a
// thread stages GA (GB) groups of each, group e = lid + p * WG at row e / A_G, position e % A_G. An
// includer may order B's groups otherwise (B_ROW_OF(e), B_GROUP_OF(e): the convolutions give a warp's
// lanes consecutive rows).
const uint A_G = A_S4 - 1u, B_G = B_S4 - 1u;
const uint GA = A_ROWS * A_G / WG, GB = B_ROWS * B_G / WG;
#ifndef B_ROW_OF
#define B_ROW_OF(e) ((e) / B_G)
#define B_GROUP_OF(e) ((e) % B_G)
#endif
void fetch(uint k0);  // the includer's: each of the thread's groups into ra[p] and rb[p] (see below)
// C's element (m, n) of the tile with the epilogue applied (v where it is outside C), and its store
// (none outside C).
float element_value(uint m, uint n, float v);
void store_element(uint m, uint n, float v);
#if QUAD_C  // the same for 4 columns from n (the includer's QUAD_C: N a multiple of 4)
vec4 element_value4(uint m, uint n, vec4 v);
void store_element4(uint m, uint n, vec4 v);
#endif
#if SPLIT
// f16 rounds an operand to 11 significant bits, and in a training program's forward that moves
// enough ReLU and max-pool decisions to change ResNet-50's gradients by ~8% (relative L2; 16 bits:
// 2%, 22 bits: 0.08%; scripts/resnet50_fast_gate_emulation.py). So each operand is staged as hi and
// lo (split8), lo after all stages of hi, and the product is lo*hi + hi*lo + hi*hi: lo*lo is below
// f32's rounding of the sum. It needs the scales (SCALED) to keep hi and lo in f16's range.
const uint PARTS = 2u;
#else
const uint PARTS = 1u;
#endif
const uint A_LO = STAGES * A_ROWS * A_S4, B_LO = STAGES * B_ROWS * B_S4;  // where the lo parts begin
shared uvec4 As[PARTS * A_LO];
shared uvec4 Bs[PARTS * B_LO];
shared float Cs[WG / SG * 256u];
F32MAT acc[FM][FN];
uint lid, warp, lane, wm, wn;

#ifndef A_RAW8
#define A_RAW8 0
#define B_RAW8 0
#endif
// What fetch() loaded, group p's 8 elements. An f32 operand stays f32 (two vec4s) until stash()
// converts it: its loads are then still in flight while the current slice is multiplied, which
// converting them in fetch() would first wait for (ResNet-50's and Whisper's matmuls took 15-20%
// longer that way on the H200). An f16 operand read as it is (A_RAW8, B_RAW8) is one uvec4.
#define F32_GROUPS(r, groups, put) \
    vec4 r[groups][2]; \
    void put(uint p, vec4 lo, vec4 hi) { r[p][0] = lo; r[p][1] = hi; }
#if A_RAW8
uvec4 ra[GA];
#else
F32_GROUPS(ra, GA, put_a)
#endif
#if B_RAW8
uvec4 rb[GB];
#else
F32_GROUPS(rb, GB, put_b)
#endif

#if SCALED
// Gradients are often far below f16's normal range (2^-14), where f16 keeps few bits or none. So
// each operand's slice is staged times a power of two that takes its largest magnitude in this
// workgroup's tile into [2^13, 2^14), and the accumulators are kept in units of the two scales. The
// scales never grow from one slice to the next: the accumulators are rescaled (exactly, by a power
// of two) only downwards, so they cannot overflow, and every value within 2^-27 of the largest seen
// so far keeps f16's full precision. A slice's largest magnitudes are found in the registers that
// fetched it and meet in shared memory at the barrier the slice waits for anyway, so scaling costs
// no second read of the operands (the 2-stage loop takes one barrier more per slice). It still costs:
// ResNet-50's split forward products took 0.27 ms less GPU time unscaled on the H200 (fast training
// 5.1 -> 4.8 ms; an unsafe measurement). Reusing the first slice's scales for every slice, with a second
// pass where a slice did not fit, gained 0.1-0.2 ms and gave NaN in the convolution kernels' second pass
// (`0e13094`, reverted; bench/results/2026-12-04-h200-session24.md).
// The scales as exponents (a_scale = 2^a_exp), which a slice changes only where its maxima are larger
// than the scale allows: the per-slice work is integer arithmetic, one subgroup reduction and two shared
// atomics. (Computed as floats, with a division and frexp per operand and slice, scaling took ~30% of
// these products' time on the H200: ResNet-50's fast training 7.08 ms of GPU time unscaled, 7.97 scaled;
// as exponents, 7.59: bench/results/2026-12-03-h200-session15.md, calls 5 and 6.)
int a_exp = 127, b_exp = 127;  // no slice yet: above any scale_exponent
float a_scale = exp2(127.0), b_scale = exp2(127.0);
shared uint amax[4];  // [slot * 2 + operand]: a slice's largest magnitudes, as bits (positive floats order as their bits do)
// The largest magnitudes of the slice fetch() loaded, into amax's slot (zero since its last reading).
void note_slice_max(uint slot) {
    float ma = 0.0, mb = 0.0;
    [[unroll]] for (uint p = 0u; p < GA; ++p) ma = max(ma, max_abs(ra[p][0], ra[p][1]));
    [[unroll]] for (uint p = 0u; p < GB; ++p) mb = max(mb, max_abs(rb[p][0], rb[p][1]));
    uvec2 m = subgroupMax(uvec2(floatBitsToUint(ma), floatBitsToUint(mb)));
    if (lane == 0u) {
        atomicMax(amax[slot * 2u], m.x);
        atomicMax(amax[slot * 2u + 1u], m.y);
    }
}
// After the barrier that completes slot's maxima: the scales of that slice, the accumulators
// rescaled to them (workgroup-uniform), and the slot cleared for the slice after next.
void take_scales(uint slot) {
    int na = min(a_exp, scale_exponent(amax[slot * 2u])), nb = min(b_exp, scale_exponent(amax[slot * 2u + 1u]));
    if (na != a_exp || nb != b_exp) {
        float r = exp2(float(na - a_exp + nb - b_exp));
        [[unroll]] for (uint i = 0u; i < FM; ++i)
            [[unroll]] for (uint j = 0u; j < FN; ++j) acc[i][j] = acc[i][j] * r;
        a_exp = na;
        b_exp = nb;
        a_scale = exp2(float(na));
        b_scale = exp2(float(nb));
    }
}
#else
const float a_scale = 1.0, b_scale = 1.0;
#endif

#if A_RAW8
uvec4 staged_a(uint p) { return ra[p]; }
#elif SPLIT
uvec4 staged_a(uint p, out uvec4 lo) { return split8(ra[p][0], ra[p][1], a_scale, lo); }
#else
uvec4 staged_a(uint p) { return pack8(ra[p][0], ra[p][1], a_scale); }
#endif
#if B_RAW8
uvec4 staged_b(uint p) { return rb[p]; }
#elif SPLIT
uvec4 staged_b(uint p, out uvec4 lo) { return split8(rb[p][0], rb[p][1], b_scale, lo); }
#else
uvec4 staged_b(uint p) { return pack8(rb[p][0], rb[p][1], b_scale); }
#endif

void coop_start() {
    lid = gl_LocalInvocationID.x;
    warp = lid / SG;
    lane = lid % SG;
    wm = (warp / WARPS_N) * WM;
    wn = (warp % WARPS_N) * WN;
}

// Group p of this thread's slice into uvec4 `at` of the operand's shared array X (staged by `staged`),
// and with SPLIT its lo part LO further.
#if SPLIT
#define STASH_GROUP(X, at, staged, p, LO) { uvec4 lo; X[at] = staged(p, lo); X[(LO) + (at)] = lo; }
#else
#define STASH_GROUP(X, at, staged, p, LO) X[at] = staged(p);
#endif
void stash(uint s) {
    [[unroll]] for (uint p = 0u; p < GA; ++p) {
        uint e = lid + p * WG, at = (s * A_ROWS + e / A_G) * A_S4 + e % A_G;
        STASH_GROUP(As, at, staged_a, p, A_LO)
    }
    [[unroll]] for (uint p = 0u; p < GB; ++p) {
        uint e = lid + p * WG, at = (s * B_ROWS + B_ROW_OF(e)) * B_S4 + B_GROUP_OF(e);
        STASH_GROUP(Bs, at, staged_b, p, B_LO)
    }
}

// Fragment i of A's (j of B's) 16-deep slice kk of the part that begins at a0 (b0).
#if A_K_INNER
#define LOAD_A(f, a0, kk, i) coopMatLoadNV(f, As, (a0) + (wm + (i) * 16u) * A_S4 + (kk) / 8u, A_S4, false)
#else
#define LOAD_A(f, a0, kk, i) coopMatLoadNV(f, As, (a0) + (kk) * A_S4 + (wm + (i) * 16u) / 8u, A_S4, true)
#endif
#if B_K_INNER
#define LOAD_B(f, b0, kk, j) coopMatLoadNV(f, Bs, (b0) + (wn + (j) * 16u) * B_S4 + (kk) / 8u, B_S4, true)
#else
#define LOAD_B(f, b0, kk, j) coopMatLoadNV(f, Bs, (b0) + (kk) * B_S4 + (wn + (j) * 16u) / 8u, B_S4, false)
#endif

void multiply_stage(uint s) {
    uint a0 = s * A_ROWS * A_S4, b0 = s * B_ROWS * B_S4;
    [[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
        F16MAT fa[FM], fb[FN];
        [[unroll]] for (uint i = 0u; i < FM; ++i) LOAD_A(fa[i], a0, kk, i);
        [[unroll]] for (uint j = 0u; j < FN; ++j) LOAD_B(fb[j], b0, kk, j);
#if SPLIT
        {
            F16MAT la[FM], lb[FN];
            [[unroll]] for (uint i = 0u; i < FM; ++i) LOAD_A(la[i], A_LO + a0, kk, i);
            [[unroll]] for (uint j = 0u; j < FN; ++j) LOAD_B(lb[j], B_LO + b0, kk, j);
            [[unroll]] for (uint i = 0u; i < FM; ++i)
                [[unroll]] for (uint j = 0u; j < FN; ++j)
                    acc[i][j] = coopMatMulAddNV(fa[i], lb[j], coopMatMulAddNV(la[i], fb[j], acc[i][j]));
        }
#endif
        [[unroll]] for (uint i = 0u; i < FM; ++i)
            [[unroll]] for (uint j = 0u; j < FN; ++j) acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);
    }
}

// acc = the product over k in [k_begin, k_end), which the includer's fetch(k0) (global memory to
// registers) and stash(s) (registers to stage s of As / Bs) stage BK at a time.
void coop_product(uint k_begin, uint k_end) {
    [[unroll]] for (uint i = 0u; i < FM; ++i)
        [[unroll]] for (uint j = 0u; j < FN; ++j) acc[i][j] = F32MAT(0.0);
    fetch(k_begin);
#if SCALED
    if (lid == 0u) amax[0] = amax[1] = amax[2] = amax[3] = 0u;
    barrier();
    note_slice_max(0u);
    barrier();
    take_scales(0u);
#endif
    stash(0u);
    barrier();
    uint s = 0u, slot = 0u;  // the stage the slice is in; SCALED: the amax slot of its maxima
    for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
        bool more = k0 + BK < k_end;
        if (more) {
            fetch(k0 + BK);
#if SCALED
            note_slice_max(slot ^ 1u);
#endif
        }
        multiply_stage(s);
#if STAGES == 2 && !SCALED
        // Stage s ^ 1 was last read before the previous barrier.
        if (more) stash(s ^ 1u);
        barrier();
        s ^= 1u;
#else
        barrier();
        if (more) {
#if SCALED
            // Slot's maxima were all read before the barrier this slice waited for.
            if (lid == 0u) amax[slot * 2u] = amax[slot * 2u + 1u] = 0u;
            slot ^= 1u;
            take_scales(slot);
#endif
            stash(0u);
            barrier();
        }
#endif
    }
#if SCALED
    // Two steps: the product of the two unscales can leave f32's range where each one does not.
    float ua = exp2(float(-a_exp)), ub = exp2(float(-b_exp));
    [[unroll]] for (uint i = 0u; i < FM; ++i)
        [[unroll]] for (uint j = 0u; j < FN; ++j) acc[i][j] = (acc[i][j] * ua) * ub;
#endif
}

// Stores every element of this subgroup's accumulators through its 16x16 staging area (for stores
// that are not a plain row-major tile, or would pass C's edge), W columns at a time as a T (float, or
// vec4 where the includer's QUAD_C says N is a multiple of 4: 16-byte loads of what an epilogue reads,
// and 16-byte stores): all of them to registers (LOAD from the staging area), then the epilogue of each
// (VALUE: element_value, element_value4), then the stores (STORE: store_element, store_element4). A
// store may alias what an epilogue reads, as far as the compiler knows, so one element at a time each
// epilogue's loads wait for the store before them. (On the H200 this took SmolLM2's fast training from
// 8.39 to 8.05 ms; by quads, ResNet-50's fast inference 0.97 -> 0.87 ms on the H100, session 45.)
#define STORE_THROUGH_STAGING(W, T, LOAD, VALUE, STORE) \
    const uint PER = 256u / (W * SG);  /* W-column groups a lane holds of each accumulator */ \
    T v[FM][FN][PER]; \
    [[unroll]] for (uint i = 0u; i < FM; ++i) { \
        [[unroll]] for (uint j = 0u; j < FN; ++j) { \
            coopMatStoreNV(acc[i][j], Cs, warp * 256u, 16u, false); \
            subgroupMemoryBarrierShared(); \
            subgroupBarrier(); \
            [[unroll]] for (uint r = 0u; r < PER; ++r) v[i][j][r] = LOAD(warp * 256u + (lane + r * SG) * W); \
            subgroupBarrier(); \
        } \
    } \
    [[unroll]] for (uint pass = 0u; pass < 2u; ++pass) \
        [[unroll]] for (uint i = 0u; i < FM; ++i) \
            [[unroll]] for (uint j = 0u; j < FN; ++j) \
                [[unroll]] for (uint r = 0u; r < PER; ++r) { \
                    uint e = lane + r * SG, m = wm + i * 16u + e / (16u / W), n = wn + j * 16u + e % (16u / W) * W; \
                    if (pass == 0u) v[i][j][r] = VALUE(m, n, v[i][j][r]); else STORE(m, n, v[i][j][r]); \
                }
float staged(uint at) { return Cs[at]; }
void coop_store_elements() { STORE_THROUGH_STAGING(1u, float, staged, element_value, store_element) }
#if QUAD_C
vec4 staged4(uint at) { return vec4(Cs[at], Cs[at + 1u], Cs[at + 2u], Cs[at + 3u]); }
void coop_store_quads() { STORE_THROUGH_STAGING(4u, vec4, staged4, element_value4, store_element4) }
#endif
)";

namespace {

// The matmul's staging: 8 consecutive elements of an operand's memory order per group, read as two
// 4-element loads (matmul_common.hpp's loaders).
const char* const kMatmulStaging = R"(
#if TRANS_A
#define A_K_INNER 0
#else
#define A_K_INNER 1
#endif
#if TRANS_B
#define B_K_INNER 1
#else
#define B_K_INNER 0
#endif
uint m0, n0, a_off, b_off;
#if A_RAW8 || B_RAW8
// f16 operands whose rows are whole groups of 8: a group is one 16-byte load, staged as it is.
layout(std430, set = 0, binding = 0) readonly buffer B_a8 { uvec4 d[]; } a8;
layout(std430, set = 0, binding = 1) readonly buffer B_b8 { uvec4 d[]; } b8;
#endif
#if PAIR
#define B8(j) (second_b ? b28.d[j] : b8.d[j])
#else
#define B8(j) b8.d[j]
#endif
#if PAIR_A
#define A8(j) (second_b ? a28.d[j] : a8.d[j])
#else
#define A8(j) a8.d[j]
#endif
)";

const char* const kMatmulMain = R"(
void fetch(uint k0) {
    [[unroll]] for (uint p = 0u; p < GA; ++p) {
        uint g = lid + p * WG, o = g / A_G, i = (g % A_G) * 8u;
#if A_RAW8
        uint ao = TRANS_A != 0 ? k0 + o : m0 + o, ai = TRANS_A != 0 ? m0 + i : k0 + i;
        ra[p] = ao < A_OUTER && ai < A_INNER ? A8((a_off + ao * A_INNER + ai) >> 3) : uvec4(0u);
#elif TRANS_A
        put_a(p, load_a(a_off, k0 + o, m0 + i), load_a(a_off, k0 + o, m0 + i + 4u));
#else
        put_a(p, load_a(a_off, m0 + o, k0 + i), load_a(a_off, m0 + o, k0 + i + 4u));
#endif
    }
    [[unroll]] for (uint p = 0u; p < GB; ++p) {
        uint g = lid + p * WG, o = B_ROW_OF(g), i = B_GROUP_OF(g) * 8u;
#if B_RAW8
        uint bo = TRANS_B != 0 ? n0 + o : k0 + o, bi = TRANS_B != 0 ? k0 + i : n0 + i;
        rb[p] = bo < B_OUTER && bi < B_INNER ? B8((b_off + bo * B_INNER + bi) >> 3) : uvec4(0u);
#elif TRANS_B
        put_b(p, load_b(b_off, n0 + o, k0 + i), load_b(b_off, n0 + o, k0 + i + 4u));
#else
        put_b(p, load_b(b_off, k0 + o, n0 + i), load_b(b_off, k0 + o, n0 + i + 4u));
#endif
    }
}

uint c_off;  // split-K: partial products [pair][split][batch][M][N]
// The core's element_value and store_element (T float), or its 4-column ones (T vec4).
#define TILE_ELEMENT(T, VALUE, STORE, EPI, PUT) \
    T VALUE(uint m, uint n, T v) { \
        uint gm = m0 + m, gn = n0 + n; \
        return gm < M && gn < N ? EPI(c_off + gm * N + gn, v) : v; \
    } \
    void STORE(uint m, uint n, T v) { \
        uint gm = m0 + m, gn = n0 + n; \
        if (gm < M && gn < N) PUT(c_off + gm * N + gn, v); \
    }
TILE_ELEMENT(float, element_value, store_element, C_EPI, store_c)
#if QUAD_C
TILE_ELEMENT(vec4, element_value4, store_element4, C_EPI4, store_c4)
#define COOP_STORE coop_store_quads
#else
#define COOP_STORE coop_store_elements
#endif

void main() {
    coop_start();
    m0 = gl_WorkGroupID.y * BM;
    n0 = gl_WorkGroupID.x * BN;
    uint k_begin, k_end;
    split_range(k_begin, k_end, a_off, b_off);
    coop_product(k_begin, k_end);
    c_off = gl_WorkGroupID.z * M * N;
#if VEC_C
    if (m0 + BM <= M && n0 + BN <= N) {  // wholly inside, rows 16-byte aligned: store directly
        [[unroll]] for (uint i = 0u; i < FM; ++i)
            [[unroll]] for (uint j = 0u; j < FN; ++j)
                coopMatStoreNV(C_MAT(acc[i][j]), c.d, c_off + (m0 + wm + i * 16u) * N + n0 + wn + j * 16u, N, false);
    } else
#endif
        COOP_STORE();
#if SUMS
    sum_pieces();
#endif
}
)";

}  // namespace

uint32_t coop_shared_bytes(const CoopGeometry& g, const MatmulTuning& tuning) {
    const bool split = tuning.coop_split, scaled = split || tuning.coop_scaled;  // scaled: amax, 4 uints
    // Each operand's slice, in either order, padded by one uvec4 (16 bytes) per row.
    auto slice = [&](uint32_t rows) {
        return std::max(rows * (g.bk / 8 + 1), g.bk * (rows / 8 + 1)) * 16;
    };
    return (split ? 2 : 1) * g.stages * (slice(g.bm) + slice(g.bn)) + 4 * 256 * g.subgroups() + (scaled ? 16 : 0);
}

bool coop_pieces_sum_fits(const CoopGeometry& g, const MatmulTuning& tuning) {
    return tuning.pieces_summed_in_product && coop_shared_bytes(g, tuning) + 4 <= tuning.max_shared_memory;
}

const char* coop_label_suffix(const MatmulTuning& tuning) {
    return tuning.coop_split ? "_coop_split" : tuning.coop_scaled ? "_coop_scaled" : "_coop";
}

std::string coop_defines(const CoopGeometry& t, const MatmulTuning& tuning) {
    return define("BM", t.bm) + define("BN", t.bn) + define("BK", t.bk) + define("WM", t.wm) + define("WN", t.wn) +
           define("SG", tuning.coop_subgroup) + "#define STAGES " + std::to_string(t.stages) + "\n#define SCALED " +
           (tuning.coop_scaled || tuning.coop_split ? "1" : "0") + "\n#define SPLIT " + (tuning.coop_split ? "1" : "0") +
           "\n";
}

bool coop_geometry_divides(const CoopGeometry& t, uint32_t subgroup_size) {
    const uint32_t wg = t.subgroups() * subgroup_size;
    return !(t.bm % t.wm || t.bn % t.wn || t.wm % 16 || t.wn % 16 || t.bk % 16 || (t.stages != 1 && t.stages != 2) ||
             (t.bm * t.bk / 8) % wg || (t.bn * t.bk / 8) % wg);
}

void check_coop_geometry(const CoopGeometry& t, uint32_t subgroup_size) {
    if (!coop_geometry_divides(t, subgroup_size)) throw Error("cooperative matmul tiles must divide evenly");
}

KernelSource coop_kernel(const MatmulSpec& spec, const CoopGeometry& t, const MatmulTuning& tuning, uint32_t split_k,
                         const MatmulSpec* summed) {
    check_coop_geometry(t, tuning.coop_subgroup);
    if (tuning.coop_split && (operand_dtype(spec, 'a') != DType::F32 || operand_dtype(spec, 'b') != DType::F32)) {
        throw Error("matmul: a split cooperative product needs f32 operands");  // MatmulTuning::coop_split's callers
    }
    KernelSource k = base_kernel(spec, t.subgroups() * tuning.coop_subgroup,
                                 std::string("matmul") + coop_label_suffix(tuning), split_k);
    k.required_subgroup_size = tuning.coop_subgroup;
    const bool partial = split_k < spec.k;  // a split sum, or the last piece (summed), stores the output
    const std::string store = product_store_glsl(k, spec, split_k, summed);
    const bool pair = summed && summed->b2;
    // VEC_C stores whole accumulators straight to memory (rows of whole 16 bytes): an epilogue or column
    // parts go element by element.
    // An f16 operand (of an f16 product, or an f32 product's f16 weight) whose rows (and batch entries) are
    // whole groups of 8 halves is fetched and staged as it is (the scaled kernels scale f32 operands:
    // gradients are f32).
    const bool f16 = spec.dtype == DType::F16;
    auto raw8 = [&](char x) {
        const auto& strides = x == 'a' ? spec.a_batch_strides : spec.b_batch_strides;
        const bool whole = inner_dim(spec, x) % 8 == 0 &&
                           std::all_of(strides.begin(), strides.end(), [](int64_t s) { return s % 8 == 0; });
        return operand_dtype(spec, x) == DType::F16 && !tuning.coop_scaled && whole ? "1" : "0";
    };
    // Its own stores: no epilogue, no parts, rows in place.
    const bool plain_c = partial || (!spec.epilogue && spec.column_parts.empty() && !spec.heads_merged);
    std::string defs = coop_defines(t, tuning) + "#define TRANS_A " + (spec.trans_a ? "1" : "0") +
                       "\n#define TRANS_B " + (spec.trans_b ? "1" : "0") + "\n#define VEC_C " +
                       (spec.n % (f16 ? 8 : 4) == 0 && plain_c ? "1" : "0") + "\n#define QUAD_C " +
                       (spec.n % 4 == 0 ? "1" : "0") + "\n#define A_RAW8 " + raw8('a') +
                       "\n#define B_RAW8 " + raw8('b') + "\n#define C_MAT(x) " + (f16 ? "F16MAT(x)" : "(x)") + "\n";
    // last_piece's flag before the cooperative code (the top of this file says why).
    k.glsl = preamble(k.iface, kCoopExtensions) + defs + common_glsl(spec, summed != nullptr) + store +
             loader_glsl(spec, 'a', pair && summed->a2) + loader_glsl(spec, 'b', pair) + kMatmulStaging +
             (summed ? kLastPieceGlsl : "") + kCoopTypesGlsl + kCoopProductGlsl + (summed ? kPieceSumGlsl : "") + kMatmulMain;
    k.groups = tile_grid(spec, t.bm, t.bn, split_k, tuning.max_groups, pair);
    return k;
}

}  // namespace mn::codegen::matmul_detail
