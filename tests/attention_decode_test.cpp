// Flash-decoding (codegen/attention_decode.cpp): a forward with few query rows over many keys splits
// the keys across workgroups and merges the chunks. Against the float64 reference at the issue's
// shapes (key lengths 1 to 4,100, head dims 32 to 128, GQA ratios 1, 3 and 5, full, causal and
// windowed masks, one query row or a few, decode steps inside a longer cache); that the split is
// taken where the device would be underfilled and that it agrees with the unsplit kernels; that it
// is deterministic; and odd tiles and chunk counts.
#include <cmath>
#include <cstring>
#include <memory>

#include "compiler/program_kernels.hpp"
#include "gpu_check.hpp"
#include "meganeura/autodiff.hpp"
#include "temp_dir.hpp"

namespace mn::test {
namespace {

struct Case {
    std::string name;
    int64_t q_heads, kv_heads, q_len, kv_len, dim;
    bool causal = false;
    int64_t window = 0;
    std::optional<int32_t> start = std::nullopt;  // a decode step at this position of a longer cache
    int64_t batch = 1;
};

// out and the row logsumexp (the forward's second output, which the backward reads), with feeds.
struct Problem {
    std::unique_ptr<Graph> g = std::make_unique<Graph>();
    ref::Feeds feeds;
};

// Without feeds, for the kernels' choices only.
std::unique_ptr<Graph> graph_of(const Case& c) {
    auto built = std::make_unique<Graph>();
    Graph& g = *built;
    const Tensor q = g.input("q", {c.batch, c.q_heads, c.q_len, c.dim});
    const Tensor k = g.input("k", {c.batch, c.kv_heads, c.kv_len, c.dim});
    const Tensor v = g.input("v", {c.batch, c.kv_heads, c.kv_len, c.dim});
    AttentionOptions o{.causal = c.causal, .window = c.window};
    if (c.start) o.query_start = g.input("start", {}, DType::I32);
    const Tensor out = g.attention(q, k, v, o);
    const Node n = g.node(out);
    g.output("out", out);
    g.output("lse", g.emit({.op = Op::AttentionLse, .inputs = n.inputs, .shape = {c.batch, c.q_heads, c.q_len},
                            .dtype = DType::F32, .ints = n.ints, .data = n.data}));
    return built;
}

Problem problem(const Case& c) {
    Problem p{graph_of(c)};
    p.feeds = random_feeds(*p.g, 17);
    if (c.start) p.feeds["start"] = {{}, {static_cast<double>(*c.start)}};
    return p;
}

// Each key length with every head dim; the GQA ratios, masks and query lengths spread over them.
const std::vector<Case> kCases = {
    {"k1_d32_g1_full", 1, 1, 1, 1, 32},
    {"k1_d128_g5_causal", 5, 1, 1, 1, 128, true},
    {"k7_d64_g3_causal_q3", 6, 2, 3, 7, 64, true},
    {"k7_d80_g1_window3", 2, 2, 1, 7, 80, true, 3},
    {"k33_d128_g3_full_q2", 3, 1, 2, 33, 128},
    {"k33_d32_g5_window9_q3", 10, 2, 3, 33, 32, true, 9},
    {"k1500_d64_g3_causal", 9, 3, 1, 1500, 64, true},  // SmolLM2's heads
    {"k1500_d80_g5_full_q2", 5, 1, 2, 1500, 80},
    {"k1500_d32_g1_window700_q3_batch2", 2, 2, 3, 1500, 32, true, 700, std::nullopt, 2},
    {"k1500_d128_g3_at_1000", 3, 1, 1, 1500, 128, true, 0, 1000},
    {"k4100_d64_g3_at_4099", 9, 3, 1, 4100, 64, true, 0, 4099},
    {"k4100_d128_g1_full", 2, 2, 1, 4100, 128},
    {"k4100_d32_g5_window1000_q3", 5, 1, 3, 4100, 32, true, 1000},
    {"k4100_d80_g3_q2_at_2050", 3, 1, 2, 4100, 80, true, 0, 2050},
    // A window shorter than the cache's chunks: most chunks are empty.
    {"k4100_d64_g5_window200_at_3000", 5, 1, 1, 4100, 64, true, 200, 3000},
};

const auto case_name = [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; };

class AttentionDecode : public GpuTest, public ::testing::WithParamInterface<Case> {};

TEST_P(AttentionDecode, MatchesReference) {
    const Problem p = problem(GetParam());
    expect_matches_reference(*p.g, p.feeds);
}

INSTANTIATE_TEST_SUITE_P(Attention, AttentionDecode, ::testing::ValuesIn(kCases), case_name);

using AttentionDecodeGpu = GpuTest;

// The forward's kernels as this device gets them.
std::vector<codegen::KernelSource> forward_kernels(const Graph& g) {
    std::vector<codegen::KernelSource> out;
    for (codegen::KernelSource& k : compiler::program_kernels(g, device().context()->caps(), {}))
        if (k.label.rfind("attention", 0) == 0) out.push_back(std::move(k));
    return out;
}

// out and lse of one run, after compiling with the environment as it is.
std::vector<float> run(const Problem& p) {
    Session s = compile(*p.g, device(), {.poison_outputs = true});
    set_feeds(s, *p.g, p.feeds);
    s.run();
    std::vector<float> got = s.get("out"), lse = s.get("lse");
    got.insert(got.end(), lse.begin(), lse.end());
    return got;
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        den += double(b[i]) * b[i];
    }
    return std::sqrt(num / den);
}

// The split problem's out and lse against the kernel that keeps the keys whole (MEGANEURA_ATTENTION_SPLITS=1,
// whose choice begins with `whole`, the kernel and its rows, and says the keys were not split), and against the
// reference.
void expect_split_agrees_with_whole(const Problem& p, const std::string& whole) {
    const std::vector<float> got = run(p);
    const ScopedEnv one_chunk("MEGANEURA_ATTENTION_SPLITS", "1");
    const std::vector<codegen::KernelSource> unsplit = forward_kernels(*p.g);
    ASSERT_EQ(unsplit.size(), 1u);
    EXPECT_TRUE(unsplit[0].choice.starts_with(whole + ",") || unsplit[0].choice.starts_with(whole + ";")) << unsplit[0].choice;
    EXPECT_TRUE(unsplit[0].choice.ends_with("; keys not split: forced: MEGANEURA_ATTENTION_SPLITS=1")) << unsplit[0].choice;
    EXPECT_LE(relative_difference(got, run(p)), 4e-6);
    expect_matches_reference(*p.g, p.feeds);
}

// SmolLM2's decode step at 1,500 and 4,096 keys is a few workgroups unsplit, so it splits on every
// device (this one's compute units, or 32 assumed): a chunk kernel, whose choice says why, then the
// combine. The unsplit kernel (MEGANEURA_ATTENTION_SPLITS=1; row-wise at these lengths on every
// device, lavapipe's loop limit included) gives the same values to within f32 rounding of sums over
// that many keys: each output is a sum of up to 4,096 products, so 2^-24 * sqrt(4096) = 4e-6
// relative, and both are held to the reference's 1e-5. Where the device shuffles in subgroups of a size it can require,
// the chunks are the key-lanes kernel's (lavapipe's 8 lanes a key take 2 quads each at head dim 64). With
// MEGANEURA_SPLIT_SUM=attention the chunk kernel's last workgroup of each kv head merges the chunks itself (dozens of
// them), and no combine runs.
TEST_F(AttentionDecodeGpu, SplitIsTakenAndAgreesWithTheUnsplitKernel) {
    const rt::DeviceCaps& caps = device().context()->caps();
    const bool key_lanes = caps.subgroup_shuffle && caps.subgroup_size_control;  // codegen::decode_lanes
    for (const char* where : {"dispatch", "attention"}) {
        const ScopedEnv merge("MEGANEURA_SPLIT_SUM", where);
        const bool combine = std::string(where) == "dispatch";
        for (const Case& c : {kCases[6], Case{"k4096_d64_g3_at_4095", 9, 3, 1, 4096, 64, true, 0, 4095}}) {
            SCOPED_TRACE(c.name + std::string(", ") + where);
            const Problem p = problem(c);
            const std::vector<codegen::KernelSource> split = forward_kernels(*p.g);
            ASSERT_EQ(split.size(), combine ? 2u : 1u);
            EXPECT_EQ(split[0].label, "attention_chunks");
            EXPECT_NE(split[0].choice.find("(flash-decoding): 3 workgroups would underfill"), std::string::npos) << split[0].choice;
            if (key_lanes) EXPECT_TRUE(split[0].choice.starts_with("key lanes, 3 rows per kv head, ")) << split[0].choice;
            if (combine) EXPECT_EQ(split[1].label, "attention_combine");
            expect_split_agrees_with_whole(p, "row-wise: 3 rows per kv head");
        }
    }
}

// A prefill of few heads leaves the device idle too (Whisper-tiny's encoder: 6 heads of 1500 rows
// on 132 compute units), so the blocked kernel splits its keys as well, here 1500 rows of one head
// (this device's compute units, or 32 assumed): its chunks, merged by the last chunk of each block of rows
// (AttentionTiles::last_chunk_merges), or with MEGANEURA_SPLIT_SUM=dispatch by the combine with a thread per
// output. Against the unsplit kernel and the reference as above; causal, so that the chunks of the first rows
// are empty.
TEST_F(AttentionDecodeGpu, PrefillOfFewHeadsIsSplitAndAgreesWithTheUnsplitKernel) {
    for (const char* where : {"product", "dispatch"}) {
        const ScopedEnv merge("MEGANEURA_SPLIT_SUM", where);
        const bool combine = std::string(where) == "dispatch";
        for (const Case& c : {Case{"q1500_d64_full", 1, 1, 1500, 1500, 64}, Case{"q1500_d64_causal", 1, 1, 1500, 1500, 64, true}}) {
            SCOPED_TRACE(c.name + std::string(", ") + where);
            const Problem p = problem(c);
            const std::vector<codegen::KernelSource> split = forward_kernels(*p.g);
            ASSERT_EQ(split.size(), combine ? 2u : 1u);
            EXPECT_EQ(split[0].label, "attention_chunks");
            EXPECT_TRUE(split[0].choice.starts_with("blocked: 1500 rows per kv head, ")) << split[0].choice;
            EXPECT_NE(split[0].choice.find(", keys in "), std::string::npos) << split[0].choice;
            EXPECT_NE(split[0].choice.find("workgroups would underfill"), std::string::npos) << split[0].choice;
            if (combine) EXPECT_NE(split[1].choice.find("a thread per output"), std::string::npos) << split[1].choice;
            expect_split_agrees_with_whole(p, "blocked: 1500 rows per kv head");
        }
    }
}

// A few keys stay whole (the combine's dispatch would cost more than it saves), and so do enough
// workgroups to fill the device: 256 decode streams of 3 kv heads (the H200 has 132 compute units).
TEST_F(AttentionDecodeGpu, ShortSweepsAndFullGridsAreNotSplit) {
    const std::vector<codegen::KernelSource> short_sweep = forward_kernels(*graph_of(kCases[4]));
    ASSERT_EQ(short_sweep.size(), 1u);
    EXPECT_NE(short_sweep[0].choice.find("keys not split: 33 keys are fewer than 256"), std::string::npos)
        << short_sweep[0].choice;
    Case batched = kCases[6];
    batched.batch = 256;
    const std::vector<codegen::KernelSource> full = forward_kernels(*graph_of(batched));
    ASSERT_EQ(full.size(), 1u);
    EXPECT_NE(full[0].choice.find("keys not split: 768 workgroups fill"), std::string::npos) << full[0].choice;
}

// The combine adds the chunks in a fixed order (no atomics): two runs give the same bits.
TEST_F(AttentionDecodeGpu, SplitIsDeterministic) {
    const Problem p = problem(kCases[10]);
    const std::vector<float> a = run(p), b = run(p);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

// Training through a split forward: the backward kernels read the combine's logsumexp.
TEST_F(AttentionDecodeGpu, GradientsThroughTheSplitForwardMatchReference) {
    Graph g;
    const Tensor q = g.parameter("q", {1, 6, 1, 64}), k = g.parameter("k", {1, 2, 1500, 64}),
                 v = g.parameter("v", {1, 2, 1500, 64});
    const Tensor out = g.attention(q, k, v, {.causal = true});
    const std::vector<Tensor> grads = grad(g.sum(out * g.input("w", out.shape())), {q, k, v});
    g.output("out", out);
    g.output("dq", grads[0]);
    g.output("dk", grads[1]);
    g.output("dv", grads[2]);
    ASSERT_EQ(forward_kernels(g).front().label, "attention_chunks");
    expect_matches_reference(g, random_feeds(g, 23));
}

// Odd tiles (3 threads per row, which divide no head dim here; 4- and 6-key tiles, so that 7 and 33
// keys split, the last chunk a partial tile) with chunk counts forced where they would not be chosen,
// and the largest tiles with the chunks chosen (the short sweeps then stay whole).
class AttentionDecodeShapes : public GpuTest, public ::testing::WithParamInterface<std::pair<std::string, std::string>> {};

TEST_P(AttentionDecodeShapes, MatchReference) {
    const ScopedEnv tiles("MEGANEURA_ATTENTION_TILES", GetParam().first);
    const ScopedEnv splits("MEGANEURA_ATTENTION_SPLITS", GetParam().second);
    for (const Case& c : {kCases[2], kCases[5], kCases[8], kCases[14]}) {
        SCOPED_TRACE(c.name);
        const Problem p = problem(c);
        const bool split = !GetParam().second.empty() || c.kv_len >= 256;
        EXPECT_EQ(forward_kernels(*p.g).front().label, split ? "attention_chunks" : "attention");
        expect_matches_reference(*p.g, p.feeds);
    }
}

INSTANTIATE_TEST_SUITE_P(Attention, AttentionDecodeShapes,
                         ::testing::Values(std::pair{"16,4,4,rowwise", "5"}, std::pair{"8,3,6", "2"},
                                           std::pair{"64,16,128", ""}),
                         [](const auto& info) {
                             std::string name = info.param.first + "_splits_" + (info.param.second.empty() ? "chosen" : info.param.second);
                             for (char& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                             return name;
                         });

}  // namespace
}  // namespace mn::test
