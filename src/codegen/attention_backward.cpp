// The attention family's gradients (attention.cpp says how the kernels divide the work): dQ, and dK with dV, on
// cooperative matrices in precision fast where the problem suits them (attention_coop_backward.cpp), else the blocked
// or row-wise f32 kernels; their sweeps split where the workgroups would leave the device idle, the chunks' partial
// sums added by a kernel of their own or by each block's last chunk; the RoPE of a gradient stored with it; and the
// backward's delta = rowsum(dO * out).
#include <algorithm>
#include <bit>

#include "codegen/attention_blocked.hpp"
#include "codegen/attention_coop.hpp"
#include "codegen/attention_decode.hpp"
#include "codegen/attention_rowwise.hpp"
#include "codegen/attention_tiles.hpp"
#include "codegen/families.hpp"

namespace mn::codegen {

using namespace attention_detail;

namespace {

// The backward's inputs, then its outputs (dq, or dk and dv); with the cooperative kernels' views of them.
std::vector<Binding> grad_inputs(const AttentionSpec& s) {
    return {{"q", s.dtype}, {"k", s.dtype}, {"v", s.dtype}, {"dout", s.dtype}, {"lse", DType::F32}, {"delta", DType::F32}};
}
// dq, or dk and dv; where the sweep is split into chunks, the chunks' f32 partial sums in their place, or where the
// kernel adds its chunks itself (`merged`), the partial sums (coherent), the blocks' counters, then dq, or dk and dv.
std::vector<Binding> grad_outputs(const AttentionSpec& s, bool kv, bool chunks, bool merged = false) {
    std::vector<Binding> out;
    if (chunks) out.push_back({"part", DType::F32, true, merged});
    if (chunks && !merged) return out;
    if (merged) out.push_back({"cnt", DType::I32, true});
    if (kv) out.insert(out.end(), {{"dk", s.dtype, true}, {"dv", s.dtype, true}});
    else out.push_back({"dq", s.dtype, true});
    return out;
}
// The cooperative kernels' vec4 views of the inputs they stage and of their float outputs.
std::vector<CoopView> grad_views(const AttentionSpec& s, const std::vector<Binding>& outputs) {
    std::vector<CoopView> views = {{"q", 0, false}, {"k", 1, false}, {"v", 2, false}, {"dout", 3, false}};
    size_t binding = s.dynamic_start ? 7 : 6;  // after lse, delta and [start]
    for (const Binding& out : outputs) {
        if (out.dtype != DType::I32) views.push_back({out.name, binding, true, out.coherent});
        ++binding;
    }
    return views;
}

// Where dq (ROT_KV: the record's dk half) is stored rotated (ROT_SIGN, AttentionSpec::rotate_sign), the RoPE that reads it
// computed where the chunks are added, by sum_block or by the sum kernel (kGradSumRotated), the same way:
// store_rotated_pair adds row r's columns (c, c + D / 2) over the chunks' records (RECORD floats each, in ROT_PARTS)
// in chunk order, rotates them together (the row's position: its place in its head of ROT_LEN rows) and stores them;
// store_dv adds and stores element e of dv's half of the record. Needs EACH, RECORD, SPLITS, STORE, kRopeRotate.
const char* const kRotatedPairs = R"(
void store_rotated_pair(uint r, uint c) {
    const uint HALF = D / 2u;
    uint e = r * D + c;
    float a = 0.0, b = 0.0;
    for (uint q = 0u; q < SPLITS; ++q) {
        a += ROT_PARTS.d[q * RECORD + e];
        b += ROT_PARTS.d[q * RECORD + e + HALF];
    }
    rope_rotate(a, b, float(positions.d[r % ROT_LEN]), float(inv_freq.d[c]), ROT_SIGN);
#if ROT_KV
    uint at = kv_row(r) * D + c;
    dk.d[at] = STORE(a);
    dk.d[at + HALF] = STORE(b);
#else
    uint at = out_row(r) * D + c;
    dq.d[at] = STORE(a);
    dq.d[at + HALF] = STORE(b);
#endif
}
#if ROT_KV
void store_dv(uint e) {
    float sum = 0.0;
    for (uint q = 0u; q < SPLITS; ++q) sum += ROT_PARTS.d[q * RECORD + EACH + e];
    dv.d[dv_row(e / D) * D + e % D] = STORE(sum);
}
#endif
)";

// The GLSL of kRotatedPairs for a backward kernel of `s` (kv: the dK/dV one) reading its chunks' records from `parts`,
// its head lengths `len` (a GLSL expression); nothing where it does not rotate.
std::string rotated_pairs_glsl(const AttentionSpec& s, bool kv, const std::string& parts, const std::string& len) {
    if (s.rotate_sign == 0) return "";
    return "#define ROT_SIGN " + std::to_string(s.rotate_sign) + "\n#define ROT_KV " + (kv ? "1" : "0") + "\n#define ROT_PARTS " +
           parts + "\n#define ROT_LEN (" + len + ")\n" + kRopeRotate + kRotatedPairs;
}

// A backward kernel's chunks added by the workgroup that stores a block's last one (AttentionTiles::last_chunk_merges),
// as the sum kernel would (kGradSum: the same additions in the same order): `block` counts the block's chunks, whose
// rows of the record (its dq rows, or both halves' dk and dv rows) are `rows` from flat row `first`. Every invocation
// calls it after storing its chunk.
//
// With ROT_SIGN, dq (or the record's dk half) is stored rotated (kRotatedPairs), then dv's rows as they are.
const char* const kGradSumBlock = R"(
void sum_block(uint block, uint first, uint rows) {
    if (!last_piece(block, SPLITS)) return;
#ifdef ROT_SIGN
    const uint HALF = D / 2u;
    for (uint f = gl_LocalInvocationID.x; f < rows * HALF; f += WG) store_rotated_pair(first + f / HALF, f % HALF);
#if GS_KV
    for (uint f = gl_LocalInvocationID.x; f < rows * D; f += WG) store_dv(first * D + f);
#endif
    return;
#endif
    for (uint f = gl_LocalInvocationID.x; f < (GS_KV + 1u) * rows * D; f += WG) {
        uint second = f / (rows * D), e = first * D + f % (rows * D);  // second: dv's half of the record
        float sum = 0.0;
        for (uint q = 0u; q < SPLITS; ++q) sum += part.d[q * RECORD + second * EACH + e];
#if GS_KV
        if (second == 1u) {
            dv.d[dv_row(e / D) * D + e % D] = STORE(sum);
            continue;
        }
        dk.d[kv_row(e / D) * D + e % D] = STORE(sum);
#else
        dq.d[out_row(e / D) * D + e % D] = STORE(sum);
#endif
    }
}
)";
std::string grad_sum_block_glsl(const AttentionSpec& s, bool kv) {
    return std::string("#define GS_KV ") + (kv ? "1" : "0") +
           "\nconst uint EACH = HEADS * (GS_KV != 0 ? TK : ROWS) * D, RECORD = (GS_KV + 1u) * EACH;\n" +
           rotated_pairs_glsl(s, kv, "part", "GS_KV != 0 ? TK : TQ") + kGradSumBlock;
}

// The spec a backward kernel's product is built from: it stores dq (dk) rotated only where its last chunk of a block
// adds the chunks (`merged`); where a sum kernel adds them, that kernel rotates (with_partial_sums), and an unsplit
// sweep's gradient is rotated by the RoPE's own kernel.
AttentionSpec rotated_where_merged(const AttentionSpec& s, bool merged) {
    AttentionSpec rs = s;
    if (!merged) rs.rotate_sign = 0;
    return rs;
}

// The RoPE's positions and frequencies a kernel that stores rotated binds after its outputs; else nothing.
std::vector<Binding> rotation_bindings(const AttentionSpec& s) {
    if (s.rotate_sign == 0) return {};
    return {{"positions", DType::I32}, {"inv_freq", s.rotate_freq_dtype}};
}

// A thread per V elements (4 where the head dim allows: 16-byte accesses) of a chunk's record, dq or [dk, dv]
// (P, OUT and DV: the bindings p, dq or dk, and dv, or their vec4 views):
// the chunks' partials added in chunk order, stored at the row's place (ROW: out_row or kv_row, and dv_row for
// dv: the heads merged where AttentionSpec says).
const char* const kGradSum = R"(
void main() {
    uint i = mn_group_id() * WG + gl_LocalInvocationID.x;
    if (i >= RECORD / V) return;
    VEC sum = VEC(0.0);
    for (uint q = 0u; q < SPLITS; ++q) sum += P.d[q * (RECORD / V) + i];
    uint e = i * V % EACH;
#if KV
    if (i * V >= EACH) {
        DV.d[(dv_row(e / D) * D + e % D) / V] = STOREV(sum);
        return;
    }
#endif
    OUT.d[(ROW(e / D) * D + e % D) / V] = STOREV(sum);
}
)";

// kGradSum where dq (or the record's dk half) is stored rotated (kRotatedPairs, as sum_block stores it): a thread per
// column pair, then per element of dv.
const char* const kGradSumRotated = R"(
void main() {
    uint f = mn_group_id() * WG + gl_LocalInvocationID.x;
    const uint HALF = D / 2u;
    if (f < EACH / 2u) {
        store_rotated_pair(f / HALF, f % HALF);
        return;
    }
#if ROT_KV
    if (f - EACH / 2u < EACH) store_dv(f - EACH / 2u);
#endif
}
)";

// The f32 partials of a backward kernel whose sweep is split into `split.splits` chunks, and the kernel
// that adds them in chunk order (deterministic: no atomic additions) into dq, or into dk and dv (the two halves
// of each chunk's record); or where the product adds them itself (`blocks` > 0: sum_block), its counters. Either
// stores dq (dk) rotated where `s` says (AttentionSpec::rotate_sign); an unsplit sweep's product never does.
AttentionGradKernels with_partial_sums(KernelSource product, const AttentionSpec& s, bool kv, const KeySplit& split,
                                       uint32_t max_groups, uint64_t blocks = 0) {
    AttentionGradKernels out{std::move(product)};
    if (split.splits == 1) return out;
    out.rotated = s.rotate_sign != 0;
    const int64_t each = s.batch * s.head_dim * (kv ? s.kv_heads * s.kv_len : s.q_heads * s.q_len);
    const int64_t record = kv ? 2 * each : each;
    out.partial_elements = record * split.splits;
    checked_u32(out.partial_elements, "attention gradient partials");
    if (blocks) {
        out.tile_counters = static_cast<int64_t>(blocks);
        return out;
    }
    KernelSource& k = out.sum.emplace();
    k.label = kv ? "attention_grad_kv_sum" : "attention_grad_q_sum";
    k.iface.local_size = 256;
    k.iface.spec_constants = {"RECORD", "EACH", "D", "SPLITS"};
    k.spec_values = {checked_u32(record, "attention gradient size"), checked_u32(each, "attention gradient size"),
                     checked_u32(s.head_dim, "attention head dim"), split.splits};
    k.choice = "adds " + std::to_string(split.splits) + " chunks' partial sums in chunk order";
    k.iface.bindings = {{"p", DType::F32}};
    if (kv) {
        k.iface.bindings.insert(k.iface.bindings.end(), {{"dk", s.dtype, true}, {"dv", s.dtype, true}});
    } else {
        k.iface.bindings.push_back({"dq", s.dtype, true});
    }
    if (out.rotated) {
        k.iface.spec_constants.push_back("LEN");
        k.spec_values.push_back(checked_u32(kv ? s.kv_len : s.q_len, "attention length"));
        for (Binding& b : rotation_bindings(s)) k.iface.bindings.push_back(std::move(b));
        k.glsl = glsl_preamble(k.iface) + kFlatGroupId + out_row_glsl(s) + "#define STORE " + storage_type(s.dtype) + "\n" +
                 rotated_pairs_glsl(s, kv, "p", "LEN") + kGradSumRotated;
        k.groups = grid_for((static_cast<uint64_t>(each / 2 + (kv ? each : 0)) + 255) / 256, max_groups);
        k.choice += kv ? ", dk rotated by the RoPE that reads it" : ", dq rotated by the RoPE that reads it";
        return out;
    }
    const uint32_t v = s.head_dim % 4 == 0 ? 4 : 1;
    const std::string vec = v == 4 ? "vec4" : "float", stored = v == 4 ? (s.dtype == DType::F16 ? "f16vec4" : "vec4") : storage_type(s.dtype);
    // With V = 4, the bindings again as vec4 views named <binding>4, which the kernel uses (P, OUT, DV).
    std::string views;
    const std::string suffix = v == 4 ? "4" : "";
    for (size_t b = 0; v == 4 && b < k.iface.bindings.size(); ++b) {
        const std::string& name = k.iface.bindings[b].name;
        views += "layout(std430, set = 0, binding = " + std::to_string(b) + ") " + (b == 0 ? "readonly" : "writeonly") +
                 " buffer B_" + name + "4 { " + (b == 0 ? vec : stored) + " d[]; } " + name + "4;\n";
    }
    k.glsl = glsl_preamble(k.iface) + views + kFlatGroupId + out_row_glsl(s) + "#define V " + std::to_string(v) + "u\n#define VEC " +
             vec + "\n#define STOREV " + stored + "\n#define KV " + (kv ? "1" : "0") + "\n#define ROW " + (kv ? "kv_row" : "out_row") +
             "\n#define P p" + suffix + "\n#define OUT " + (kv ? "dk" : "dq") + suffix + "\n#define DV dv" + suffix + "\n" + kGradSum;
    k.groups = grid_for((static_cast<uint64_t>(record / v) + 255) / 256, max_groups);
    return out;
}

// The sweep a backward kernel splits: dQ's keys, or dK/dV's query rows (of all G heads).
int64_t grad_sweep(const AttentionSpec& s, bool kv) { return kv ? s.q_len * (s.q_heads / s.kv_heads) : s.kv_len; }

// The cooperative kernels of `kind` (label, body) where fit_coop takes the problem, the choice naming the
// owned rows, the workgroup's and the streamed tile's and the split; otherwise nullopt with *declined
// saying why.
std::optional<AttentionGradKernels> coop_grad_kernels(CoopKind kind, const AttentionSpec& s, const AttentionTiles& tiles,
                                                      uint32_t max_groups, std::string* declined) {
    AttentionTiles t = tiles;
    t.last_chunk_merges = false;  // the cooperative kernels' chunks: a dispatch adds them (faster: attention.cpp)
    *declined = fit_coop(kind, s, t);
    if (!declined->empty()) return std::nullopt;
    const bool kv = kind == CoopKind::GradKV;
    const int64_t own = kv ? s.kv_len : s.q_len * (s.q_heads / s.kv_heads);
    const uint64_t groups = static_cast<uint64_t>(s.batch * s.kv_heads) * blocks_of(own, t.rows);
    const KeySplit split = choose_key_split(grad_sweep(s, kv), kv ? "query rows" : "keys", t, groups, kLongSweep, kMinChunk);
    const bool chunks = split.splits > 1, merged = chunks && t.last_chunk_merges;
    const AttentionSpec rs = rotated_where_merged(s, merged);
    const std::vector<Binding> outputs = grad_outputs(s, kv, chunks, merged), rotation = rotation_bindings(rs);
    std::vector<Binding> bound = outputs;
    bound.insert(bound.end(), rotation.begin(), rotation.end());
    KernelSource k = tiled_kernel(kv ? "attention_grad_kv_coop" : "attention_grad_q_coop", s, t, false, grad_inputs(s),
                                  bound, coop_glsl(s, grad_views(s, outputs), kv ? kCoopGradKV : kCoopGradQ), groups * split.splits,
                                  max_groups, chunks ? split.splits : 0, coop_extensions(), merged ? grad_sum_block_glsl(rs, kv) : "");
    k.required_subgroup_size = t.coop_subgroup;
    k.choice = "cooperative: " + std::to_string(own) + (kv ? " keys per kv head, " : " rows per kv head, ") +
               std::to_string(t.rows) + " per workgroup, " + std::to_string(t.tile) +
               (kv ? "-row query tiles" : "-key tiles") + split_words(split, kv ? "query rows" : "keys");
    return with_partial_sums(std::move(k), s, kv, split, max_groups, merged ? groups : 0);
}

// At most this many bytes of dS (f32) are stored for dQ's matmul (grad_q_from_scores): Whisper-tiny's encoder
// stores 54 MB a layer (6 heads of 1,500 x 1,500).
constexpr uint64_t kMaxStoredScores = uint64_t(256) << 20;

// The binding through which the blocked dK/dV kernel stores dS times the scale (bound after delta), and its GLSL:
// STORE_SCORES, and a vec4 view of it where whole rows are vec4s.
Binding scores_binding() { return {"scores", DType::F32, true}; }
std::string scores_glsl(const AttentionSpec& s) {
    std::string g = "#define STORE_SCORES\n";
    if (s.kv_len % 4 == 0) {
        g += "#define SCORES4\nlayout(std430, set = 0, binding = " + std::to_string(grad_inputs(s).size()) +
             ") writeonly buffer B_scores4 { vec4 d[]; } scores4;\n";
    }
    return g;
}

// The f32 kernels of dQ or dK/dV: blocked for many rows, their sweep split as the cooperative ones';
// row-wise otherwise, whole. store_scores: the dK/dV kernel stores dS too (grad_q_from_scores).
AttentionGradKernels f32_grad_kernels(CoopKind kind, const AttentionSpec& s, const AttentionTiles& tiles, uint32_t max_groups,
                                      const std::string& coop_declined, bool store_scores = false) {
    const bool kv = kind == CoopKind::GradKV;
    const int64_t group = s.q_heads / s.kv_heads, own = kv ? s.kv_len : s.q_len * group, sweep = grad_sweep(s, kv);
    const int64_t stream = kv ? s.q_len : s.kv_len;  // rows of the streamed operand per head
    const bool blocked = use_blocked(tiles, own, sweep);
    const AttentionTiles t = blocked ? fit_blocked(tiles, s.head_dim, own, stream, kv ? BlockedKind::GradKV : BlockedKind::GradQ)
                                     : fit(tiles, s.head_dim, own, stream, kv ? Footprint{2, 2, 2, 2} : Footprint{2, 2, 1, 0});
    const uint64_t groups = static_cast<uint64_t>(s.batch * s.kv_heads) * blocks_of(own, t.rows);
    const KeySplit split = blocked ? blocked_split(own, sweep, kv ? "query rows" : "keys", t, groups, s.head_dim) : KeySplit{};
    if (blocked && split.splits == 1) check_loop_limit(t, s.head_dim, stream, kv ? group : 1);
    if (blocked && split.splits > 1) {
        // The chunks are runs of the (G *) ceil(rows / BT) tiles of the sweep.
        const int64_t steps = (kv ? group : 1) * ((stream + t.tile - 1) / t.tile);
        check_loop_limit(t, s.head_dim, (steps + split.splits - 1) / split.splits * t.tile, 1);
    }
    const bool chunks = split.splits > 1, merged = chunks && t.last_chunk_merges;
    const AttentionSpec rs = rotated_where_merged(s, merged);
    std::vector<Binding> outputs = grad_outputs(s, kv, chunks, merged);
    for (Binding& b : rotation_bindings(rs)) outputs.push_back(std::move(b));
    if (store_scores && !(kv && blocked)) throw Error("[attention] only the blocked dK/dV kernel stores dS");
    std::vector<Binding> inputs = grad_inputs(s);
    if (store_scores) inputs.push_back(scores_binding());
    const std::string body = (store_scores ? scores_glsl(s) : "") +
                             (kv ? (blocked ? kBlockedGradKV : kRowwiseGradKV) : (blocked ? kBlockedGradQ : kRowwiseGradQ));
    KernelSource k = tiled_kernel(kv ? "attention_grad_kv" : "attention_grad_q", s, t, blocked, inputs,
                                  outputs, body, groups * split.splits, max_groups,
                                  chunks ? split.splits : 0, "", merged ? grad_sum_block_glsl(rs, kv) : "");
    k.choice = f32_choice(blocked, own, kv ? " keys per kv head" : " rows per kv head", sweep, kv ? " query rows" : " keys",
                          tiles, coop_declined, blocked && own >= kBlockedMinRows ? split_words(split, kv ? "query rows" : "keys") : "") +
               (store_scores ? "; stores dS for dQ's matmul" : "");
    return with_partial_sums(std::move(k), s, kv, split, max_groups, merged ? groups : 0);
}

}  // namespace

AttentionGradKernels attention_grad_q_kernels(const AttentionSpec& s, const AttentionTiles& tiles, uint32_t max_groups) {
    std::string coop_declined;
    if (auto k = coop_grad_kernels(CoopKind::GradQ, s, tiles, max_groups, &coop_declined)) return std::move(*k);
    return f32_grad_kernels(CoopKind::GradQ, s, tiles, max_groups, coop_declined);
}

AttentionGradKernels attention_grad_kv_kernels(const AttentionSpec& s, const AttentionTiles& tiles, uint32_t max_groups,
                                               bool store_scores) {
    std::string coop_declined;
    if (store_scores && !grad_q_from_scores(s, tiles)) throw Error("[attention] this dK/dV kernel does not store dS");
    if (auto k = coop_grad_kernels(CoopKind::GradKV, s, tiles, max_groups, &coop_declined)) return std::move(*k);
    return f32_grad_kernels(CoopKind::GradKV, s, tiles, max_groups, coop_declined, store_scores);
}

// dQ = scale * dS K recomputes S and dP tile by tile, as the dK/dV kernel did (a third of the backward's
// multiply-adds more, and on the H200 Whisper-tiny's dQ kernels took 1.33 ms of its strict step's 7.2). Where dS
// is small enough to store and the dK/dV kernel is the blocked f32 one, that kernel stores it and dQ is one
// batched matmul. Causal and windowed problems keep the dQ kernel: the dK/dV kernel skips the tiles they mask, so
// it would leave dS unwritten there.
bool grad_q_from_scores(const AttentionSpec& s, const AttentionTiles& tiles) {
    AttentionTiles coop = tiles;
    if (!tiles.grad_q_from_scores || s.causal || s.dtype != DType::F32) return false;
    if (tiles.coop_subgroup && fit_coop(CoopKind::GradKV, s, coop).empty()) return false;
    const uint64_t scores = static_cast<uint64_t>(s.batch * s.q_heads * s.q_len * s.kv_len);
    return use_blocked(tiles, s.kv_len, grad_sweep(s, true)) && 4 * scores <= kMaxStoredScores && scores <= UINT32_MAX;
}

// TPR threads a row (a power of two; 4 elements each at head dim 64), reading it together, their sums
// added in shared memory in a fixed order. A thread a row read 64 elements one after another: on the
// H200 SmolLM2-135M's training step spent 0.63 ms in its 30 dispatches of 1,152 rows (21 us each).
const char* const kAttentionDelta = R"(
void main() {
    uint lid = gl_LocalInvocationID.x, lane = lid % TPR, r = mn_group_id() * (WG / TPR) + lid / TPR;
    float s = 0.0;
    if (r < ROWS) {
        for (uint d = lane; d < D; d += TPR) s += float(o.d[out_row(r) * D + d]) * float(dout.d[r * D + d]);
    }
    s = lane_sum(s);
    if (lane == 0u && r < ROWS) delta.d[r] = s;
}
)";

KernelSource attention_delta_kernel(const AttentionSpec& s, const Launch& launch) {
    const DType dtype = s.dtype;
    const int64_t rows = s.batch * s.q_heads * s.q_len, head_dim = s.head_dim;
    KernelSource k;
    k.label = "attention_delta";
    k.iface.local_size = std::bit_floor(launch.local_size);
    const uint32_t per_row = std::min({32u, k.iface.local_size, std::bit_ceil(checked_u32((head_dim + 3) / 4, "attention head dim"))});
    k.iface.spec_constants = {"ROWS", "D"};
    k.spec_values = {checked_u32(rows, "attention rows"), checked_u32(head_dim, "attention head dim")};
    checked_u32(rows * head_dim, "attention tensor size");
    k.iface.bindings = {{"o", dtype}, {"dout", dtype}, {"delta", DType::F32, true}};
    k.glsl = glsl_preamble(k.iface) + "#define TPR " + std::to_string(per_row) + "u\n" + kLaneSum + kFlatGroupId +
             out_row_glsl(s) + kAttentionDelta;
    k.groups = grid_for(blocks_of(rows, k.iface.local_size / per_row), launch.max_groups);
    return k;
}

}  // namespace mn::codegen
