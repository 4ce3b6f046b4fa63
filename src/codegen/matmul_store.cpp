// What the matmul kernels store (matmul_common.hpp): C where it lives (its column parts, the split of the
// heads, pairs of columns rotated or into a cache, rows with the heads merged), and split-K's sum of the f32
// pieces, by the product's last piece of each tile (piece_sum_glsl, kPieceSumGlsl) or by a dispatch of its own
// (split_sum_kernel, split_sum_norm_kernel).
#include <algorithm>
#include <bit>

#include "codegen/matmul_common.hpp"

namespace mn::codegen::matmul_detail {

namespace {

// What both split sums declare before their main: STORE and STORE4 for C's dtype, the 16-byte views of the partials
// (p4) and of C (c4), and `store` (store_glsl's functions, which use them).
std::string split_sum_head(DType out_dtype, const std::string& store) {
    const std::string store4 = out_dtype == DType::F16 ? "f16vec4" : "vec4";
    return "#define STORE " + std::string(storage_type(out_dtype)) + "\n#define STORE4 " + store4 + "\n" +
           buffer_view(0, "p4", Access::Read) + buffer_view(1, "c4", Access::Write, store4) + store;
}

// product_store_glsl's where the kernel sums its pieces.
std::string piece_sum_glsl(KernelSource& k, const MatmulSpec& spec) {
    const size_t pieces = 2;  // binding c: the f32 pieces [pair][piece][batch][M][N]
    k.iface.bindings[pieces].coherent = true;
    k.iface.bindings.push_back({"cnt", DType::I32, true});
    k.iface.bindings.push_back({"y", spec.dtype, true});
    const size_t y = k.iface.bindings.size() - 1;
    const int64_t half = pair_half(spec, true);  // a q, k, v product's parts that rotate: stored in pairs of columns
    const std::string store = half ? define("HALF", half) + store_pair_glsl(k, spec.dtype, spec.column_parts, "y")
                                   : store_glsl(k, spec.dtype, spec.column_parts, "y", merged_heads(spec));
    const std::string epilogue = epilogue_glsl(spec.epilogue, k);
    std::string views = buffer_view(pieces, "p", Access::Read, "float", true) + buffer_view(pieces, "p4", Access::Read, "vec4", true) +
                        buffer_view(y, "y4", Access::Write, spec.dtype == DType::F16 ? "f16vec4" : "vec4");
    // The second W, and a second A (a sum of two products), with their 16-byte views (a pair's loads: loader_glsl,
    // kMatmulStaging's B8 and A8).
    for (const char operand : {'b', 'a'}) {
        if (!(operand == 'b' ? spec.b2 : spec.a2)) continue;
        if (!spec.epilogue || spec.epilogue->product2 < 0) throw Error("matmul: a pair's sum needs an epilogue of both");
        const DType w = operand_dtype(spec, operand);
        const std::string name = std::string(1, operand) + "2";
        views += buffer_view(k.iface.bindings.size(), name + "4", Access::Read, w == DType::F16 ? "f16vec4" : "vec4") +
                 buffer_view(k.iface.bindings.size(), name + "8", Access::Read, "uvec4");
        k.iface.bindings.push_back({name, w});
    }
    return views + store + epilogue + "#define SUMS 1\n#define COLUMN_PAIRS " + (half ? "1" : "0") + "\n#define PAIR " +
           (spec.b2 ? "1" : "0") + "\n#define PAIR_A " + (spec.a2 ? "1" : "0") + "\n#define VEC_Y " +
           (spec.n % 4 == 0 ? "1" : "0") + "\n#define C_EPI(i, v) (v)\n#define C_EPI4(i, v) (v)\n";
}

}  // namespace

std::string product_store_glsl(KernelSource& k, const MatmulSpec& spec, uint32_t k_split, const MatmulSpec* summed) {
    const bool partial = k_split < spec.k;  // a split sum, or the last piece (summed), stores C
    const std::string store = partial ? store_glsl(k, spec.dtype, {})
                                      : store_glsl(k, spec.dtype, spec.column_parts, "c", merged_heads(spec));
    if (summed) return store + piece_sum_glsl(k, *summed);
    return store + epilogue_glsl(partial ? nullptr : spec.epilogue, k) +
           "#define SUMS 0\n#define PAIR 0\n#define PAIR_A 0\n#define C_EPI(i, v) EPI(i, v)\n#define C_EPI4(i, v) EPI4(i, v)\n";
}

const char* const kPieceSumGlsl = R"(
// Split-K's sum: the last of a tile's pieces sums them all in piece order, applies the epilogue and stores C, as the
// split sum's own dispatch would (the same additions in the same order).
void sum_pieces() {
    uint batch = gl_WorkGroupID.z % NB;
    uint tile = (batch * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (!last_piece(tile, (PAIR + 1u) * PIECES)) return;
    const uint T = NB * M * N;  // one piece's elements
#if COLUMN_PAIRS
    // Columns (j, j + HALF) of each head together (the tile's heads whole: its width a multiple of the head dim), as
    // the parts that rotate them store them (store_pair).
    for (uint e = gl_LocalInvocationID.x; e < BM * (BN / 2u); e += WG) {
        uint h = e % (BN / 2u), gm = m0 + e / (BN / 2u), gn = n0 + h / HALF * (2u * HALF) + h % HALF;
        if (gm >= M || gn >= N) continue;
        uint i = gm * N + gn;
        float s = 0.0, s2 = 0.0;
        for (uint q = 0u; q < PIECES; ++q) s += p.d[q * T + i];
        for (uint q = 0u; q < PIECES; ++q) s2 += p.d[q * T + i + HALF];
        store_pair(gm, gn, s, s2);
    }
#else
    for (uint e = gl_LocalInvocationID.x; e < BM * (BN / 4u); e += WG) {
        uint gm = m0 + e / (BN / 4u), gn = n0 + e % (BN / 4u) * 4u;
        if (gm >= M || gn >= N) continue;
        uint i = (batch * M + gm) * N + gn;
#if VEC_Y
        vec4 s = vec4(0.0);
        for (uint q = 0u; q < PIECES; ++q) s += p4.d[(q * T + i) >> 2];
#if PAIR
        vec4 s2 = vec4(0.0);
        for (uint q = PIECES; q < 2u * PIECES; ++q) s2 += p4.d[(q * T + i) >> 2];
        store_y4(i, EPI2_4(i, s, s2));
#else
        store_y4(i, EPI4(i, s));
#endif
#else
        for (uint j = i; j < i + min(4u, N - gn); ++j) {
            float s = 0.0;
            for (uint q = 0u; q < PIECES; ++q) s += p.d[q * T + j];
#if PAIR
            float s2 = 0.0;
            for (uint q = PIECES; q < 2u * PIECES; ++q) s2 += p.d[q * T + j];
            store_y(j, EPI2(j, s, s2));
#else
            store_y(j, EPI(j, s));
#endif
        }
#endif
    }
#endif
}
)";

KernelSource split_sum_kernel(DType out_dtype, int64_t elements, uint32_t splits, uint32_t max_groups,
                              const Epilogue* epilogue, const std::vector<ColumnPart>& column_parts, bool pair,
                              const MergedHeads& merged) {
    KernelSource k;
    k.label = "matmul_split_sum";
    k.iface.local_size = 256;
    k.iface.spec_constants = {"T", "S"};
    k.spec_values = {checked_u32(elements, "matmul output size"), splits};
    k.iface.bindings = {{"p", DType::F32}, {"c", out_dtype, true}};
    const std::string store = store_glsl(k, out_dtype, column_parts, "c", merged);
    const std::string epi = epilogue_glsl(epilogue, k);
    if (pair && (!epilogue || epilogue->product2 < 0)) throw Error("matmul: a pair's split sum needs an epilogue of both");
    if (pair) k.iface.bindings.push_back({"p2", DType::F32});
    const bool vec = elements % 4 == 0;  // then 4 elements per thread, 16-byte accesses
    std::string g = glsl_preamble(k.iface) + kFlatGroupId + epi + split_sum_head(out_dtype, store);
    if (pair) g += buffer_view(k.iface.bindings.size() - 1, "p24", Access::Read);
    // s2: the pair's second product.
    const std::string sum2 = pair ? (vec ? "    vec4 s2 = vec4(0.0);\n    for (uint q = 0u; q < S; ++q) s2 += p24.d[q * (T / 4u) + i];\n"
                                         : "    float s2 = 0.0;\n    for (uint q = 0u; q < S; ++q) s2 += p2.d[q * T + i];\n")
                                  : "";
    g += vec ? R"(
void main() {
    uint i = mn_group_id() * WG + gl_LocalInvocationID.x;
    if (i >= T / 4u) return;
    vec4 s = vec4(0.0);
    for (uint q = 0u; q < S; ++q) s += p4.d[q * (T / 4u) + i];
)" + sum2 + (pair ? "    store_c4(4u * i, EPI2_4(4u * i, s, s2));\n}\n" : "    store_c4(4u * i, EPI4(4u * i, s));\n}\n")
             : R"(
void main() {
    uint i = mn_group_id() * WG + gl_LocalInvocationID.x;
    if (i >= T) return;
    float s = 0.0;
    for (uint q = 0u; q < S; ++q) s += p.d[q * T + i];
)" + sum2 + (pair ? "    store_c(i, EPI2(i, s, s2));\n}\n" : "    store_c(i, EPI(i, s));\n}\n");
    k.glsl = g;
    k.groups = grid_for((static_cast<uint64_t>(vec ? elements / 4 : elements) + 255) / 256, max_groups);
    return k;
}

KernelSource split_sum_pairs_kernel(const MatmulSpec& spec, uint32_t splits, uint32_t max_groups) {
    KernelSource k;
    k.label = "matmul_split_sum";
    k.iface.local_size = 256;
    k.iface.spec_constants = {"M", "N", "S"};
    k.spec_values = {checked_u32(spec.m, "matmul rows"), checked_u32(spec.n, "matmul columns"), splits};
    k.iface.bindings = {{"p", DType::F32}, {"c", spec.dtype, true}};
    const std::string store = define("HALF", pair_half(spec, true)) + store_pair_glsl(k, spec.dtype, spec.column_parts);
    k.glsl = glsl_preamble(k.iface) + kFlatGroupId + store + R"(
void main() {
    uint e = mn_group_id() * WG + gl_LocalInvocationID.x;
    if (e >= M * (N / 2u)) return;
    uint row = e / (N / 2u), h = e % (N / 2u), col = h / HALF * (2u * HALF) + h % HALF;
    uint i = row * N + col;
    float s = 0.0, s2 = 0.0;
    for (uint q = 0u; q < S; ++q) s += p.d[q * M * N + i];
    for (uint q = 0u; q < S; ++q) s2 += p.d[q * M * N + i + HALF];
    store_pair(row, col, s, s2);
}
)";
    k.groups = grid_for((static_cast<uint64_t>(spec.m) * static_cast<uint64_t>(spec.n / 2) + 255) / 256, max_groups);
    return k;
}

KernelSource split_sum_delta_kernel(const MatmulSpec& spec, uint32_t splits, uint32_t max_groups) {
    const MatmulSpec::SumDelta& d = spec.sum_delta;
    if (d.heads * d.head_dim != spec.n || spec.m % d.seq || spec.column_parts.size() != 1 || !spec.batch.empty()) {
        throw Error("matmul: a split sum's delta needs rows of an attention output's gradient split into heads");
    }
    KernelSource k;
    k.label = "matmul_split_sum+attention_delta";
    k.iface.local_size = 256;
    const uint32_t per_row = std::min<uint32_t>(32, std::bit_ceil(checked_u32((d.head_dim + 3) / 4, "attention head dim")));
    k.iface.spec_constants = {"ROWS", "N", "S", "HEADS", "SEQ", "D"};
    k.spec_values = {checked_u32(spec.m, "matmul rows"), checked_u32(spec.n, "matmul columns"), splits,
                     checked_u32(d.heads, "attention heads"), checked_u32(d.seq, "attention length"),
                     checked_u32(d.head_dim, "attention head dim")};
    checked_u32(spec.m * spec.n * splits, "matmul split-K partial products");
    k.iface.bindings = {{"p", DType::F32}, {"c", spec.dtype, true}};
    const std::string store = store_glsl(k, spec.dtype, spec.column_parts);
    const std::string epi = epilogue_glsl(spec.epilogue, k);
    k.iface.bindings.insert(k.iface.bindings.end(), {{"o", DType::F32}, {"delta", DType::F32, true}});
    k.glsl = glsl_preamble(k.iface) + "#define TPR " + std::to_string(per_row) + "u\n" + kLaneSum + kFlatGroupId + epi +
             split_sum_head(spec.dtype, store) + "#define O_MERGED " + (d.o_merged ? "1" : "0") + "\n" + R"(
void main() {
    uint lid = gl_LocalInvocationID.x, lane = lid % TPR, g = mn_group_id() * (WG / TPR) + lid / TPR;
    uint row = g / HEADS, head = g % HEADS;  // C's row (a position) and the head
    uint r = (row / SEQ * HEADS + head) * SEQ + row % SEQ;  // the delta's row, and O's where its heads are split
    float s = 0.0;
    if (row < ROWS) {
        for (uint d = lane; d < D; d += TPR) {
            uint i = row * N + head * D + d;
            float v = 0.0;
            for (uint q = 0u; q < S; ++q) v += p.d[q * (ROWS * N) + i];
            v = EPI(i, v);
            store_c(i, v);
            s += o.d[O_MERGED != 0 ? i : r * D + d] * float(STORE(v));
        }
    }
    s = lane_sum(s);
    if (lane == 0u && row < ROWS) delta.d[r] = s;
}
)";
    k.groups = grid_for((static_cast<uint64_t>(spec.m * d.heads) + 256 / per_row - 1) / (256 / per_row), max_groups);
    return k;
}

KernelSource split_sum_norm_grad_kernel(const MatmulSpec& spec, uint32_t splits, uint32_t max_groups) {
    const int64_t rows = spec.m, columns = spec.n;
    if (columns % 4 || columns > kSumNormMaxColumns || !spec.batch.empty()) {
        throw Error("matmul: a split sum's norm gradient needs unbatched rows of whole vec4s");
    }
    const MatmulSpec::SumNormGrad& ng = spec.sum_norm_grad;
    KernelSource k;
    k.label = "matmul_split_sum";  // then the epilogue's ops, the norm's, and dx's epilogue's (epilogue_glsl adds them)
    uint32_t wg = 32;  // as split_sum_norm_kernel: a thread per vec4 of the row up to 256
    while (wg < 256 && wg < columns / 4) wg *= 2;
    k.iface.local_size = wg;
    k.iface.spec_constants = {"ROWS", "N", "S", "EPS_BITS"};
    k.spec_values = {checked_u32(rows, "matmul rows"), checked_u32(columns, "matmul columns"), splits, float_bits(ng.eps)};
    checked_u32(rows * columns * splits, "matmul split-K partial products");
    k.iface.bindings = {{"p", DType::F32}, {"c", DType::F32, true}};
    const std::string store = store_glsl(k, DType::F32, {});
    const std::string epi = epilogue_glsl(spec.epilogue, k);
    k.label += ng.layer ? "+layer_norm_grad" : "+rms_norm_grad";
    std::string views;  // vec4 views of x, w and dx
    for (const std::string name : {"x", "w", "dx"}) {
        views += buffer_view(k.iface.bindings.size(), name + "4", name == "dx" ? Access::Write : Access::Read);
        k.iface.bindings.push_back({name, DType::F32, name == "dx"});
    }
    const std::string dx_epi = epilogue_glsl(ng.epilogue, k, "DX_");
    if (ng.stores_up_xhat) {
        views += buffer_view(k.iface.bindings.size(), "up_xhat4", Access::Write);
        k.iface.bindings.push_back({"up_xhat", DType::F32, true});
    }
    if (spec.b2) {
        views += buffer_view(k.iface.bindings.size(), "p24", Access::Read);
        k.iface.bindings.push_back({"p2", DType::F32});
    }
    k.glsl = glsl_preamble(k.iface) + kFlatGroupId + kWorkgroupPairSum + epi + dx_epi + split_sum_head(DType::F32, store) +
             views + "const uint PER = " + std::to_string((columns / 4 + wg - 1) / wg) + "u;  // vec4s a thread\n" +
             "#define LAYER " + (ng.layer ? "1" : "0") + "\n#define PAIR " + (spec.b2 ? "1" : "0") + "\n#define UP_XHAT " +
             (ng.stores_up_xhat ? "1" : "0") + "\n" + R"(
const uint N4 = N / 4u;
// With g = up * w and xhat = (x - mean) * rstd: dx = rstd (g - mean(g) - xhat mean(g xhat)), the mean(g) term only
// when mean-centered (norm_grad_kernel's arithmetic, over the row held in registers).
void main() {
    uint row = mn_group_id();
    if (row >= ROWS) return;
    uint lid = gl_LocalInvocationID.x;
    vec4 up[PER], xs[PER];
    float sx = 0.0;
    for (uint u = 0u; u < PER; ++u) {
        uint j = lid + u * WG, at = row * N4 + j;
        up[u] = vec4(0.0);
        xs[u] = vec4(0.0);
        if (j >= N4) continue;
        vec4 s = vec4(0.0);
        for (uint piece = 0u; piece < S; ++piece) s += p4.d[piece * (ROWS * N4) + at];
#if PAIR
        vec4 s2 = vec4(0.0);
        for (uint piece = 0u; piece < S; ++piece) s2 += p24.d[piece * (ROWS * N4) + at];
        up[u] = EPI2_4(4u * at, s, s2);
#else
        up[u] = EPI4(4u * at, s);
#endif
        store_c4(4u * at, up[u]);
        xs[u] = x4.d[at];
        sx += xs[u].x + xs[u].y + xs[u].z + xs[u].w;
    }
    float mean = LAYER != 0 ? wg_sum(vec2(sx, 0.0)).x / float(N) : 0.0;
    float q = 0.0;
    for (uint u = 0u; u < PER; ++u) {
        vec4 c = xs[u] - mean;
        if (lid + u * WG < N4) q += dot(c, c);
    }
    float rstd = inversesqrt(wg_sum(vec2(q, 0.0)).x / float(N) + uintBitsToFloat(EPS_BITS));
    vec2 acc = vec2(0.0);
    for (uint u = 0u; u < PER; ++u) {
        uint j = lid + u * WG;
        if (j >= N4) continue;
        vec4 g = up[u] * w4.d[j];
        acc += vec2(g.x + g.y + g.z + g.w, dot(g, (xs[u] - mean) * rstd));
    }
    vec2 m = wg_sum(acc) / float(N);
    for (uint u = 0u; u < PER; ++u) {
        uint j = lid + u * WG, at = row * N4 + j;
        if (j >= N4) continue;
        vec4 g = up[u] * w4.d[j];
        dx4.d[at] = DX_EPI4(4u * at, rstd * (g - (LAYER != 0 ? m.x : 0.0) - (xs[u] - mean) * rstd * m.y));
#if UP_XHAT
        up_xhat4.d[at] = up[u] * ((xs[u] - mean) * rstd);
#endif
    }
}
)";
    k.groups = grid_for(static_cast<uint64_t>(rows), max_groups);
    return k;
}

KernelSource split_sum_norm_kernel(int64_t rows, int64_t columns, uint32_t splits, uint32_t max_groups,
                                   const Epilogue* epilogue, double eps, bool layer, const Epilogue* norm_epilogue) {
    if (columns % 4 || columns > kSumNormMaxColumns) throw Error("matmul: a split sum's norm needs rows of whole vec4s");
    KernelSource k;
    k.label = "matmul_split_sum";
    // A thread per vec4 of the row up to 256 (a row of 50-128 rows' products is the whole grid: the threads are what
    // hides the loads' latency); beyond, each holds up to 8 of them in registers between the sum and the norm.
    uint32_t wg = 32;
    while (wg < 256 && wg < columns / 4) wg *= 2;
    k.iface.local_size = wg;
    k.iface.spec_constants = {"ROWS", "N", "S", "EPS_BITS"};
    k.spec_values = {checked_u32(rows, "matmul rows"), checked_u32(columns, "matmul columns"), splits, float_bits(eps)};
    checked_u32(rows * columns, "matmul output size");
    k.iface.bindings = {{"p", DType::F32}, {"c", DType::F32, true}};
    const std::string store = store_glsl(k, DType::F32, {});
    const std::string epi = epilogue_glsl(epilogue, k);
    k.label += layer ? "+layer_norm" : "+rms_norm";
    // vec4 views of the norm's bindings: w, [b], y.
    std::string views;
    for (const std::string name : {"w", "b", "y"}) {
        if (name == "b" && !layer) continue;
        views += buffer_view(k.iface.bindings.size(), name + "4", name == "y" ? Access::Write : Access::Read);
        k.iface.bindings.push_back({name, DType::F32, name == "y"});
    }
    const std::string norm_epi = epilogue_glsl(norm_epilogue, k, "N");  // stores NEPI4 of the norm into y
    k.glsl = glsl_preamble(k.iface) + kFlatGroupId + kWorkgroupPairSum + epi + norm_epi + split_sum_head(DType::F32, store) + views +
             "const uint PER = " + std::to_string((columns / 4 + wg - 1) / wg) + "u;  // vec4s a thread\n"
             "#define LAYER " + (layer ? "1" : "0") + "\n" + R"(
const uint N4 = N / 4u;
void main() {
    uint row = mn_group_id();
    if (row >= ROWS) return;
    uint lid = gl_LocalInvocationID.x;
    vec4 h[PER];
    float q = 0.0;
    for (uint u = 0u; u < PER; ++u) {
        uint j = lid + u * WG, at = row * N4 + j;
        h[u] = vec4(0.0);
        if (j < N4) {
            vec4 s = vec4(0.0);
            for (uint piece = 0u; piece < S; ++piece) s += p4.d[piece * (ROWS * N4) + at];
            h[u] = EPI4(4u * at, s);
            store_c4(4u * at, h[u]);
            q += dot(h[u], LAYER != 0 ? vec4(1.0) : h[u]);  // the sum (LayerNorm) or the squares (RMSNorm)
        }
    }
    float mean = 0.0;
#if LAYER
    // q held the sum: the mean, then the squares about it (two passes over the registers, as the norm's own kernel).
    mean = wg_sum(vec2(q, 0.0)).x / float(N);
    q = 0.0;
    for (uint u = 0u; u < PER; ++u) {
        vec4 c = h[u] - mean;
        if (lid + u * WG < N4) q += dot(c, c);
    }
#define BIAS(j) b4.d[j]
#else
#define BIAS(j) vec4(0.0)
#endif
    float rstd = inversesqrt(wg_sum(vec2(q, 0.0)).x / float(N) + uintBitsToFloat(EPS_BITS));
    for (uint u = 0u; u < PER; ++u) {
        uint j = lid + u * WG;
        if (j >= N4) continue;
        vec4 normed = (h[u] - mean) * rstd * w4.d[j] + BIAS(j);
        y4.d[row * N4 + j] = NEPI4(4u * (row * N4 + j), normed);
    }
}
)";
    k.groups = grid_for(static_cast<uint64_t>(rows), max_groups);
    return k;
}

namespace {

// GLSL: where column `col` of row `row` of [rows, width] lives in its split of the heads [rows / seq, heads, seq,
// head_dim] (a column part of a model's heads).
std::string head_split_at(const std::string& row, const std::string& col, const std::string& width, const std::string& seq,
                          const std::string& head_dim) {
    return "((" + row + " / " + seq + ") * (" + width + " / " + head_dim + ") + " + col + " / " + head_dim + ") * (" + seq +
           " * " + head_dim + ") + (" + row + " % " + seq + ") * " + head_dim + " + " + col + " % " + head_dim;
}

// For each part p, `if (col < PART<p>) { <stores[p]> return; } col -= PART<p>;`.
std::string part_walk(const std::vector<std::string>& stores) {
    std::string body;
    for (size_t p = 0; p < stores.size(); ++p) {
        const std::string width = "PART" + std::to_string(p);
        body += "    if (col < " + width + ") { " + stores[p] + " return; }\n    col -= " + width + ";\n";
    }
    return body;
}

// store_<c>4 as four calls of store_<c>.
std::string store4_by_element(const std::string& c) {
    return "void store_" + c + "4(uint i, vec4 v) { store_" + c + "(i, v.x); store_" + c + "(i + 1u, v.y); store_" + c +
           "(i + 2u, v.z); store_" + c + "(i + 3u, v.w); }\n";
}

}  // namespace

MergedHeads merged_heads(const MatmulSpec& spec) {
    return spec.heads_merged ? MergedHeads{spec.heads_merged, spec.heads_seq, spec.n} : MergedHeads{};
}

std::string store_glsl(KernelSource& k, DType dtype, const std::vector<ColumnPart>& parts, const std::string& c,
                       const MergedHeads& merged) {
    if (std::any_of(parts.begin(), parts.end(), [](const ColumnPart& p) { return p.rope || p.cache_rows > 0; })) {
        throw Error("matmul: only a GEMV stores parts that rotate or go into a cache");
    }
    if (merged.heads && !parts.empty()) throw Error("matmul: merged heads of column parts");
    const std::string type = storage_type(dtype), type4 = dtype == DType::F16 ? "f16vec4" : "vec4";
    const std::string head = "void store_" + c + "(uint i, float v) {\n";
    if (parts.empty()) {
        // Element i's place: itself, or its row's with the heads merged (4 at once: rows of whole vec4s).
        std::string at = "i", fn;
        if (merged.heads) {
            const std::string n = "_" + c;
            for (const auto& [name, value] : {std::pair{"MERGED_HEADS", merged.heads}, {"MERGED_SEQ", merged.seq}, {"ROW_LENGTH", merged.row_length}}) {
                k.iface.spec_constants.push_back(name + n);
                k.spec_values.push_back(checked_u32(value, "matmul merged heads"));
            }
            fn = heads_row_fn("merged_row" + n, "MERGED_SEQ" + n, "MERGED_HEADS" + n) + "uint merged_at" + n +
                 "(uint i) { return merged_row" + n + "(i / ROW_LENGTH" + n + ") * ROW_LENGTH" + n + " + i % ROW_LENGTH" + n + "; }\n";
            at = "merged_at" + n + "(i)";
        }
        const std::string one = fn + head + "    " + c + ".d[" + at + "] = " + type + "(v);\n}\n";
        if (merged.heads && merged.row_length % 4) return one + store4_by_element(c);  // 4 may span two rows
        return one + "void store_" + c + "4(uint i, vec4 v) { " + c + "4.d[" + at + " >> 2] = " + type4 + "(v); }\n";
    }
    // The row's columns walked part by part, a split of heads' head dim and sequence (HEAD_DIMp, SEQp) constants too.
    std::string row = "0u";
    for (size_t p = 0; p < parts.size(); ++p) row += " + PART" + std::to_string(p);
    std::vector<std::string> quad_stores;  // store_c4's: 4 columns of one part (and head), from where the first goes
    const std::string body = column_part_walk(k, dtype, parts, [&](size_t p, const std::string& name) {
        const std::string n = std::to_string(p), width = "PART" + n;
        std::string at = "row * " + width + " + col";
        if (parts[p].head_dim > 0) {
            for (const auto& [constant, value] : {std::pair{"HEAD_DIM", parts[p].head_dim}, {"SEQ", parts[p].seq}}) {
                k.iface.spec_constants.push_back(constant + n);
                k.spec_values.push_back(checked_u32(value, "matmul column part"));
            }
            at = head_split_at("row", "col", width, "SEQ" + n, "HEAD_DIM" + n);
        }
        quad_stores.push_back("uint at = " + at + "; " + name + ".d[at] = " + type + "(v.x); " + name + ".d[at + 1u] = " +
                              type + "(v.y); " + name + ".d[at + 2u] = " + type + "(v.z); " + name + ".d[at + 3u] = " + type +
                              "(v.w);");
        return name + ".d[" + at + "] = " + type + "(v);";
    }, c);
    const std::string walk = "    uint row = i / (" + row + "), col = i % (" + row + ");\n";
    // Where whole quads of columns stay in one part and one head, store_c4 walks the parts once for its 4 columns.
    // Whisper-tiny's q, k, v product in f32 (3 parts of 6 heads, a bias epilogue, a 128x128 tile: 16 inlined stores of
    // 4 a thread) walked them per element and took 12x as long on the H200; this and the tiled kernel's written-out
    // stores (store_tile_glsl) together cured it, which of the two was not separated.
    const bool quads = std::all_of(parts.begin(), parts.end(), [](const ColumnPart& p) { return p.width % 4 == 0 && p.head_dim % 4 == 0; });
    if (!quads) return head + walk + body + "}\n" + store4_by_element(c);
    return head + walk + body + "}\nvoid store_" + c + "4(uint i, vec4 v) {\n" + walk + part_walk(quad_stores) + "}\n";
}

std::string column_part_walk(KernelSource& k, DType dtype, const std::vector<ColumnPart>& parts,
                             const std::function<std::string(size_t, const std::string&)>& store, const std::string& c) {
    std::vector<std::string> stores;
    for (size_t p = 0; p < parts.size(); ++p) {
        const std::string width = "PART" + std::to_string(p), name = p ? c + "_" + std::to_string(p) : c;
        k.iface.spec_constants.push_back(width);
        k.spec_values.push_back(checked_u32(parts[p].width, "matmul column part"));
        if (p) k.iface.bindings.push_back({name, dtype, true});
        stores.push_back(store(p, name));
    }
    return part_walk(stores);
}

int64_t pair_half(const MatmulSpec& spec, bool rows) {
    const auto special = [](const ColumnPart& p) { return p.rope || p.cache_rows > 0; };
    const auto first = std::find_if(spec.column_parts.begin(), spec.column_parts.end(), special);
    if (first == spec.column_parts.end()) return 0;
    const int64_t head_dim = first->head_dim;
    const bool fits = head_dim > 0 && head_dim % 2 == 0 && (spec.m == 1 || rows) && spec.batch.empty() && !spec.epilogue &&
                      !spec.b2 && std::all_of(spec.column_parts.begin(), spec.column_parts.end(), [&](const ColumnPart& p) {
                          return p.width % head_dim == 0 && (p.head_dim == 0 || p.head_dim == head_dim) &&
                                 (p.cache_rows == 0 || spec.m == 1);
                      });
    if (!fits) throw Error("matmul: parts that rotate or go into a cache need no epilogue and whole heads of one size");
    return head_dim / 2;
}

std::string store_pair_glsl(KernelSource& k, DType dtype, const std::vector<ColumnPart>& parts, const std::string& c) {
    bool rope = false, cache = false;
    const std::string type = storage_type(dtype);
    const std::string body = column_part_walk(k, dtype, parts, [&](size_t p, const std::string& name) {
        const std::string n = std::to_string(p), head = "(2u * HALF)";
        std::string seq = "1u";
        if (parts[p].seq > 1) {
            k.iface.spec_constants.push_back("PAIR_SEQ" + n);
            k.spec_values.push_back(checked_u32(parts[p].seq, "matmul column part"));
            seq = "PAIR_SEQ" + n;
        }
        std::string store;
        if (parts[p].rope) {
            rope = true;
            store = "rope_rotate(a, b, float(positions.d[row % " + seq + "]), float(inv_freq.d[col % " + head + "]), " +
                    (parts[p].rope_inverse ? "-1.0" : "1.0") + "); ";
        }
        std::string at = "row * PART" + n + " + col";  // [rows, width]
        if (parts[p].cache_rows > 0) {  // one row, at the cache's start
            cache = true;
            const std::string rows = std::to_string(checked_u32(parts[p].cache_rows, "cache rows")) + "u";
            at = "(col / " + head + " * " + rows + " + cache_start(" + rows + ", 1u)) * " + head + " + col % " + head;
        } else if (parts[p].head_dim > 0) {  // [rows / seq, heads, seq, head_dim]
            at = head_split_at("row", "col", "PART" + n, seq, head);
        }
        return store + "uint at = " + at + "; " + name + ".d[at] = " + type + "(a); " + name + ".d[at + HALF] = " + type + "(b);";
    }, c);
    if (rope) k.iface.bindings.insert(k.iface.bindings.end(), {{"positions", DType::I32}, {"inv_freq", dtype}});
    if (cache) k.iface.bindings.push_back({"start", DType::I32});
    return (rope ? std::string(kRopeRotate) : "") + (cache ? kCacheStart : "") +
           "void store_pair(uint row, uint col, float a, float b) {\n" + body + "}\n";
}

}  // namespace mn::codegen::matmul_detail
