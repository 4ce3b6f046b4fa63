// Flash-decoding: a forward with few query rows (a decode step: G * Tq rows per kv head, 3 for
// SmolLM2) is a handful of workgroups, each sweeping the whole cache alone. SmolLM2-135M at 3,000
// positions took 10.5 ms a token on the H200 that way, 3 workgroups per layer on 132 multiprocessors.
// (A prefill of few heads is too: Whisper-tiny's 6 of 1500 rows, about one workgroup per compute
// unit. Every forward kernel, row-wise, blocked or cooperative, splits its keys the same way, and the
// backward kernels their sweeps: attention.cpp.)
// So the keys are split: workgroup (head, block, chunk) runs the row-wise forward (attention_rowwise.cpp,
// SPLIT; a decode step's few rows the key-lanes kernel here, kDecodeChunks) over one chunk of the keys its rows can
// see, every query head of the kv head still sharing each K/V row it loads, and stores the chunk's unnormalized output
// sums, running max m and sum l.
// The combine kernel here merges a row's chunks exactly: with M = max m_i,
//     out = sum_i exp(m_i - M) acc_i / sum_i exp(m_i - M) l_i,   lse = M + log(sum_i exp(m_i - M) l_i),
// in a fixed order (no atomic additions): the same inputs give the same bits. Or, where AttentionTiles::last_chunk_merges
// asks (MEGANEURA_SPLIT_SUM=attention or product), the forward's workgroup that stores a block's last chunk (an atomic
// count of the block's chunks says which) merges the block's rows itself, a thread per output (merge_chunks;
// attention.cpp's combine_block): the combine's dispatch and level go, one per layer of a decode step too, but
// SmolLM2-135M's decode at 4K positions (64 chunks a row) took 1.43 ms a token so against the combine's 1.32 on an H100
// (bench/results/2026-12-06-session35-h100.md): that last workgroup merges its block alone.
//
// The chunk count is fixed when compiling, from the key length and the device's compute units; the
// chunks themselves are cut at run time from the keys the rows can see (a causal decode step at
// position p sees p + 1 keys of a longer cache; a sliding window fewer), in whole key tiles, so
// masked keys are never visited and the work stays even however far the cache is filled.
#include "codegen/attention_decode.hpp"

#include <algorithm>
#include <bit>

#include "codegen/attention_blocked.hpp"

namespace mn::codegen {

namespace {

// About four workgroups per compute unit: a chunk workgroup is small (one to a few key tiles) and its
// loads wait on memory, so several per unit keep the memory system busy. On a device that says how many
// units it has, counted as 1,024 threads (four workgroups of 256), so that a kernel of smaller workgroups
// gets more: Whisper-tiny's strict dK/dV (128 threads, 282 workgroups unsplit) in 4 chunks of query rows
// took 1.846 ms on the H200 against 1.978 in the 2 that four workgroups per unit gave (3: 2.03, 6: 1.91;
// bench/results/2026-12-03-h200-session22.md, call 4). Unknown: a mid-size GPU, as the matmul family
// assumes, four workgroups per unit whatever their size (a CPU driver's are 16 threads). Only the blocked
// kernels' splits count threads so far; the row-wise and cooperative ones count workgroups.
constexpr int64_t kGroupsPerUnit = 4, kThreadsPerUnit = 1024, kUnknownUnits = 32;
// Shorter sweeps stay whole: a workgroup sweeps 256 keys in about the time the combine's extra
// dispatch and barrier cost (an estimate from the H200's ~1 us per 64-key tile, not a measurement).
// Except where the workgroups are fewer than the compute units: then a prefill's or a backward's
// sweep is split down to chunks of one tile. SmolLM2-135M's strict attention (3 kv heads of 384
// query rows over 128 keys: 18 workgroups for 132 units) took 0.52 ms whole and 0.26 ms in 4 chunks
// of 32 keys on the H200, its dK/dV 0.93 -> 0.62 ms and dQ 0.71 -> 0.51 (bench/results/2026-12-02-h200-session13-ab.md).
constexpr int64_t kMinSplitKeys = 256;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string workgroups(uint64_t n) { return std::to_string(n) + (n == 1 ? " workgroup" : " workgroups"); }

// The combine's main for many chunks: one workgroup per row of out (merge_row, kMergeLanes).
const char* const kCombine = R"(
#extension GL_EXT_control_flow_attributes : require
#define NEG_INF uintBitsToFloat(0xff800000u)
)";
const char* const kCombineMain = R"(
void main() {
    uint row = mn_group_id();
    if (row >= ROWS) return;
    merge_row(row);
}
)";

// Few chunks (a prefill's): a thread per output element, each looping over the row's chunks itself (kMergeChunks).
const char* const kCombineColumns = R"(
#extension GL_EXT_control_flow_attributes : require
#define NEG_INF uintBitsToFloat(0xff800000u)
)";

const char* const kCombineColumnsMain = R"(
void main() {
    uint f = mn_group_id() * WG + gl_LocalInvocationID.x, row = f / D, d = f % D;
    if (row >= ROWS) return;
    merge_chunks(row, d);
}
)";

}  // namespace

const char* const kMergeChunks = R"(
void merge_chunks(uint row, uint d) {
    const uint E = D + 2u;  // a chunk's record: D output sums, then m and l
    uint base = row * SPLITS * E;
    float m = NEG_INF;
    [[unroll]] for (uint s = 0u; s < SPLITS; ++s) m = max(m, part.d[base + s * E + D]);
    float l = 0.0, acc = 0.0;
    [[unroll]] for (uint s = 0u; s < SPLITS; ++s) {
        uint at = base + s * E;
        float ms = part.d[at + D];
        float w = ms == NEG_INF ? 0.0 : exp(ms - m);  // then the chunk's sums are 0 too
        l += w * part.d[at + D + 1u];
        acc += w * part.d[at + d];
    }
    o.d[out_row(row) * D + d] = STORE(l > 0.0 ? acc / l : 0.0);  // a row that sees no key yields zeros
    if (d == 0u) lse.d[row] = l > 0.0 ? m + log(l) : NEG_INF;
}
)";

// A row's chunks merged by MERGE_CW threads, each owning the column c (and c + MERGE_DT, ...) of one lane, the lanes
// taking the chunks s = lane, lane + MERGE_LANE_COUNT, ...; the lanes' sums added in lane order. A workgroup of WG
// invocations runs MERGE_CW / WG of those threads each (the combine's WG is MERGE_CW; a chunk kernel's last workgroup
// may be smaller): the same additions in the same order, so the same bits, whatever runs them.
const char* const kMergeLanes = R"(
const uint MERGE_E = D + 2u;  // a chunk's record: D output sums, then m and l
const uint MERGE_LANE_COUNT = MERGE_CW / MERGE_DT;
const uint MERGE_DPT = (D + MERGE_DT - 1u) / MERGE_DT;
const uint MERGE_VT = MERGE_CW / WG;  // the threads each invocation runs
shared float MergeRed[MERGE_CW];

void merge_row(uint row) {
    uint lid = gl_LocalInvocationID.x;
    uint base = row * SPLITS * MERGE_E;
    // The row's max over the chunks (one that saw no key holds -inf); max is exact in any order.
    [[unroll]] for (uint j = 0u; j < MERGE_VT; ++j) {
        uint v = lid + j * WG;
        float m = NEG_INF;
        for (uint s = v; s < SPLITS; s += MERGE_CW) m = max(m, part.d[base + s * MERGE_E + D]);
        MergeRed[v] = m;
    }
    barrier();
    [[unroll]] for (uint w = MERGE_CW / 2u; w > 0u; w /= 2u) {
        [[unroll]] for (uint j = 0u; j < MERGE_VT; ++j) {
            uint v = lid + j * WG;
            if (v < w) MergeRed[v] = max(MergeRed[v], MergeRed[v + w]);
        }
        barrier();
    }
    float m = MergeRed[0];
    float l[MERGE_VT], acc[MERGE_VT][MERGE_DPT];
    [[unroll]] for (uint j = 0u; j < MERGE_VT; ++j) {
        uint v = lid + j * WG, lane = v / MERGE_DT, c = v % MERGE_DT;
        l[j] = 0.0;
        [[unroll]] for (uint i = 0u; i < MERGE_DPT; ++i) acc[j][i] = 0.0;
        // Unrolled (the trip count is a constant once specialized), so a lane's loads of every chunk are in flight at once.
        [[unroll]] for (uint s0 = 0u; s0 < SPLITS; s0 += MERGE_LANE_COUNT) {
            uint s = s0 + lane;
            if (s >= SPLITS) break;
            uint at = base + s * MERGE_E;
            float ms = part.d[at + D];
            float w = ms == NEG_INF ? 0.0 : exp(ms - m);  // then the chunk's sums are 0 too
            l[j] += w * part.d[at + D + 1u];
            [[unroll]] for (uint i = 0u; i < MERGE_DPT; ++i) {
                uint d = c + i * MERGE_DT;
                if (d < D) acc[j][i] += w * part.d[at + d];
            }
        }
    }
    barrier();  // every invocation has read MergeRed[0]
    [[unroll]] for (uint j = 0u; j < MERGE_VT; ++j) MergeRed[lid + j * WG] = l[j];
    barrier();
    float total = 0.0;
    for (uint ln = 0u; ln < MERGE_LANE_COUNT; ++ln) total += MergeRed[ln * MERGE_DT];
    float inv = total > 0.0 ? 1.0 / total : 0.0;  // a row that sees no key yields zeros, as unsplit
    if (lid == 0u) lse.d[row] = total > 0.0 ? m + log(total) : NEG_INF;
    [[unroll]] for (uint i = 0u; i < MERGE_DPT; ++i) {
        barrier();
        [[unroll]] for (uint j = 0u; j < MERGE_VT; ++j) MergeRed[lid + j * WG] = acc[j][i];
        barrier();
        [[unroll]] for (uint j = 0u; j < MERGE_VT; ++j) {
            uint v = lid + j * WG, lane = v / MERGE_DT, c = v % MERGE_DT, d = c + i * MERGE_DT;
            if (lane != 0u || d >= D) continue;
            float sum = 0.0;
            for (uint ln = 0u; ln < MERGE_LANE_COUNT; ++ln) sum += MergeRed[ln * MERGE_DT + c];
            o.d[out_row(row) * D + d] = STORE(sum * inv);
        }
    }
    barrier();  // MergeRed is the next row's
}
)";

// A decode step's chunk, key lanes: KL neighbouring invocations take one key row, each a head-dim quad (VPL of them
// where the quads outnumber the lanes), so a key's row is one coalesced vec4 load and its score a sum over the lanes
// in subgroup shuffles; the workgroup's NSLOT = WG / KL slots take the chunk's keys in turn, U keys a slot and step
// (the loads of all U in flight before any is used), each slot keeping its rows' running max m, sum l and output sums.
// No shared memory and no barrier until the chunk's end, where the slots' states merge: the slots of a subgroup in
// shuffles, the subgroups' through shared memory, in a fixed order. The row-wise kernel staged each 64-key tile in
// shared memory and every invocation of a row then looped over the tile's 64 scores and values alone: SmolLM2-135M's
// chunks at 4K positions took 11.5 us a layer on an H100 for 6.3 MB of cache (bench/results/2026-12-06-session38-h100.md).
// Needs ROWS <= BR (one block of rows a kv head), an f32 cache (q, k and v bindings 0 to 2) and full subgroups of SG.
const char* const kDecodeChunks = R"(
layout(std430, set = 0, binding = 1) readonly buffer B_k4 { vec4 d[]; } k4;
layout(std430, set = 0, binding = 2) readonly buffer B_v4 { vec4 d[]; } v4;
const uint QUADS = D / 4u;
const uint NSLOT = WG / KL;
const uint NSUB = WG / SG;
shared float SubM[NSUB * BR];
shared float SubL[NSUB * BR];
shared vec4 SubA[NSUB * BR * QUADS];

float lanes_sum(float x) {
    [[unroll]] for (uint o = KL / 2u; o > 0u; o /= 2u) x += subgroupShuffleXor(x, o);
    return x;
}

void main() {
    uint lid = gl_LocalInvocationID.x, slot = lid / KL, lane = lid % KL;
    uint g = mn_group_id();
    if (g >= HEADS * SPLITS) return;
    uint split = g % SPLITS, head = g / SPLITS;
    uvec2 keys = chunk_of(key_range(0u, ROWS - 1u), split);
    vec4 qv[BR][VPL], acc[BR][VPL];
    float m[BR], l[BR];
    int position[BR];
    [[unroll]] for (uint r = 0u; r < BR; ++r) {
        position[r] = query_start() + int(r % TQ);
        m[r] = NEG_INF;
        l[r] = 0.0;
        [[unroll]] for (uint v = 0u; v < VPL; ++v) {
            uint c = lane + v * KL, at = (head * ROWS + r) * D + 4u * c;
            bool in_range = r < ROWS && c < QUADS;  // zero past them: a clamped quad adds nothing to a score
            qv[r][v] = in_range ? vec4(q.d[at], q.d[at + 1u], q.d[at + 2u], q.d[at + 3u]) * scale() : vec4(0.0);
            acc[r][v] = vec4(0.0);
        }
    }
    for (uint base = keys.x; base < keys.y; base += NSLOT * U) {
        vec4 kr[U][VPL], vr[U][VPL];
        [[unroll]] for (uint u = 0u; u < U; ++u) {
            uint row4 = (head * TK + min(base + slot + u * NSLOT, keys.y - 1u)) * QUADS;
            [[unroll]] for (uint v = 0u; v < VPL; ++v) {
                uint c = min(lane + v * KL, QUADS - 1u);
                kr[u][v] = k4.d[row4 + c];
                vr[u][v] = v4.d[row4 + c];
            }
        }
        // A row's U scores first, then one rescale for all of them: no chain of exponentials from key to key.
        [[unroll]] for (uint r = 0u; r < BR; ++r) {
            if (r >= ROWS) break;
            float s[U], step_max = NEG_INF;
            [[unroll]] for (uint u = 0u; u < U; ++u) {
                float dot_kq = 0.0;
                [[unroll]] for (uint v = 0u; v < VPL; ++v) dot_kq += dot(qv[r][v], kr[u][v]);
                dot_kq = lanes_sum(dot_kq);
                uint j = base + slot + u * NSLOT;
                s[u] = j < keys.y && sees(position[r], j) ? dot_kq : NEG_INF;
                step_max = max(step_max, s[u]);
            }
            float m_new = max(m[r], step_max);
            if (m_new != NEG_INF) {  // else nothing seen yet: acc and l stay 0
                float alpha = exp(m[r] - m_new);
                l[r] *= alpha;
                [[unroll]] for (uint v = 0u; v < VPL; ++v) acc[r][v] *= alpha;
                [[unroll]] for (uint u = 0u; u < U; ++u) {
                    float p = exp(s[u] - m_new);
                    l[r] += p;
                    [[unroll]] for (uint v = 0u; v < VPL; ++v) acc[r][v] += p * vr[u][v];
                }
                m[r] = m_new;
            }
        }
    }
    // The slots of a subgroup into its first, then the subgroups' through shared memory (a slot that saw no key
    // holds m = -inf and zero sums, so it weighs nothing).
    [[unroll]] for (uint o = KL; o < SG; o *= 2u) {
        [[unroll]] for (uint r = 0u; r < BR; ++r) {
            float mo = subgroupShuffleXor(m[r], o), lo = subgroupShuffleXor(l[r], o), m_new = max(m[r], mo);
            float a = m_new == NEG_INF ? 0.0 : exp(m[r] - m_new), b = m_new == NEG_INF ? 0.0 : exp(mo - m_new);
            l[r] = l[r] * a + lo * b;
            [[unroll]] for (uint v = 0u; v < VPL; ++v) acc[r][v] = acc[r][v] * a + subgroupShuffleXor(acc[r][v], o) * b;
            m[r] = m_new;
        }
    }
    uint sub = lid / SG;
    if (lid % SG < KL) {
        [[unroll]] for (uint r = 0u; r < BR; ++r) {
            if (lane == 0u) {
                SubM[sub * BR + r] = m[r];
                SubL[sub * BR + r] = l[r];
            }
            [[unroll]] for (uint v = 0u; v < VPL; ++v) {
                uint c = lane + v * KL;
                if (c < QUADS) SubA[(sub * BR + r) * QUADS + c] = acc[r][v];
            }
        }
    }
    barrier();
    // The chunk's record per row (the combine's): unnormalized sums, then m and l.
    for (uint f = lid; f < ROWS * QUADS; f += WG) {
        uint r = f / QUADS, c = f % QUADS;
        float mm = NEG_INF;
        for (uint b = 0u; b < NSUB; ++b) mm = max(mm, SubM[b * BR + r]);
        float ll = 0.0;
        vec4 a = vec4(0.0);
        for (uint b = 0u; b < NSUB; ++b) {
            float mb = SubM[b * BR + r], w = mb == NEG_INF ? 0.0 : exp(mb - mm);
            ll += w * SubL[b * BR + r];
            a += w * SubA[(b * BR + r) * QUADS + c];
        }
        uint pbase = ((head * ROWS + r) * SPLITS + split) * (D + 2u);
        [[unroll]] for (uint i = 0u; i < 4u; ++i) part.d[pbase + 4u * c + i] = a[i];
        if (c == 0u) {
            part.d[pbase + D] = mm;
            part.d[pbase + D + 1u] = ll;
        }
    }
#ifdef COMBINE
    combine_block(head, 0u, head);
#endif
}
)";

std::optional<DecodeLanes> decode_lanes(const AttentionSpec& s, const AttentionTiles& t, int64_t rows, uint32_t chunk,
                                        std::string* why_not) {
    const auto no = [&](std::string why) {
        *why_not = std::move(why);
        return std::nullopt;
    };
    if (s.dtype != DType::F32) return no("not an f32 cache");
    if (s.head_dim % 4) return no("head dim " + std::to_string(s.head_dim) + " is not in quads");
    if (rows > std::min<int64_t>(t.rows, kDecodeMaxRows))
        return no(std::to_string(rows) + " rows per kv head are more than " + std::to_string(std::min<int64_t>(t.rows, kDecodeMaxRows)));
    if (!t.shuffle_max_subgroup) return no("no subgroup shuffles of a required size");
    const uint32_t quads = checked_u32(s.head_dim / 4, "attention head dim"), threads = t.rows * t.threads_per_row;
    const uint32_t lanes = std::min(std::bit_floor(quads), t.shuffle_max_subgroup);
    const uint32_t subgroup = group_shuffle_subgroup(lanes, threads, t.shuffle_min_subgroup, t.shuffle_max_subgroup);
    if (!subgroup) return no(std::to_string(threads) + " threads are not whole subgroups of at least " + std::to_string(lanes));
    const uint32_t per_lane = (quads + lanes - 1) / lanes;
    const uint64_t shared = 4ull * (threads / subgroup) * t.rows * (2 + 4ull * quads);
    if (shared > t.shared_bytes) return no("its " + std::to_string(shared) + " bytes of shared memory are too many");
    // U keys a slot in flight: as many as a chunk gives each slot, at most 8, fewer where each is several quads a lane
    // or there are many rows (registers).
    const uint32_t slots = threads / lanes, most = std::max<uint32_t>(1, 8 / per_lane / (t.rows > 4 ? 2 : 1));
    const uint32_t keys_in_flight = std::clamp<uint32_t>((chunk + slots - 1) / slots, 1, most);
    DecodeLanes d{.lanes = lanes, .subgroup = subgroup};
    d.extensions = "#extension GL_KHR_shader_subgroup_shuffle : require\n#define KL " + std::to_string(lanes) + "u\n#define VPL " +
                   std::to_string(per_lane) + "u\n#define SG " + std::to_string(subgroup) + "u\n#define U " +
                   std::to_string(keys_in_flight) + "u\n";
    return d;
}

std::string merge_lanes_glsl(int64_t head_dim, uint32_t lane_threads) {
    const uint32_t columns = std::min(std::bit_ceil(checked_u32(head_dim, "attention head dim")), lane_threads);
    return "#define MERGE_CW " + std::to_string(lane_threads) + "u\n#define MERGE_DT " + std::to_string(columns) + "u\n" + kMergeLanes;
}

uint32_t combine_threads(uint32_t splits, const Launch& launch) {
    return splits <= kMaxColumnSplits ? launch.local_size : std::bit_floor(launch.local_size);
}

KeySplit choose_key_split(int64_t sweep, const std::string& what, const AttentionTiles& t, uint64_t groups,
                          int64_t long_sweep, int64_t min_chunk, uint32_t threads) {
    KeySplit k;
    const int64_t tile = t.tile;
    int64_t want = 1;
    const int64_t units = t.compute_units ? t.compute_units : kUnknownUnits;
    const std::string device = std::to_string(units) + (t.compute_units ? " compute units" : " compute units (unknown: assumed)");
    if (t.forced_splits) {
        want = t.forced_splits;
        k.why = "forced: MEGANEURA_ATTENTION_SPLITS=" + std::to_string(t.forced_splits);
        if (want == 1) return k;  // never: a long sweep then takes the blocked kernel under a loop limit
    } else {
        const int64_t per_unit = t.compute_units && threads ? std::max<int64_t>(1, kThreadsPerUnit / threads) : kGroupsPerUnit;
        const auto target = static_cast<uint64_t>(per_unit * units);
        // Fewer workgroups than units (a prefill's or backward's: min_chunk is theirs): tile-sized chunks.
        const bool starved = min_chunk > 0 && groups < static_cast<uint64_t>(units);
        const int64_t min_keys = starved ? 2 * tile : kMinSplitKeys;
        if (starved) min_chunk = tile;
        if (sweep < min_keys) {
            k.why = std::to_string(sweep) + " " + what + " are fewer than " + std::to_string(min_keys);
        } else if (groups < target) {
            want = static_cast<int64_t>((target + groups - 1) / groups);
            k.why = workgroups(groups) + " would underfill " + device;
            if (min_chunk > t.tile && sweep / min_chunk < want) {
                want = std::max<int64_t>(1, sweep / min_chunk);
                k.why += "; chunks of at least " + std::to_string(min_chunk) + " " + what;
            }
        } else {
            k.why = workgroups(groups) + " fill " + device;
        }
        if (t.max_loop_iterations && sweep > long_sweep && ceil_div(sweep, long_sweep) > want) {
            want = ceil_div(sweep, long_sweep);
            k.why += "; chunks of at most " + std::to_string(long_sweep) + " " + what + " under the device's loop limit";
        }
    }
    // Whole tiles per chunk: only the last chunk stages a partial tile. A forced count too small for
    // the loop limit is raised.
    int64_t chunk = ceil_div(ceil_div(sweep, want), tile) * tile;
    if (t.max_loop_iterations && chunk > long_sweep) chunk = std::max(tile, long_sweep / tile * tile);
    k.splits = checked_u32(ceil_div(sweep, chunk), "attention key chunks");
    k.chunk = checked_u32(chunk, "attention key chunk");
    if (k.splits == 1 && want > 1) k.why += ", but " + std::to_string(sweep) + " " + what + " are one chunk of whole " +
                                           std::to_string(tile) + "-key tiles";
    return k;
}

KernelSource attention_combine_kernel(const AttentionSpec& s, uint32_t splits, const Launch& launch) {
    const int64_t rows = s.batch * s.q_heads * s.q_len;
    KernelSource k;
    k.label = "attention_combine";
    k.iface.spec_constants = {"ROWS", "D", "SPLITS"};
    k.spec_values = {checked_u32(rows, "attention rows"), checked_u32(s.head_dim, "attention head dim"), splits};
    checked_u32(rows * splits * (s.head_dim + 2), "attention partials");
    k.iface.bindings = {{"part", DType::F32}, {"o", s.dtype, true}, {"lse", DType::F32, true}};
    const std::string head = std::string("#define STORE ") + storage_type(s.dtype) + "\n" + out_row_glsl(s) + kFlatGroupId;
    if (splits <= kMaxColumnSplits) {
        k.iface.local_size = launch.local_size;
        k.glsl = glsl_preamble(k.iface) + head + kCombineColumns + kMergeChunks + kCombineColumnsMain;
        k.groups = grid_for(static_cast<uint64_t>(ceil_div(rows * s.head_dim, launch.local_size)), launch.max_groups);
        k.choice = "merges " + std::to_string(splits) + " key chunks per row in chunk order, a thread per output";
        return k;
    }
    // A power of two for the max's tree; columns across the threads, the rest of them as lanes.
    k.iface.local_size = combine_threads(splits, launch);
    k.glsl = glsl_preamble(k.iface) + head + kCombine + merge_lanes_glsl(s.head_dim, k.iface.local_size) + kCombineMain;
    k.groups = grid_for(static_cast<uint64_t>(rows), launch.max_groups);
    k.choice = "merges " + std::to_string(splits) + " key chunks per row in chunk order, a workgroup per row";
    return k;
}

}  // namespace mn::codegen
