// Matmul family: C[b] = op(A[b]) @ op(B[b]) with broadcast batch dims (up to 4) and transposes
// read in place. This file holds what the kernels share and the choice among them:
//   - GEMV (matmul_gemv.cpp) when M or N is 1: the product is a matrix-vector product, bound by
//     reading the matrix once; tiles would leave most threads idle.
//   - cooperative matrix (matmul_coop.cpp) in precision Fast on devices that have NV f16
//     cooperative matrices: f16 tiles, f32 accumulation.
//   - the register-tiled f32 kernel (matmul_tiled.cpp) otherwise.
// What they store, and where split-K's pieces are summed, is matmul_store.cpp's.
// Tile sizes follow the grid and the device's compute-unit count (see pick), and K is split when
// even the smallest tile leaves the device underfilled (see choose_k_split).
#include <algorithm>
#include <bit>
#include <optional>

#include "codegen/matmul_common.hpp"

namespace mn::codegen {

DType operand_dtype(const MatmulSpec& spec, char x) { return (x == 'a' ? spec.a_f16 : spec.b_f16) ? DType::F16 : spec.dtype; }

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

}  // namespace

std::string gemm_size(const MatmulSpec& spec) {
    std::string s = "M x N x K " + std::to_string(spec.m) + "x" + std::to_string(spec.n) + "x" + std::to_string(spec.k);
    if (numel(spec.batch) > 1) s += ", batch " + std::to_string(numel(spec.batch));
    return s;
}

std::string pieces_sum_words(const MatmulTuning& tuning, bool summed, const char* declined) {
    if (summed) return ", summed by the last piece of each tile";
    return tuning.pieces_summed_in_product ? std::string(", summed by a dispatch: ") + declined : "";
}

int64_t inner_dim(const MatmulSpec& spec, char operand) {
    if (operand == 'a') return spec.trans_a ? spec.m : spec.k;
    return spec.trans_b ? spec.k : spec.n;
}

const char* const kRegisterFetchGlsl = R"(
const uint GA = BM * BK / 4u / WG;
const uint GB = BN * BK / 4u / WG;
vec4 ra[GA], rb[GB];
uint lid, m0, n0, a_off, b_off;

void fetch(uint k0) {
    [[unroll]] for (uint p = 0u; p < GA; ++p) {
        uint g = lid + p * WG, o = g / (A_TI / 4u), i = (g % (A_TI / 4u)) * 4u;
#if TRANS_A
        ra[p] = load_a(a_off, k0 + o, m0 + i);
#else
        ra[p] = load_a(a_off, m0 + o, k0 + i);
#endif
    }
    [[unroll]] for (uint p = 0u; p < GB; ++p) {
        uint g = lid + p * WG, o = g / (B_TI / 4u), i = (g % (B_TI / 4u)) * 4u;
#if TRANS_B
        rb[p] = load_b(b_off, n0 + o, k0 + i);
#else
        rb[p] = load_b(b_off, k0 + o, n0 + i);
#endif
    }
}
)";

const char* const kRegisterTileProductGlsl = R"(
vec4 acc[TM][TN / 4u];
void multiply_range(uint k_begin, uint k_end, uint tx, uint ty) {
    [[unroll]] for (uint r = 0u; r < TM; ++r) [[unroll]] for (uint j = 0u; j < TN / 4u; ++j) acc[r][j] = vec4(0.0);

    fetch(k_begin);
    stash();
    barrier();
    for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
        bool more = k0 + BK < k_end;
        if (more) fetch(k0 + BK);
        // 4 k's at a time: an operand staged in rows gives each of its rows' (or columns') 4 k's as one vec4, and
        // ACROSS(v, i, q) regroups k q of its rows 4i .. 4i + 3 into the vec4 the k-major layout reads.
#define ACROSS(v, i, q) vec4(v[4u * (i)][q], v[4u * (i) + 1u][q], v[4u * (i) + 2u][q], v[4u * (i) + 3u][q])
        [[unroll]] for (uint k4 = 0u; k4 < BK / 4u; ++k4) {
#if A_ROWS
            vec4 ar[TM];
            [[unroll]] for (uint r = 0u; r < TM; ++r) ar[r] = As[st * BM + (r >> 2) * TY * 4u + ty * 4u + (r & 3u)][k4];
#endif
#if B_ROWS
            vec4 br[TN];
            [[unroll]] for (uint c = 0u; c < TN; ++c) {
                uint n = (c >> 2) * TX * 4u + tx * 4u + (c & 3u);
                br[c] = Bs[st * BN + n][b_slot(n, k4)];
            }
#endif
            [[unroll]] for (uint q = 0u; q < 4u; ++q) {
                uint kk = k4 * 4u + q;
                vec4 av[TM / 4u], bv[TN / 4u];
#if A_ROWS
                [[unroll]] for (uint i = 0u; i < TM / 4u; ++i) av[i] = ACROSS(ar, i, q);
#else
                [[unroll]] for (uint i = 0u; i < TM / 4u; ++i) av[i] = As[st * BK + kk][i * TY + ty];
#endif
#if B_ROWS
                [[unroll]] for (uint j = 0u; j < TN / 4u; ++j) bv[j] = ACROSS(br, j, q);
#else
                [[unroll]] for (uint j = 0u; j < TN / 4u; ++j) bv[j] = Bs[st * BK + kk][j * TX + tx];
#endif
                [[unroll]] for (uint r = 0u; r < TM; ++r)
                    [[unroll]] for (uint j = 0u; j < TN / 4u; ++j) acc[r][j] += av[r >> 2][r & 3u] * bv[j];
            }
        }
#if STAGES == 2
        // The next slice goes into the other stage, which nobody reads in this step: one barrier a slice.
        if (more) {
            st ^= 1u;
            stash();
        }
        barrier();
#else
        barrier();
        if (more) {
            stash();
            barrier();
        }
#endif
    }
}
)";

std::string define(const std::string& name, int64_t value) {
    return "#define " + name + " " + std::to_string(value) + "u\n";
}

std::string tiled_defines(const TiledGeometry& t) {
    // STAGES without a suffix: the product loop tests it with #if.
    return define("BM", t.bm) + define("BN", t.bn) + define("BK", t.bk) + define("TM", t.tm) + define("TN", t.tn) +
           "#define STAGES " + std::to_string(t.stages) + "\n#define A_ROWS " + (t.a_rows ? "1" : "0") +
           "\n#define B_ROWS " + (t.b_rows ? "1" : "0") + "\n";
}

const char* const kTiledSharedGlsl = R"(
#if A_ROWS
shared vec4 As[STAGES * BM][BK / 4u + 1u];
#else
shared vec4 As[STAGES * BK][BM / 4u + 1u];
#endif
#if B_ROWS
shared vec4 Bs[STAGES * BN][BK / 4u + 1u];
#else
shared vec4 Bs[STAGES * BK][BN / 4u + 1u];
#endif
uint st = 0u;  // the stage the product reads, and stash() writes
const uint TX = BN / TN;   // threads along n
const uint TY = BM / TM;   // threads along m
#if B_ROWS
// The vec4 of row n of Bs (B's column n) that holds k's 4 k4 .. 4 k4 + 3. A thread's 4 neighbouring columns are 4
// rows of Bs, and the 8 threads of a quarter subgroup (one 16-byte load each) read rows 4 apart: a row is 5 vec4s at
// 16-deep slices (9 at 32), so those 8 rows fall on 2 of the 8 16-byte bank groups, 4 reads to a group. Turning each
// row's vec4s by (n / 8) % 4 spreads them over all 8.
const uint B_TURN = min(BK / 4u, 4u) - 1u;
uint b_slot(uint n, uint k4) { return k4 ^ ((n >> 3) & B_TURN); }
#endif
)";

std::string preamble(const KernelInterface& iface, const std::string& extensions) {
    std::string s = glsl_preamble(iface);
    s.insert(s.find('\n') + 1, "#extension GL_EXT_control_flow_attributes : require\n" + extensions);
    return s;
}

KernelSource base_kernel(const MatmulSpec& spec, uint32_t local_size, const std::string& label, uint32_t k_split) {
    KernelSource k;
    k.label = label;
    k.iface.local_size = local_size;
    k.iface.spec_constants = {"M", "N", "K"};
    k.spec_values = {checked_u32(spec.m, "matmul M"), checked_u32(spec.n, "matmul N"), checked_u32(spec.k, "matmul K")};
    add_batch_constants(k, "BD", spec.batch, 1);
    add_batch_constants(k, "AS", spec.a_batch_strides, 0);
    add_batch_constants(k, "BS", spec.b_batch_strides, 0);
    k.iface.spec_constants.insert(k.iface.spec_constants.end(), {"NB", "KSPLIT"});
    k.spec_values.insert(k.spec_values.end(), {checked_u32(std::max<int64_t>(numel(spec.batch), 1), "matmul batch"), k_split});
    k.iface.bindings = {{"a", operand_dtype(spec, 'a')}, {"b", operand_dtype(spec, 'b')}, {"c", spec.dtype, true}};
    checked_u32(numel(spec.batch) * spec.m * spec.n, "matmul output size");
    return k;
}

bool vec4_operand(const MatmulSpec& spec, char operand) { return inner_dim(spec, operand) % 4 == 0; }

std::string common_glsl(const MatmulSpec& spec, bool pieces_summed) {
    auto vec4_of = [](DType d) { return std::string(d == DType::F16 ? "f16vec4" : "vec4"); };
    std::string g = "#define STORE " + std::string(storage_type(spec.dtype)) + "\n#define STORE4 " + vec4_of(spec.dtype) + "\n";
    // Second views of the same bindings, 4 elements wide (Vulkan allows aliased descriptors).
    g += "layout(std430, set = 0, binding = 0) readonly buffer B_a4 { " + vec4_of(operand_dtype(spec, 'a')) +
         " d[]; } a4;\n"
         "layout(std430, set = 0, binding = 1) readonly buffer B_b4 { " + vec4_of(operand_dtype(spec, 'b')) +
         " d[]; } b4;\n"
         "layout(std430, set = 0, binding = 2) " + (pieces_summed ? "coherent " : "") +
         "writeonly buffer B_c4 { STORE4 d[]; } c4;\n";
    g += R"(
const uint PIECES = (K + KSPLIT - 1u) / KSPLIT;  // of split-K
void batch_offsets(uint z, out uint a_off, out uint b_off) {
    uint c3 = z % BD3; z /= BD3; uint c2 = z % BD2; z /= BD2; uint c1 = z % BD1; z /= BD1; uint c0 = z;
    a_off = c0 * AS0 + c1 * AS1 + c2 * AS2 + c3 * AS3;
    b_off = c0 * BS0 + c1 * BS1 + c2 * BS2 + c3 * BS3;
}
// z is piece * NB + batch, a pair's second product (piece_sum_glsl) in the grid's upper half.
bool second_b = false;
void split_range(out uint k_begin, out uint k_end, out uint a_off, out uint b_off) {
    uint z = gl_WorkGroupID.z % (PIECES * NB);
    second_b = gl_WorkGroupID.z >= PIECES * NB;
    k_begin = (z / NB) * KSPLIT;
    k_end = min(K, k_begin + KSPLIT);
    batch_offsets(z % NB, a_off, b_off);
}
)";
    return g;
}

std::string loader_glsl(const MatmulSpec& spec, char operand, bool pair) {
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
        g += "    if (i < " + X + "_INNER) v = vec4(" + (pair ? "second_b ? " + x + "24.d[at >> 2] : " : "") + x + "4.d[at >> 2]);\n";
    } else {
        g += "    for (uint q = 0u; q < 4u; ++q) if (i + q < " + X + "_INNER) v[q] = float(" +
             (pair ? "second_b ? " + x + "2.d[at + q] : " : "") + x + ".d[at + q]);\n";
    }
    return g + "    return v;\n}\n";
}

std::array<uint32_t, 3> tile_grid(const MatmulSpec& spec, uint32_t bm, uint32_t bn, uint32_t k_split,
                                  uint32_t max_groups, bool pair) {
    const int64_t batch = std::max<int64_t>(numel(spec.batch), 1) * ((spec.k + k_split - 1) / k_split) * (pair ? 2 : 1);
    const int64_t gx = (spec.n + bn - 1) / bn, gy = (spec.m + bm - 1) / bm;
    if (gx > max_groups || gy > max_groups || batch > max_groups) {
        throw Error("matmul grid " + std::to_string(gx) + "x" + std::to_string(gy) + "x" + std::to_string(batch) +
                    " exceeds the device's workgroup limit");
    }
    return {static_cast<uint32_t>(std::max<int64_t>(gx, 1)), static_cast<uint32_t>(std::max<int64_t>(gy, 1)),
            static_cast<uint32_t>(batch)};
}

int64_t workgroups(const MatmulSpec& spec, uint32_t bm, uint32_t bn) {
    return ((spec.m + bm - 1) / bm) * ((spec.n + bn - 1) / bn) * std::max<int64_t>(numel(spec.batch), 1);
}

namespace {

int64_t compute_units(const MatmulTuning& t) { return t.compute_units ? t.compute_units : 32; }  // unknown: mid-size

// "BMxBN[xBK]" of a tile, for the choice's explanation.
std::string tile_name(const TiledGeometry& g) { return std::to_string(g.bm) + "x" + std::to_string(g.bn); }
std::string tile_name(const CoopGeometry& g) {
    return std::to_string(g.bm) + "x" + std::to_string(g.bn) + "x" + std::to_string(g.bk) + "/" +
           std::to_string(g.stages);
}

}  // namespace

// Split-K: a grid too small to fill the device walks K serially, one memory round trip per slice,
// so its time grows with K however few the flops (on the H200, 128 x 49152 x 576: 2.9 ms unsplit,
// 0.31 ms split). Splitting K into pieces (each a multiple of 32 and of the kernel's K-slice `slice`)
// multiplies the workgroups, up to about two per compute unit or until a piece would be shorter than
// kMinPiece; in an underfilled grid, pieces longer than kMaxPiece are split regardless. The pieces are
// summed by the product's last piece of each tile, or by one more dispatch (matmul_store.cpp). Returns
// the k range of a piece (K: no split).
//
// A tile whose workgroups a compute unit holds `resident` at a time (0: unknown, enough) runs a grid
// in rounds of resident x units, and a grid a little past a round runs a second one nearly empty. So
// among the splits up to that count it takes the least rounds x piece length: on the H200, ResNet-50's
// 3x3 convolutions at batch 4 (26 tiles of 128 x 64, two a unit) took 9 pieces instead of 11 (234
// workgroups, not 286 where 264 run at once), and its fast inference 1.201 -> 1.113 ms of GPU time;
// Whisper's fc2 (36 tiles of 128 x 128, one a unit) 7 pieces instead of 8, its strict inference
// 2.104 -> 2.031 (2026-12-05, bench/results/2026-12-05-h200-session30.md, call 2). Tiles that units
// hold three or more of keep the most splits: there the grid's excess runs in the first round (fewer
// pieces of SmolVLA's 32 x 32 tiles took its fast inference 1.274 -> 1.322 ms, call 1).
//
// A device that ends long loops (DeviceCaps::max_loop_iterations) gets pieces short enough that
// the main loop, one iteration per K-slice of at least 16, uses at most half of the allowance.
uint32_t choose_k_split(const MatmulSpec& spec, const MatmulTuning& t, int64_t groups, uint32_t slice, uint32_t resident) {
    constexpr int64_t kMinPiece = 128, kMaxPiece = 1024;
    const int64_t k = spec.k, target = 2 * compute_units(t);  // about two workgroups per unit
    const int64_t shortest_slice = t.forced_bk ? std::min<int64_t>(16, t.forced_bk) : 16;
    const int64_t longest = t.max_loop_iterations ? int64_t(t.max_loop_iterations) / 2 * shortest_slice : k;
    const int64_t granule = std::max<int64_t>(32, slice);  // whole K-slices of the kernel
    const auto piece_of = [&](int64_t splits) { return std::min(((k + splits - 1) / splits + granule - 1) / granule * granule, k); };
    int64_t splits = 1;
    if (t.forced_splits) {
        splits = t.forced_splits;
    } else if (!t.cpu && groups < target) {
        const int64_t most = std::max<int64_t>(1, std::min(std::max((target + groups - 1) / groups, (k + kMaxPiece - 1) / kMaxPiece), k / kMinPiece));
        splits = most;
        if (resident) {
            const int64_t round = int64_t(resident) * compute_units(t);
            int64_t least_cost = -1;
            for (int64_t s = std::min(most, (k + kMaxPiece - 1) / kMaxPiece); s <= most; ++s) {
                const int64_t piece = piece_of(s), grid = groups * ((k + piece - 1) / piece);
                const int64_t cost = (grid + round - 1) / round * piece;
                if (least_cost < 0 || cost < least_cost) least_cost = cost, splits = s;
            }
        }
    }
    splits = std::max<int64_t>({splits, 1, (k + longest - 1) / longest});
    return checked_u32(piece_of(splits), "matmul K piece");
}

// The tile with the least estimated time, `forced_bm` (tests, tuning) picking by height instead.
// Time ~ waves x work per workgroup / efficiency, the grid counted with its split-K pieces (each
// workgroup multiplies a bm x bn tile over one piece of K): a grid runs in ceil(workgroups / compute
// units) rounds, and a larger tile does more per shared-memory load. So a large tile wins while the
// grid fills the device, and loses when its last round would leave most compute units idle. The
// efficiencies are fitted to the H200's times of the workloads' products at every tile forced
// (2026-12-02, bench/results/2026-12-02-attention-split-h200.md): 32 x 32 tiles only pay where the
// others leave the device nearly empty (SmolLM2's 128 x 576 x 192 k/v projections). The 128-high
// tiles stage 16-deep slices in two buffers, one barrier a slice (2026-12-03, session 16's call 2:
// 4096^3 34.5 -> 41.4 TFLOP/s against one 32-deep stage, no shape slower). 128 x 64 is taken only where
// forced: on products of 128 rows its kernels are faster (SmolLM2's MLP, 13% over 64 x 64) but the
// programs slower, their dispatches overlapping less (SmolLM2's strict training 8.993 -> 9.312 ms wall
// with it, its GPU sum 14.61 -> 14.40; session 17, call 4, and three rounds before).
TiledGeometry choose_tiled_geometry(const MatmulSpec& spec, const MatmulTuning& t, std::string* why, bool stage_rows) {
    // A CPU driver runs a workgroup as one thread's loop: few invocations, a big register tile
    // (8x8 measured 1.6x faster than 4x4 on lavapipe). The workgroups a unit holds (`resident`) are the
    // H200's, of 64K registers, by the driver's statistics (session 16): 155-161 registers a thread at
    // 128 x 128, 99-101 at 128 x 64, 58-63 at 64 x 64, 256 threads each.
    const std::vector<TiledGeometry> tiled =
        t.cpu && !t.forced_bm ? std::vector<TiledGeometry>{{64, 64, 16, 8, 8}}
                              : std::vector<TiledGeometry>{{128, 128, 16, 8, 8, 1.0, 2, true, 1},
                                                           {128, 64, 16, 8, 4, 1.0, 2, false, 2},
                                                           {64, 64, 16, 4, 4, 0.84, 1, true, 4},
                                                           {32, 32, 16, 4, 4, 0.22}};
    std::optional<TiledGeometry> chosen;
    double best = 0;
    std::string notes;
    for (TiledGeometry g : tiled) {
        notes += (notes.empty() ? "" : "; ") + tile_name(g) + ": ";
        g.a_rows = stage_rows && !spec.trans_a;
        g.b_rows = stage_rows && spec.trans_b;
        while (g.shared_bytes() > t.max_shared_memory && g.bk > 16) g.bk /= 2;  // a shallower slice where it must
        if (g.shared_bytes() > t.max_shared_memory) g.stages = 1;               // then one stage
        if (g.threads() > t.max_invocations) {
            notes += "exceeds the device's workgroup size";
            continue;
        }
        if (g.shared_bytes() > t.max_shared_memory) {
            notes += "exceeds the device's shared memory";
            continue;
        }
        if (t.forced_bm) {
            if (g.bm == t.forced_bm && g.bn == (t.forced_bn ? t.forced_bn : g.bm)) {
                chosen = g;
                notes += "forced (MEGANEURA_MATMUL_TILE)";
                break;
            }
            notes += "not the forced height";
            continue;
        }
        if (!g.by_cost) {
            notes += "only where forced";
            continue;
        }
        const int64_t groups = workgroups(spec, g.bm, g.bn), piece = choose_k_split(spec, t, groups, g.bk, g.resident);
        const int64_t grid = groups * ((spec.k + piece - 1) / piece);
        const int64_t waves = (grid + compute_units(t) - 1) / compute_units(t);
        const double cost = static_cast<double>(waves) * g.bm * g.bn * piece / g.efficiency;
        notes += std::to_string(waves) + " waves, cost " + std::to_string(static_cast<int64_t>(cost / 1000)) + "k";
        if (!chosen || cost < best) chosen = g, best = cost;
    }
    if (!chosen) {
        throw Error("matmul: no tile fits this device" +
                    (t.forced_bm ? " with MEGANEURA_MATMUL_TILE=" + std::to_string(t.forced_bm) : std::string()));
    }
    if (why) *why = tile_name(*chosen) + (t.forced_bm ? " (" : " (the least cost; ") + notes + ")";
    TiledGeometry g = *chosen;
    if (t.forced_bk) g.bk = t.forced_bk;
    if (t.forced_tm) g.tm = t.forced_tm, g.tn = t.forced_tn;  // the kernels check that it divides the tile
    if (t.forced_stages) g.stages = t.forced_stages;
    else if (g.shared_bytes() > t.max_shared_memory) g.stages = 1;  // a forced deeper slice in one stage
    return g;
}

CoopGeometry choose_coop_geometry(const MatmulSpec& spec, const MatmulTuning& t, CoopProduct product,
                                  std::string* why) {
    const auto& f = t.forced_coop;
    if (f[0]) {
        const CoopGeometry g{f[0], f[1], f[2], f[3], f[4], f[5]};
        if (why) *why = tile_name(g) + " (forced: MEGANEURA_COOP_TILE)";
        return g;
    }
    // By the product's size, M x N x K x batch multiply-adds: each tile is taken from its min_work on
    // (where it fits), measured on an H200 with every tile forced on ResNet-50's and the U-Net's
    // products and on the matmul shapes (2026-12-01, bench/results/2026-12-01-coop-tiles-h200.md).
    // The workgroups a unit holds (`resident`, choose_k_split): 256 threads of up to 128 registers at
    // 128 x 64 (below), 141-163 at 128 x 128; the 128-thread tiles' are not measured.
    // Against the waves cost model this replaces, ResNet-50's products took 22% less time, the
    // U-Net's about the same. 128x128 wins on large products (the lm head, 4096^3: 122 against 78
    // TFLOP/s for 128x64); 128x64 on mid-size ones; 32x32 on small ones (the U-Net's: 0.016 against
    // 0.019 ms at 64 x 2048 x 576). Two stages were slower than one 64-deep slice at 128x128 (94
    // against 122 TFLOP/s). Where none is taken by size, the smallest that fits is.
    // 128x64 stages 32 deep: 64 deep, its kernels took 141 to 163 registers a thread, which leaves
    // one workgroup of 8 subgroups per compute unit waiting on its loads; 32 deep, at most 128, two.
    // Against the 64-deep tile (H200, 2026-12-03, bench/results/2026-12-03-h200-session15.md, call 1):
    // ResNet-50's fast inference 1.570 -> 1.322 ms of GPU time and training 9.00 -> 8.37, Whisper's fast
    // training 5.71 -> 5.38, the U-Net's 2.19 -> 2.09; SmolVLA the same. It also fits split products
    // (MatmulTuning::coop_split), which stage two parts of each operand: 64 deep they pass 48 KiB.
    // A matmul takes 64x64 from 2^26, below 128x64's 2^27: there it was the better of the two on every
    // product measured and 32x32 no better (2026-12-03, session 17, calls 2 and 3: SmolLM2's MLP products
    // and their gradients 0.0122-0.0137 -> 0.0113-0.0118 ms, its fast inference 2.625 -> 2.318 ms). A
    // convolution's implicit GEMM does not (from 2^27 it is 128x64's): with it the U-Net's weight and input
    // gradients took 0.297 -> 0.387 and 0.223 -> 0.294 ms.
    const int64_t mid = product == CoopProduct::Matmul ? int64_t(1) << 26 : int64_t(1) << 27;
    const std::vector<CoopGeometry> coop = {{128, 128, 64, 32, 64, 1, int64_t(1) << 31, 1},
                                            {128, 64, 32, 32, 32, 1, int64_t(1) << 27, 2},
                                            {64, 64, 32, 32, 32, 2, mid},
                                            {32, 32, 16, 16, 32, 2, 0}};
    const double work = static_cast<double>(spec.m) * spec.n * spec.k * std::max<int64_t>(numel(spec.batch), 1);
    std::string notes;
    auto misfit = [&](const CoopGeometry& c) -> const char* {
        if (!coop_geometry_divides(c, t.coop_subgroup)) return "does not divide among subgroups of this size";
        if (c.subgroups() * t.coop_subgroup > t.max_invocations || (t.max_subgroups && c.subgroups() > t.max_subgroups))
            return "exceeds the device's workgroup size";
        if (coop_shared_bytes(c, t) > t.max_shared_memory) return "exceeds the device's shared memory";
        return nullptr;
    };
    // The tile's multiply-adds with C padded to whole tiles: a 128-row tile over ResNet-50's 64 output
    // channels multiplies as many zeros as values. Transposing such tiles took its stem convolution from
    // 0.083 to 0.056 ms and its fast training from 7.35 to 7.07 ms on the H200 (2026-12-02, session 14).
    auto padded = [&](const CoopGeometry& c) {
        return static_cast<double>((spec.m + c.bm - 1) / c.bm * c.bm) * ((spec.n + c.bn - 1) / c.bn * c.bn);
    };
    std::optional<CoopGeometry> smallest;
    for (const CoopGeometry& c : coop) {
        notes += (notes.empty() ? "" : "; ") + tile_name(c) + ": ";
        if (const char* no = misfit(c)) {
            notes += no;
            continue;
        }
        smallest = c;
        if (t.forced_bm ? c.bm == t.forced_bm : work >= static_cast<double>(c.min_work)) {
            // Its transpose where that pads less (taken by size only: a forced height stays as forced).
            CoopGeometry flipped = c;
            std::swap(flipped.bm, flipped.bn);
            std::swap(flipped.wm, flipped.wn);
            const bool flip = !t.forced_bm && padded(flipped) < padded(c) && !misfit(flipped);
            if (why) {
                *why = tile_name(flip ? flipped : c) + (t.forced_bm ? " (forced: MEGANEURA_MATMUL_TILE; " : " (by size; ") +
                       notes + (flip ? "taken, transposed: it pads C less)" : "taken)");
            }
            return flip ? flipped : c;
        }
        notes += t.forced_bm ? "not the forced height" : "for products of 2^" + std::to_string(std::bit_width(uint64_t(c.min_work)) - 1) + " multiply-adds or more";
    }
    if (!smallest) throw Error("matmul: no cooperative tile fits this device");
    if (why) *why = tile_name(*smallest) + " (the smallest that fits; " + notes + ")";
    return *smallest;
}

// The product kernel's spec: where K is split, the pieces' partial sums are f32 whatever the output's dtype
// (the split sum stores that), so an f16 product's pieces are the f32 product of its f16 operands.
MatmulSpec pieces_spec(const MatmulSpec& spec, uint32_t k_split) {
    if (k_split >= spec.k || spec.dtype == DType::F32) return spec;
    MatmulSpec pieces = spec;
    pieces.a_f16 = operand_dtype(spec, 'a') == DType::F16;
    pieces.b_f16 = operand_dtype(spec, 'b') == DType::F16;
    pieces.dtype = DType::F32;
    return pieces;
}

const char* no_coop_reason(const MatmulSpec& spec, const MatmulTuning& t) {
    if (!t.coop_subgroup) return t.coop_declined;
    return spec.dtype != DType::F32 ? "not an f32 product" : "";  // the convolutions' coop kernels read f32
}

}  // namespace matmul_detail

using namespace matmul_detail;

MatmulKernels matmul_kernels(const MatmulSpec& spec, const MatmulTuning& t) {
    if (!spec.column_parts.empty() && !spec.batch.empty()) throw Error("matmul: column parts of a batched product");
    MatmulKernels out;
    if (spec.a_rms_eps > 0 && (spec.m != 1 || !spec.batch.empty() || spec.trans_a || spec.dtype != DType::F32)) {
        throw Error("matmul: an RMSNorm of A is computed by an unbatched f32 GEMV of one row only");
    }
    if (spec.b2 && (!spec.epilogue || spec.epilogue->product2 < 0 || !spec.column_parts.empty())) {
        throw Error("matmul: a second B needs an epilogue of both products and one output");
    }
    if (spec.a2 && (!spec.b2 || spec.a_f16)) throw Error("matmul: a second A goes with a second B, both f32");
    const bool gemv = spec.m == 1 || spec.n == 1;
    if (gemv) {
        if (spec.b2 && (!spec.batch.empty() || spec.trans_a || spec.dtype != DType::F32 || spec.a2)) {
            throw Error("matmul: a GEMV's second B needs an unbatched f32 row, and no second A");
        }
        out.product = gemv_kernel(spec, t);
        return out;
    }
    uint32_t k_split;
    std::string why;
    std::optional<CoopGeometry> coop;
    std::optional<TiledGeometry> tiled;
    if (t.coop_subgroup) {
        coop = choose_coop_geometry(spec, t, CoopProduct::Matmul, &why);
        k_split = choose_k_split(spec, t, workgroups(spec, coop->bm, coop->bn), coop->bk, coop->resident);
        why = "cooperative " + why;
    } else {
        tiled = choose_tiled_geometry(spec, t, &why, true);
        k_split = choose_k_split(spec, t, workgroups(spec, tiled->bm, tiled->bn), tiled->bk, tiled->resident);
        why = std::string("tiled f32 (cooperative declined: ") + no_coop_reason(spec, t) + ") " + why;
    }
    const bool split = k_split < spec.k;
    out.sum_stores_norm = split && spec.sum_norm_eps > 0 && !spec.b2 && spec.dtype == DType::F32 &&
                          spec.column_parts.empty() && spec.n % 4 == 0 && spec.n <= kSumNormMaxColumns;
    // A norm's rows span tiles: where the sum stores one, it stays a dispatch of its own. The cooperative kernels'
    // own sums are right since last_piece's flag comes before their cooperative code (matmul_coop.cpp), and slower
    // than the dispatch (ResNet-50's fast inference 0.98 -> 1.49 ms on the H100: a tile's last piece reads all of its
    // pieces alone; session 41), as the f32 kernels' are (tuning.cpp): the default is the dispatch for both. Their f16
    // products' pieces stay a dispatch's to sum: summed in the kernel they have not run on a device.
    const bool sums_fit = coop ? spec.dtype == DType::F32 && coop_pieces_sum_fits(*coop, t) : t.pieces_summed_in_product;
    const MatmulSpec* summed = split && sums_fit && !out.sum_stores_norm ? &spec : nullptr;
    out.sum_stores_delta = split && !summed && spec.sum_delta.heads > 0 && !spec.b2 && spec.dtype == DType::F32 &&
                           !out.sum_stores_norm;
    out.sum_stores_norm_grad = split && !summed && spec.sum_norm_grad.on && spec.dtype == DType::F32 && spec.batch.empty() &&
                               spec.column_parts.empty() && spec.n % 4 == 0 && spec.n <= kSumNormMaxColumns &&
                               !out.sum_stores_norm && !out.sum_stores_delta;
    const MatmulSpec pieces = pieces_spec(spec, k_split);
    out.product = coop ? coop_kernel(pieces, *coop, t, k_split, summed) : tiled_kernel(pieces, *tiled, k_split, t.max_groups, summed);
    const char* declined = out.sum_stores_norm                 ? "it stores a norm, whose rows span tiles"
                           : coop && spec.dtype != DType::F32 ? "an f16 cooperative product's own sum has not run on a device"
                                                              : "the tile leaves no shared memory for last_piece's flag";
    out.product.choice = why + (split ? "; K split in pieces of " + std::to_string(k_split) + pieces_sum_words(t, summed, declined) : "") +
                         "; " + gemm_size(spec);
    if (split) {
        const auto splits = static_cast<uint32_t>((spec.k + k_split - 1) / k_split);
        const int64_t elements = std::max<int64_t>(numel(spec.batch), 1) * spec.m * spec.n;
        out.partial_elements = elements * splits * (summed && spec.b2 ? 2 : 1);
        checked_u32(out.partial_elements, "matmul split-K partial products");
        if (summed) {
            out.tile_counters = coop ? workgroups(spec, coop->bm, coop->bn) : workgroups(spec, tiled->bm, tiled->bn);
            out.tile_columns = coop ? coop->bn : tiled->bn;
            if (const int64_t half = pair_half(spec, true); half && out.tile_columns % (2 * half)) {
                throw Error("matmul: a tile of parts that rotate must hold whole heads");  // schedule/fusion.hpp
            }
        } else if (out.sum_stores_norm_grad) {
            out.sum = split_sum_norm_grad_kernel(spec, splits, t.max_groups);
        } else if (out.sum_stores_delta) {
            out.sum = split_sum_delta_kernel(spec, splits, t.max_groups);
        } else if (pair_half(spec, true)) {
            out.sum = split_sum_pairs_kernel(spec, splits, t.max_groups);
        } else {
            out.sum = out.sum_stores_norm ? split_sum_norm_kernel(elements / spec.n, spec.n, splits, t.max_groups, spec.epilogue,
                                                                  spec.sum_norm_eps, spec.sum_layer_norm, spec.sum_norm_epilogue)
                                          : split_sum_kernel(spec.dtype, elements, splits, t.max_groups, spec.epilogue,
                                                             spec.column_parts, spec.b2, merged_heads(spec));
        }
    } else if (spec.b2) {
        throw Error("matmul: a pair of products of several rows is summed where K is split only");  // schedule/fusion.hpp
    }
    return out;
}

}  // namespace mn::codegen
