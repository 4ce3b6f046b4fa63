// Reduction family: a tensor viewed as [OUTER, R, INNER] is reduced over R, one workgroup per
// output element (and per piece of its row, where few outputs have long rows). Threads stride over R,
// then a shared-memory tree combines their partials. Sum, mean and max may take a leading reduced axis
// too, [LEAD, OUTER, R, INNER] reduced over LEAD and R: a per-channel sum over images and pixels reads
// the NCHW tensor in place instead of a transposed copy of it. Wide INNER is read 32 columns a
// workgroup instead (reduce_kernels).
// Softmax and log-softmax are the same row walk, three passes (max, sum of exp, write).
#include <algorithm>

#include "codegen/families.hpp"
#include "codegen/matmul_common.hpp"

namespace mn::codegen {

namespace {

// The workgroup tree reduction of `red[]`, for a combining expression over a and b: of the whole workgroup, or with
// `span` of each of its runs of that many invocations (lane t of its run).
std::string tree(const std::string& combine, const std::string& span = "WG", const std::string& t = "lid") {
    return "    barrier();\n"
           "    for (uint s = " + span + " / 2u; s > 0u; s >>= 1u) {\n"
           "        if (" + t + " < s) { float a = red[lid]; float b = red[lid + s]; red[lid] = " + combine + "; }\n"
           "        barrier();\n"
           "    }\n";
}

const char* const kNegInf = "uintBitsToFloat(0xff800000u)";

uint32_t pow2_at_most(uint32_t v) {
    uint32_t p = 1;
    while (p * 2 <= v) p *= 2;
    return p;
}

// The column and row pieces aim at about this many workgroups in all (an H200 holds ~1000 at 256 threads).
constexpr int64_t kWorkgroups = 1024;

// `rows` cut into pieces for about kWorkgroups workgroups, `groups` of them per piece, each piece at least
// `min_piece` rows: a piece's rows and how many pieces there are (none empty; one where the rows are few).
struct Pieces {
    int64_t rows, count;
};
Pieces cut_rows(int64_t rows, int64_t groups, int64_t min_piece) {
    if (rows < 2 * min_piece) return {rows, 1};
    const int64_t wanted = std::max<int64_t>(1, std::min((kWorkgroups + groups - 1) / groups, rows / min_piece));
    const int64_t piece = (rows + wanted - 1) / wanted;
    return {piece, (rows + piece - 1) / piece};
}

// Where there are several pieces: their f32 partials of `outputs` elements, and the split sum that adds them in
// piece order into the output, or where the last piece of each of `blocks` sums them (last_piece_sums), its counters.
void add_pieces(Reduction& out, DType out_dtype, int64_t outputs, const Pieces& pieces, const Launch& launch,
                bool last_piece_sums, int64_t blocks) {
    if (pieces.count == 1) return;
    out.partial_elements = pieces.count * outputs;
    if (last_piece_sums) {
        out.tile_counters = blocks;
    } else {
        out.sum = matmul_detail::split_sum_kernel(out_dtype, outputs, static_cast<uint32_t>(pieces.count), launch.max_groups);
    }
}

// The bindings of a kernel of pieces: the input, then the pieces (`part`), and where its last piece of an output sums
// them, the counters and the output (`y`); else the pieces are `y`.
std::vector<Binding> piece_bindings(DType in_dtype, DType out_dtype, bool several, bool last_piece_sums) {
    if (!several) return {{"x", in_dtype}, {"y", out_dtype, true}};
    if (!last_piece_sums) return {{"x", in_dtype}, {"y", DType::F32, true}};
    return {{"x", in_dtype}, {"part", DType::F32, true, true}, {"cnt", DType::I32, true}, {"y", out_dtype, true}};
}

// After a piece's store of output `at` (`part.d[p * OUTPUTS + at]`, by invocation `lid`): the last piece's
// workgroup adds the output's pieces in piece order, as split_sum_kernel does, and stores it.
std::string last_piece_sum(const std::string& block, const std::string& lid, const std::string& at, DType out_dtype) {
    return "    if (last_piece(" + block + ", PIECES) && " + lid + ") {\n"
           "        float s = 0.0;\n"
           "        for (uint q = 0u; q < PIECES; ++q) s += part.d[q * OUTER * INNER + " + at + "];\n"
           "        y.d[" + at + "] = " + storage_type(out_dtype) + "(s);\n"
           "    }\n";
}

// One workgroup per output element and piece of its row: threads stride over the piece, then a
// shared-memory tree combines their partials. Several pieces (sum and mean) write each piece's f32
// partial sum, [piece][outer * inner], for split_sum_kernel to add. Rows shorter than the workgroup (one piece)
// take TPO threads each, the largest power of two not above their length, WG / TPO rows a workgroup: ResNet-50's
// global average pool, 8192 rows of 49, took 13.6 us on the H100 as 8192 workgroups of 256 threads.
KernelSource row_reduce_kernel(ReduceMode mode, DType in_dtype, DType out_dtype, int64_t outer, int64_t r, int64_t inner,
                               const Launch& launch, int64_t lead, const Pieces& cut, bool last_piece_sums,
                               const Epilogue* prologue) {
    static const char* const kLabels[] = {"sum", "mean", "max", "softmax", "log_softmax"};
    const bool rows_only = mode == ReduceMode::Softmax || mode == ReduceMode::LogSoftmax;
    if (rows_only && lead != 1) throw Error("codegen: softmax reduces one axis, not a leading one too");
    const int64_t piece = cut.rows, pieces = cut.count;
    KernelSource k;
    k.label = kLabels[static_cast<int>(mode)];
    if (pieces > 1) k.label += "_pieces";
    k.iface.local_size = pow2_at_most(launch.local_size);
    const uint32_t row_length = checked_u32(lead * r, "reduction size");
    const uint32_t threads = pieces > 1 ? k.iface.local_size : std::min(k.iface.local_size, pow2_at_most(row_length));
    k.iface.spec_constants = {"LEAD", "OUTER", "R", "INNER", "PIECE", "PIECES", "TPO"};
    k.spec_values = {checked_u32(lead, "reduction size"), checked_u32(outer, "reduction size"),
                     checked_u32(r, "reduction size"), checked_u32(inner, "reduction size"),
                     checked_u32(piece, "reduction size"), checked_u32(pieces, "reduction size"), threads};
    checked_u32(lead * outer * r * inner, "reduction size");
    const bool summed_here = pieces > 1 && last_piece_sums;
    const DType result_dtype = pieces > 1 ? DType::F32 : out_dtype;
    k.iface.bindings = piece_bindings(in_dtype, out_dtype, pieces > 1, last_piece_sums);
    const std::string input = input_glsl(k, prologue);
    const std::string st = storage_type(result_dtype);

    // Invocation t of the TPO that reduce output g (all of them reach every barrier: a row past the last computes
    // nothing, stores nothing); red[r0] ends holding the row's value.
    std::string body =
        "shared float red[WG];\n"
        "void main() {\n"
        "    uint lid = gl_LocalInvocationID.x, t = lid % TPO, r0 = lid - t;\n"
        "    uint g = mn_group_id() * (WG / TPO) + lid / TPO;\n"
        "    bool row = g < PIECES * OUTER * INNER;\n"
        "    if (TPO == WG && !row) return;  // the whole workgroup: a grid's spare one (and the counters untouched)\n"
        "    uint p = g / (OUTER * INNER);\n"
        "    g %= OUTER * INNER;\n"
        "    uint base = (g / INNER) * R * INNER + g % INNER;\n"
        "    uint j1 = row ? min(LEAD * R, (p + 1u) * PIECE) : 0u;\n";
    // Element j of the LEAD * R reduced ones; LEAD is a constant, so with one leading slice this folds to
    // the row walk base + j * INNER.
    const std::string load = "X_AT(base + (LEAD == 1u ? j * INNER : (j / R) * (OUTER * R * INNER) + (j % R) * INNER))";
    const std::string loop = "    for (uint j = p * PIECE + t; j < j1; j += TPO) ";
    const std::string rows_tree_sum = tree("a + b", "TPO", "t"), rows_tree_max = tree("max(a, b)", "TPO", "t");
    if (mode == ReduceMode::Sum || mode == ReduceMode::Mean) {
        body += "    float acc = 0.0;\n" + loop + "acc += " + load + ";\n    red[lid] = acc;\n" + rows_tree_sum +
                "    if (row && t == 0u) " + (summed_here ? "part" : "y") + ".d[p * OUTER * INNER + g] = " + st +
                "(red[r0]" + (mode == ReduceMode::Mean ? " / float(LEAD * R)" : "") + ");\n" +
                (summed_here ? last_piece_sum("g", "lid == 0u", "g", out_dtype) : "") + "}\n";
    } else if (pieces > 1) {
        throw Error("codegen: only a sum or a mean is reduced in pieces");
    } else if (mode == ReduceMode::Max) {
        body += std::string("    float acc = ") + kNegInf + ";\n" + loop + "acc = max(acc, " + load +
                ");\n    red[lid] = acc;\n" + rows_tree_max + "    if (row && t == 0u) y.d[g] = " + st +
                "(red[r0]);\n}\n";
    } else {
        body += std::string("    float m = ") + kNegInf + ";\n" + loop + "m = max(m, " + load + ");\n" +
                "    red[lid] = m;\n" + rows_tree_max +
                "    m = red[r0];\n"
                "    barrier();\n"
                "    float s = 0.0;\n" + loop + "s += exp(" + load + " - m);\n" +
                "    red[lid] = s;\n" + rows_tree_sum + "    s = red[r0];\n";
        if (mode == ReduceMode::Softmax) {
            body += "    float inv = 1.0 / s;\n" + loop + "y.d[base + j * INNER] = " + st + "(exp(" + load +
                    " - m) * inv);\n}\n";
        } else {
            body += "    float lse = m + log(s);\n" + loop + "y.d[base + j * INNER] = " + st + "(" + load +
                    " - lse);\n}\n";
        }
    }
    k.glsl = glsl_preamble(k.iface) + kFlatGroupId + input + (summed_here ? kLastPieceGlsl : "") + body;
    const uint64_t rows_per_group = k.iface.local_size / threads;
    k.groups = grid_for((static_cast<uint64_t>(pieces * outer * inner) + rows_per_group - 1) / rows_per_group,
                        launch.max_groups);
    return k;
}

constexpr int64_t kColumns = 32;   // the column walk's columns a workgroup: a warp's row segment is 128 contiguous bytes
constexpr int64_t kMinPiece = 64;  // rows per piece at least: fewer, and the second pass costs more than it saves

// The pieces the column walk cuts a sum or mean over lead and r into where inner is wide; none where it does not apply.
std::optional<Pieces> column_walk(int64_t outer, int64_t r, int64_t inner, const Launch& launch, int64_t lead) {
    const int64_t rows = lead * r;
    if (inner < kColumns || rows < kMinPiece || pow2_at_most(launch.local_size) < 2 * kColumns) return std::nullopt;
    return cut_rows(rows, outer * ((inner + kColumns - 1) / kColumns), kMinPiece);
}

// Sum or mean over lead and r where inner is wide: 32 columns a workgroup, the rows in pieces
// (families.hpp); nothing where that walk does not apply.
// With members > 1 (a sum in pieces, no prologue: column_sums_batch), that many of one shape, each its input x<m>
// into its pieces y<m>: member m runs the m-th run of the workgroups one would (`member`, which X_AT reads through).
std::optional<Reduction> column_reduce_kernels(ReduceMode mode, DType in_dtype, DType out_dtype, int64_t outer,
                                               int64_t r, int64_t inner, const Launch& launch, int64_t lead,
                                               bool last_piece_sums, const Epilogue* prologue, uint32_t members = 1) {
    const uint32_t wg = pow2_at_most(launch.local_size);
    if (mode != ReduceMode::Sum && mode != ReduceMode::Mean) return std::nullopt;
    const std::optional<Pieces> walk = column_walk(outer, r, inner, launch, lead);
    if (!walk) return std::nullopt;
    const int64_t rows = lead * r, blocks = outer * ((inner + kColumns - 1) / kColumns);
    const Pieces cut = *walk;
    const int64_t piece = cut.rows, splits = cut.count;
    Reduction out;
    KernelSource& k = out.partial;
    k.label = mode == ReduceMode::Sum ? "sum_columns" : "mean_columns";
    k.iface.local_size = wg;
    k.iface.spec_constants = {"LEAD", "OUTER", "R", "INNER", "PIECE", "PIECES"};
    k.spec_values = {checked_u32(lead, "reduction size"), checked_u32(outer, "reduction size"),
                     checked_u32(r, "reduction size"), checked_u32(inner, "reduction size"),
                     checked_u32(piece, "reduction size"), checked_u32(splits, "reduction size")};
    checked_u32(rows * outer * inner, "reduction size");
    const bool summed_here = splits > 1 && last_piece_sums;
    const DType partial_dtype = splits > 1 ? DType::F32 : out_dtype;
    k.iface.bindings = piece_bindings(in_dtype, out_dtype, splits > 1, last_piece_sums);
    std::string input = input_glsl(k, prologue), store = std::string("#define Y_PUT(i, v) ") + (summed_here ? "part" : "y") + ".d[i] = (v)\n";
    std::string member = "    if (g >= PIECES * OUTER * CB) return;\n";
    if (members > 1) {
        if (summed_here || prologue) throw Error("codegen: only sums in pieces without a prologue are batched");
        if (splits == 1) return std::nullopt;  // in one piece: no batch of pieces
        k.label += " x " + std::to_string(members);
        k.iface.bindings.clear();
        std::string loads, stores;
        for (const char* name : {"x", "y"}) {
            for (uint32_t m = 0; m < members; ++m) {
                const std::string b = name + std::to_string(m);
                const std::string when = (m > 0 ? "else " : "") + (m + 1 < members ? "if (member == " + std::to_string(m) + "u) " : std::string());
                const bool y = *name == 'y';
                k.iface.bindings.push_back({b, y ? DType::F32 : in_dtype, y});
                (y ? stores : loads) += "    " + when + (y ? b + ".d[i] = v;\n" : "return float(" + b + ".d[i]);\n");
            }
        }
        input = "uint member;\nfloat x_at(uint i) {\n" + loads + "}\nvoid y_put(uint i, float v) {\n" + stores + "}\n"
                "#define X_AT(i) x_at(i)\n";
        store = "#define Y_PUT(i, v) y_put(i, v)\n";
        member = "    member = g / (PIECES * OUTER * CB);\n    if (member >= " + std::to_string(members) + "u) return;\n"
                 "    g %= PIECES * OUTER * CB;\n";
    }
    // Row j of the LEAD * R reduced ones, in column c (see reduce_kernel).
    k.glsl = glsl_preamble(k.iface) + kFlatGroupId + input + store + (summed_here ? kLastPieceGlsl : "") + R"(
const uint CW = 32u, RL = WG / CW, CB = (INNER + CW - 1u) / CW;  // columns, row lanes, column blocks
shared float red[WG];
float at(uint base, uint j) {
    return X_AT(base + (LEAD == 1u ? j * INNER : (j / R) * (OUTER * R * INNER) + (j % R) * INNER));
}
void main() {
    uint g = mn_group_id();
)" + member + R"(    uint lid = gl_LocalInvocationID.x, lane = lid / CW;
    uint p = g / (OUTER * CB), o = (g % (OUTER * CB)) / CB, c = (g % CB) * CW + lid % CW;
    uint base = o * R * INNER + c, j1 = min(LEAD * R, (p + 1u) * PIECE);
    vec4 acc = vec4(0.0);  // four rows in flight per thread
    if (c < INNER) {
        uint j = p * PIECE + lane;
        for (; j + 3u * RL < j1; j += 4u * RL) acc += vec4(at(base, j), at(base, j + RL), at(base, j + 2u * RL), at(base, j + 3u * RL));
        for (; j < j1; j += RL) acc.x += at(base, j);
    }
    red[lid] = (acc.x + acc.y) + (acc.z + acc.w);
    barrier();
    for (uint s = RL / 2u; s > 0u; s >>= 1u) {
        if (lane < s) red[lid] += red[lid + s * CW];
        barrier();
    }
)" + "    if (lane == 0u && c < INNER) Y_PUT(p * OUTER * INNER + o * INNER + c, " + storage_type(partial_dtype) +
             "(red[lid]" + (mode == ReduceMode::Mean ? " / float(LEAD * R)" : "") + "));\n" +
             (summed_here ? last_piece_sum("o * CB + g % CB", "lane == 0u && c < INNER", "o * INNER + c", out_dtype) : "") +
             "}\n";
    k.groups = grid_for(static_cast<uint64_t>(members * splits * blocks), launch.max_groups);
    add_pieces(out, out_dtype, outer * inner, cut, launch, last_piece_sums, blocks);
    return out;
}

}  // namespace

int64_t column_sum_pieces(int64_t outer, int64_t r, int64_t inner, const Launch& launch, int64_t lead) {
    const std::optional<Pieces> walk = column_walk(outer, r, inner, launch, lead);
    return walk ? walk->count : 0;
}

std::optional<Reduction> column_sums_batch(DType in_dtype, int64_t outer, int64_t r, int64_t inner, const Launch& launch,
                                           int64_t lead, uint32_t members) {
    auto sums = column_reduce_kernels(ReduceMode::Sum, in_dtype, DType::F32, outer, r, inner, launch, lead, false, nullptr,
                                      members);
    if (!sums || !sums->sum) return std::nullopt;  // not the column walk, or in one piece
    sums->sum.reset();
    return sums;
}

Reduction reduce_kernels(ReduceMode mode, DType in_dtype, DType out_dtype, int64_t outer, int64_t r, int64_t inner,
                         const Launch& launch, int64_t lead, bool last_piece_sums, const Epilogue* prologue) {
    if (auto columns = column_reduce_kernels(mode, in_dtype, out_dtype, outer, r, inner, launch, lead, last_piece_sums, prologue)) {
        return *columns;
    }
    // A row cut into pieces of at least this many elements (16 a thread at 256 threads): shorter rows gain less
    // than the second kernel and its barrier cost. Whisper-tiny's loss, a mean over 1500 x 384, took 0.11 ms
    // on the H200 in one workgroup.
    constexpr int64_t kMinRowPiece = 4096;
    const int64_t rows = lead * r, outputs = outer * inner;
    const Pieces cut = mode == ReduceMode::Sum || mode == ReduceMode::Mean ? cut_rows(rows, outputs, kMinRowPiece)
                                                                          : Pieces{rows, 1};
    Reduction out;
    out.partial = row_reduce_kernel(mode, in_dtype, out_dtype, outer, r, inner, launch, lead, cut, last_piece_sums, prologue);
    add_pieces(out, out_dtype, outputs, cut, launch, last_piece_sums, outputs);
    return out;
}

namespace {

// The ignore index as the bits of an i32, compared with uint(label) in the shaders.
uint32_t ignore_bits(int64_t ignore_index) { return static_cast<uint32_t>(static_cast<int32_t>(ignore_index)); }

// The head of the cross-entropy kernels: one workgroup per row leaves the row's max in m
// and its sum of exp(x - m) in s, and whether its label is ignored or out of range. `functions` go before main.
KernelSource cross_entropy_kernel(const char* label, DType dtype, int64_t rows, int64_t classes, int64_t ignore_index,
                                  const Launch& launch, std::vector<Binding> bindings, const std::string& functions,
                                  const std::string& tail) {
    KernelSource k;
    k.label = label;
    k.iface.local_size = pow2_at_most(launch.local_size);
    k.iface.spec_constants = {"ROWS", "C", "IGNORE"};
    k.spec_values = {checked_u32(rows, "rows"), checked_u32(classes, "classes"), ignore_bits(ignore_index)};
    checked_u32(rows * classes, "logits size");
    k.iface.bindings = std::move(bindings);
    const std::string load = "float(logits.d[base + j])";
    const std::string loop = "    for (uint j = lid; j < C; j += WG) ";
    k.glsl = glsl_preamble(k.iface) + kFlatGroupId + functions +
             "shared float red[WG];\n"
             "void main() {\n"
             "    uint g = mn_group_id();\n"
             "    if (g >= ROWS) return;\n"
             "    uint lid = gl_LocalInvocationID.x;\n"
             "    uint base = g * C;\n"
             "    int label = labels.d[g];\n"
             "    bool ignored = uint(label) == IGNORE;\n"
             "    bool bad = !ignored && (label < 0 || uint(label) >= C);\n"
             "    float m = " + kNegInf + ";\n" + loop + "m = max(m, " + load + ");\n" +
             "    red[lid] = m;\n" + tree("max(a, b)") +
             "    m = red[0];\n"
             "    barrier();\n"
             "    float s = 0.0;\n" + loop + "s += exp(" + load + " - m);\n" +
             "    red[lid] = s;\n" + tree("a + b") + "    s = red[0];\n" + tail + "}\n";
    k.groups = grid_for(static_cast<uint64_t>(rows), launch.max_groups);
    return k;
}

// `what` summed over the rows j by the whole workgroup (lid, shared red[WG]) into float `name`, after a barrier for
// red's last reading. Every invocation runs it, and gets the same bits in every workgroup.
std::string rows_summed(const std::string& name, const std::string& what) {
    return "    barrier();\n"
           "    float " + name + " = 0.0;\n"
           "    for (uint j = lid; j < ROWS; j += WG) " + name + " += " + what + ";\n"
           "    red[lid] = " + name + ";\n" + tree("a + b") + "    " + name + " = red[0];\n";
}

// The mean's denominator: the rows whose label is not the ignore index.
const char* const kCountedRow = "(uint(labels.d[j]) == IGNORE ? 0.0 : 1.0)";

}  // namespace

KernelSource cross_entropy_kernel(DType dtype, int64_t rows, int64_t classes, int64_t ignore_index, const Launch& launch) {
    return cross_entropy_kernel(
        "cross_entropy", dtype, rows, classes, ignore_index, launch,
        {{"logits", dtype}, {"labels", DType::I32}, {"row_loss", DType::F32, true, true}, {"cnt", DType::I32, true},
         {"loss", dtype, true}},
        kLastPieceGlsl,
        "    if (lid == 0u) row_loss.d[g] = ignored ? 0.0 : bad ? uintBitsToFloat(0x7fc00000u)\n"
        "                                     : m + log(s) - float(logits.d[base + uint(label)]);\n"
        "    if (!last_piece(0u, ROWS)) return;\n" +
            rows_summed("count", kCountedRow) + rows_summed("total", "row_loss.d[j]") +
            "    if (lid == 0u) loss.d[0] = " + storage_type(dtype) + "(total / count);\n");
}

KernelSource cross_entropy_count_kernel(int64_t rows, int64_t ignore_index, const Launch& launch) {
    KernelSource k;
    k.label = "cross_entropy_count";
    k.iface.local_size = pow2_at_most(launch.local_size);
    k.iface.spec_constants = {"ROWS", "IGNORE"};
    k.spec_values = {checked_u32(rows, "rows"), ignore_bits(ignore_index)};
    k.iface.bindings = {{"labels", DType::I32}, {"count", DType::F32, true}};
    k.glsl = glsl_preamble(k.iface) +
             "shared float red[WG];\n"
             "void main() {\n"
             "    uint lid = gl_LocalInvocationID.x;\n" +
             rows_summed("n", kCountedRow) +
             "    if (lid == 0u) count.d[0] = n;\n"
             "}\n";
    k.groups = {1, 1, 1};
    return k;
}

KernelSource cross_entropy_grad_kernel(DType dtype, int64_t rows, int64_t classes, int64_t ignore_index,
                                       const Launch& launch) {
    const std::string st = storage_type(dtype);
    return cross_entropy_kernel(
        "cross_entropy_grad", dtype, rows, classes, ignore_index, launch,
        {{"logits", dtype}, {"labels", DType::I32}, {"upstream", dtype}, {"count", DType::F32}, {"grad", dtype, true}}, "",
            "    float scale = float(upstream.d[0]) / count.d[0];\n"
            "    float inv = 1.0 / s;\n"
            "    for (uint j = lid; j < C; j += WG) {\n"
            "        float p = exp(float(logits.d[base + j]) - m) * inv - (int(j) == label ? 1.0 : 0.0);\n"
            "        grad.d[base + j] = " + st + "(ignored ? 0.0 : bad ? uintBitsToFloat(0x7fc00000u) : p * scale);\n"
            "    }\n");
}

}  // namespace mn::codegen
