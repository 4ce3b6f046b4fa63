// Attention: the fused op against the float64 reference on the GPU, the reference against the
// composed formula it replaced (matmul + mask + softmax, kept here only as an oracle), the VJP by
// finite differences on the reference, and the GPU backward kernels against the reference's.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>

#include "codegen/device_fit.hpp"
#include "common/caps_profiles.hpp"
#include "compiler/program_kernels.hpp"
#include "gpu_check.hpp"
#include "error_of.hpp"
#include "temp_dir.hpp"
#include "meganeura/autodiff.hpp"
#include "schedule/schedule.hpp"

namespace mn::test {
namespace {

struct Case {
    std::string name;
    int64_t batch, q_heads, kv_heads, q_len, kv_len, dim;
    bool causal = false;
    int64_t window = 0;
    std::optional<int32_t> start = std::nullopt;  // fed as the i32 input "start"
    double scale = 0;
    double upstream = 1;  // the loss's weights times this: the magnitude of the gradient reaching out
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

// The graph's attention inputs; q, k, v are parameters so that grad() can reach them.
struct Built {
    std::unique_ptr<Graph> g = std::make_unique<Graph>();
    Tensor q, k, v;
    AttentionOptions options;
};

Built build(const Case& c) {
    Built b;
    Graph& g = *b.g;
    b.q = g.parameter("q", {c.batch, c.q_heads, c.q_len, c.dim});
    b.k = g.parameter("k", {c.batch, c.kv_heads, c.kv_len, c.dim});
    b.v = g.parameter("v", {c.batch, c.kv_heads, c.kv_len, c.dim});
    b.options = {.causal = c.causal, .scale = c.scale, .window = c.window};
    if (c.start) b.options.query_start = g.input("start", {}, DType::I32);
    return b;
}

ref::Feeds feeds_for(const Case& c, const Graph& g, uint64_t seed) {
    ref::Feeds feeds = random_feeds(g, seed);
    if (c.start) feeds["start"] = {{}, {static_cast<double>(*c.start)}};
    return feeds;
}

// The composition Graph::attention used to be: scores of the G query heads of a kv head stacked
// as rows, an additive -1e30 mask, softmax, @ v.
Tensor composed_attention(Graph& g, Tensor q, Tensor k, Tensor v, const AttentionOptions& o) {
    const Shape qs = q.shape(), ks = k.shape();
    const int64_t B = qs[0], Hkv = ks[1], Tq = qs[2], Tk = ks[2], D = qs[3], G = qs[1] / ks[1];
    const double scale = o.scale != 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(D));
    Tensor scores = g.matmul(g.reshape(q, {B, Hkv, G * Tq, D}), k, false, true) * scale;
    if (o.causal) {
        std::vector<double> key_minus_query;
        for (int64_t r = 0; r < G * Tq; ++r) {
            for (int64_t j = 0; j < Tk; ++j) key_minus_query.push_back(static_cast<double>(j - r % Tq));
        }
        const Tensor offset = g.constant(std::move(key_minus_query), {G * Tq, Tk});
        const Tensor start = o.query_start ? g.cast(*o.query_start, DType::F32) : g.scalar(static_cast<double>(Tk - Tq));
        Tensor hidden = g.greater(offset, start);
        if (o.window > 0) hidden = g.maximum(hidden, g.greater(start - static_cast<double>(o.window - 1), offset));
        scores = scores + hidden * -1e30;
    }
    return g.reshape(g.matmul(g.softmax(scores, -1), v), qs);
}

// Every row of these sees at least one key (the composition averages all values where the fused
// op yields zeros).
const std::vector<Case> kForwardCases = {
    {"full_cross_7_of_33_d32", 2, 2, 2, 7, 33, 32},
    {"causal_50_d64", 1, 3, 3, 50, 50, 64, true},
    {"causal_gqa_33_d80", 2, 6, 2, 33, 33, 80, true},
    {"causal_bottom_right_7_of_33_d128", 1, 2, 1, 7, 33, 128, true},
    {"window_7_gqa_50_d64", 1, 4, 2, 50, 50, 64, true, 7},
    {"decode_dynamic_start_gqa_d64", 2, 9, 3, 1, 50, 64, true, 0, 20},
    {"chunk_dynamic_start_window_d32", 1, 2, 2, 7, 33, 32, true, 5, 10},
    {"explicit_scale_odd_dim_d33", 1, 2, 1, 5, 9, 33, false, 0, std::nullopt, 0.3},
};

// Long sweeps, on the GPU only (the composed formula would materialize their scores).
const std::vector<Case> kLongCases = {
    {"decode_full_1500_d64", 1, 2, 1, 1, 1500, 64},
    {"self_full_1500_d64", 1, 1, 1, 1500, 1500, 64},
    // Lavapipe ends long loops silently (see codegen/attention.cpp): this sweep once lost its tail.
    {"decode_long_8000_d128", 1, 2, 2, 1, 8000, 128},
    {"decode_long_40000_d64", 1, 2, 1, 1, 40000, 64},
};

void expect_forward_matches_reference(const Case& c) {
    Built b = build(c);
    b.g->output("out", b.g->attention(b.q, b.k, b.v, b.options));
    expect_matches_reference(*b.g, feeds_for(c, *b.g, 7));
}

// Sweeps long enough that llvmpipe's loop limit (DeviceCaps::max_loop_iterations) cuts a kernel
// short (a decode step over 300,000 keys came out wrong by 2x in the row-wise kernel, 0.6 in the
// blocked one). A sweep over so many keys is split into chunks short enough (flash-decoding,
// codegen/attention_decode.cpp) on every device, so all match; on such a device a sweep kept whole
// (MEGANEURA_ATTENTION_SPLITS=1) too long even for the blocked kernels (whose loops run once per tile
// and per head-dim chunk) is refused with a clear error. Sums of 300,000 f32 terms carry about
// 2^-24 * sqrt(3e5) = 3e-5 relative error, so the bound is 1e-4.
TEST(AttentionVeryLong, SweepsPastTheLoopLimitMatchOrAreRefused) {
    for (const Case& c : {Case{"decode_300000_d64", 1, 2, 1, 1, 300000, 64},
                          Case{"prefill_16_of_300000_d16", 1, 1, 1, 16, 300000, 16},
                          Case{"prefill_16_of_300000_d64", 1, 1, 1, 16, 300000, 64}}) {
        SCOPED_TRACE(c.name);
        Built b = build(c);
        b.g->output("out", b.g->attention(b.q, b.k, b.v, b.options));
        expect_matches_reference(*b.g, feeds_for(c, *b.g, 7), 1e-4);
    }
    if (device().context()->caps().max_loop_iterations > 0) {
        const ScopedEnv whole("MEGANEURA_ATTENTION_SPLITS", "1");
        Built b = build(Case{"prefill_16_of_300000_d64", 1, 1, 1, 16, 300000, 64});
        b.g->output("out", b.g->attention(b.q, b.k, b.v, b.options));
        const std::string error = error_of([&] { compile(*b.g, device()); });
        EXPECT_NE(error.find("[attention] a sweep over 300000 rows (x1) at head dim 64 needs more loop iterations "
                             "than this device allows"),
                  std::string::npos) << error;
    }
    expect_no_validation_messages();
}

class AttentionForward : public GpuTest, public ::testing::WithParamInterface<Case> {};
class AttentionLongForward : public AttentionForward {};

TEST_P(AttentionForward, MatchesReference) { expect_forward_matches_reference(GetParam()); }
TEST_P(AttentionLongForward, MatchesReference) { expect_forward_matches_reference(GetParam()); }

// A model's merge of the heads (permute {0, 2, 1, 3}, then a reshape) is stored by the attention
// kernel itself (FusionPlan::heads_merged_into): no copy kernel, the same values. The cases take the
// row-wise and the blocked forward; forced into 3 key chunks, the split one and its combine.
TEST_P(AttentionForward, MergedHeadsAreStoredWithoutACopy) {
    const Case& c = GetParam();
    for (const char* splits : {"", "3"}) {
        SCOPED_TRACE(std::string("splits '") + splits + "'");
        const ScopedEnv forced("MEGANEURA_ATTENTION_SPLITS", splits);
        Built b = build(c);
        Graph& g = *b.g;
        const Tensor out = g.attention(b.q, b.k, b.v, b.options);
        g.output("merged", g.reshape(g.permute(out, {0, 2, 1, 3}), {c.batch, c.q_len, c.q_heads * c.dim}));
        const sched::Schedule s = sched::lower(g, {g.outputs().front().second}, sched::tune_for(device().context()->caps()));
        for (const sched::Step& step : s.steps) EXPECT_EQ(step.kernel.label.rfind("attention", 0), 0u) << step.kernel.label;
        expect_matches_reference(g, feeds_for(c, g, 7));
    }
}

// A forward forced into 3 key chunks (fewer where its keys are fewer tiles) merges them in the workgroup that stores
// a block's last chunk (one dispatch), or with MEGANEURA_SPLIT_SUM=dispatch in the combine's own (two where split):
// the same merge in the same order, so the same bits,
// and again on the second and third runs (each block's counter is zero again after a dispatch; q, k and v are
// parameters, so the attention is hoisted out of the run and runs again after each set).
TEST_P(AttentionForward, ChunksMergedInTheForwardMatchTheCombineBitForBit) {
    const Case& c = GetParam();
    const ScopedEnv forced("MEGANEURA_ATTENTION_SPLITS", "3");
    std::map<std::string, std::vector<std::vector<float>>> runs;
    bool chunked = false;  // the keys split
    for (const char* where : {"product", "dispatch"}) {
        const ScopedEnv sum("MEGANEURA_SPLIT_SUM", where);
        Built b = build(c);
        Graph& g = *b.g;
        g.output("out", g.attention(b.q, b.k, b.v, b.options));
        const bool merged = std::string(where) == "product";
        if (merged) chunked = compiler::program_kernels(g, device().context()->caps(), {}).front().label.ends_with("_chunks");
        Session s = compile(g, device());
        EXPECT_EQ(s.stats().dispatches + s.stats().hoisted_dispatches, merged || !chunked ? 1u : 2u) << where;
        for (int run = 0; run < 3; ++run) {
            set_feeds(s, g, feeds_for(c, g, 13));
            s.run();
            runs[where].push_back(s.get("out"));
        }
    }
    for (size_t run = 0; run < 3; ++run) {
        const std::vector<float>& a = runs["product"][run];
        const std::vector<float>& b = runs["dispatch"][run];
        ASSERT_EQ(a.size(), b.size());
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "run " << run;
    }
}

// A backward kernel whose sweep is split (the blocked dK/dV's query rows: few workgroups of 128 keys; dQ's keys: few
// workgroups of 16 rows over 1024 keys) adds its chunks in the workgroup that stores a block's last one, or with
// MEGANEURA_SPLIT_SUM=dispatch in a sum kernel of its own: the same additions in the same order, so the same bits, run
// after run; and both as the reference. With q and k rotated first (RoPE, through a split of their heads), the kernel
// that adds dK's (dQ's) chunks, in either mode, stores it rotated back, the RoPE's gradient, with the heads merged
// (FusionPlan::rope_of_gradient; the same bits too, f32): one rope_inverse kernel fewer; the other gradient, whose sweep
// is not split, keeps its RoPE's kernel.
TEST(AttentionSplitBackward, ChunksAddedInTheKernelMatchTheSumBitForBit) {
    struct Case {
        int64_t q_heads, q_len, kv_len;
        bool causal;
    };
    const ScopedEnv grad_q("MEGANEURA_ATTENTION_GRAD_Q", "kernel");  // dQ's kernel, not a matmul of dS, where not causal
    for (const Case& c : {Case{4, 128, 128, true}, Case{2, 16, 1024, false}}) {
        for (const bool rotary : {false, true}) {
            SCOPED_TRACE(testing::Message() << c.q_len << " rows, " << c.kv_len << " keys" << (rotary ? ", rotary" : ""));
            std::map<std::string, std::vector<std::vector<float>>> runs;
            std::map<std::string, size_t> dispatches;
            std::map<std::string, int> ropes;
            for (const char* where : {"product", "dispatch"}) {
                const ScopedEnv sum("MEGANEURA_SPLIT_SUM", where);
                Graph g;
                // Rotated, q and k are a model's split of the heads first.
                const auto operand = [&](const char* name, int64_t heads, int64_t len) {
                    return rotary ? g.parameter(name, {1, len, heads, 32}) : g.parameter(name, {1, heads, len, 32});
                };
                const Tensor q = operand("q", c.q_heads, c.q_len), k = operand("k", 2, c.kv_len);
                const Tensor v = g.parameter("v", {1, 2, c.kv_len, 32});
                Tensor rq = q, rk = k;
                if (rotary) {
                    rq = g.rope(g.permute(q, {0, 2, 1, 3}), g.input("q_positions", {c.q_len}, DType::I32), 10000.0);
                    rk = g.rope(g.permute(k, {0, 2, 1, 3}), g.input("k_positions", {c.kv_len}, DType::I32), 10000.0);
                }
                const Tensor out = g.permute(g.attention(rq, rk, v, {.causal = c.causal}), {0, 2, 1, 3});
                const std::vector<Tensor> grads = grad(g.sum(out * g.input("w", out.shape())), {q, k, v});
                for (size_t i = 0; i < grads.size(); ++i) g.output("d" + std::string(1, "qkv"[i]), grads[i]);
                bool split = false;
                for (const codegen::KernelSource& kernel : compiler::program_kernels(g, device().context()->caps(), {})) {
                    split = split || (kernel.label.starts_with("attention_grad") && kernel.choice.find(" chunks of ") != std::string::npos);
                    ropes[where] += kernel.label == "rope_inverse";
                }
                ASSERT_TRUE(split) << "no split sweep to add";
                Session s = compile(g, device());
                dispatches[where] = s.stats().dispatches;
                ref::Feeds feeds = random_feeds(g, 31, {-0.5, 0.5});
                for (const auto& [name, len] : {std::pair{"q_positions", c.q_len}, std::pair{"k_positions", c.kv_len}}) {
                    if (!rotary) continue;
                    std::vector<double> positions(static_cast<size_t>(len));
                    for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<double>(3 * i + 1);
                    feeds[name] = {{len}, positions};
                }
                for (int run = 0; run < 3; ++run) {
                    set_feeds(s, g, feeds);
                    s.run();
                    for (const char* name : {"dq", "dk", "dv"}) runs[where].push_back(s.get(name));
                }
                expect_matches_reference(g, feeds, 1e-4);
            }
            EXPECT_LT(dispatches["product"], dispatches["dispatch"]);
            EXPECT_EQ(ropes["dispatch"], ropes["product"]);
            if (rotary) EXPECT_LT(ropes["product"], 2);  // one rotated at least (which: the device's splits)
            for (size_t i = 0; i < runs["product"].size(); ++i) {
                const std::vector<float>& a = runs["product"][i];
                const std::vector<float>& b = runs["dispatch"][i];
                ASSERT_EQ(a.size(), b.size());
                EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "d" << "qkv"[i % 3] << ", run " << i / 3;
            }
        }
    }
}

// The reference's loops against the composed formula, both in float64.
TEST_P(AttentionForward, ReferenceMatchesComposedFormula) {
    const Case& c = GetParam();
    Built b = build(c);
    Graph& g = *b.g;
    const Tensor fused = g.attention(b.q, b.k, b.v, b.options);
    const Tensor composed = composed_attention(g, b.q, b.k, b.v, b.options);
    const auto values = ref::evaluate(g, feeds_for(c, g, 11));
    const auto& got = values[static_cast<size_t>(fused.id)].data;
    const auto& want = values[static_cast<size_t>(composed.id)].data;
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
    EXPECT_LE(worst, 1e-12);
}

const auto case_name = [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; };
INSTANTIATE_TEST_SUITE_P(Attention, AttentionForward, ::testing::ValuesIn(kForwardCases), case_name);
INSTANTIATE_TEST_SUITE_P(Attention, AttentionLongForward, ::testing::ValuesIn(kLongCases), case_name);

TEST(AttentionReference, RowThatSeesNoKeyIsZero) {
    // Causal with more queries than keys: rows 0 and 1 sit at positions -2 and -1.
    Built b = build({"", 1, 2, 1, 5, 3, 4, true});
    Graph& g = *b.g;
    const Tensor out = g.attention(b.q, b.k, b.v, b.options);
    const Tensor composed = composed_attention(g, b.q, b.k, b.v, b.options);
    const auto values = ref::evaluate(g, random_feeds(g, 3));
    const auto& got = values[static_cast<size_t>(out.id)].data;
    const auto& want = values[static_cast<size_t>(composed.id)].data;
    for (int64_t h = 0; h < 2; ++h) {
        for (int64_t i = 0; i < 5; ++i) {
            for (int64_t d = 0; d < 4; ++d) {
                const size_t at = static_cast<size_t>((h * 5 + i) * 4 + d);
                if (i < 2) EXPECT_EQ(got[at], 0.0) << h << " " << i;
                else EXPECT_NEAR(got[at], want[at], 1e-12) << h << " " << i;
            }
        }
    }
}

using AttentionGpu = GpuTest;

TEST_F(AttentionGpu, RowThatSeesNoKeyIsZero) {
    Built b = build({"", 1, 2, 1, 5, 3, 32, true});
    b.g->output("out", b.g->attention(b.q, b.k, b.v, b.options));
    expect_matches_reference(*b.g, random_feeds(*b.g, 5));
}

// The forward kernel's second output, the row logsumexp the backward kernels read.
TEST_F(AttentionGpu, LogsumexpMatchesReference) {
    Built b = build({"", 1, 4, 2, 33, 33, 64, true, 9});
    Graph& g = *b.g;
    const Tensor out = g.attention(b.q, b.k, b.v, b.options);
    const Node n = g.node(out);
    const Tensor lse = g.emit({.op = Op::AttentionLse, .inputs = n.inputs, .shape = {1, 4, 33}, .dtype = DType::F32,
                               .ints = n.ints, .data = n.data});
    g.output("out", out);
    g.output("lse", lse);
    expect_matches_reference(g, random_feeds(g, 9));
}

// ---- gradients ----

// loss = sum(attention(q, k, v) * w), w random so the upstream gradient is not uniform.
struct Loss {
    Built b;
    Tensor out, loss;
    std::vector<Tensor> grads;
    ref::Feeds feeds;
};

Loss loss_of(const Case& c, uint64_t seed) {
    Loss l{build(c)};
    Graph& g = *l.b.g;
    l.out = g.attention(l.b.q, l.b.k, l.b.v, l.b.options);
    const Tensor w = g.input("w", l.out.shape());
    l.loss = g.sum(l.out * w);
    l.feeds = feeds_for(c, g, seed);
    for (double& x : l.feeds["w"].data) x = static_cast<float>(x * c.upstream);
    l.grads = grad(l.loss, {l.b.q, l.b.k, l.b.v});
    return l;
}

const std::vector<Case> kSmallGradCases = {
    {"full_cross", 1, 2, 2, 3, 5, 4},
    {"causal_gqa", 1, 4, 2, 5, 5, 3, true},
    {"window_dynamic_start", 1, 2, 1, 3, 6, 4, true, 2, 2},
    {"decode_gqa", 2, 3, 1, 1, 4, 3, true, 0, 3},
};

class AttentionGrad : public ::testing::TestWithParam<Case> {};

// Every element of dq, dk, dv against central differences of the reference's loss.
TEST_P(AttentionGrad, MatchesFiniteDifferences) {
    Loss l = loss_of(GetParam(), 21);
    const auto values = ref::evaluate(*l.b.g, l.feeds);
    const auto loss_at = [&] { return ref::evaluate(*l.b.g, l.feeds)[static_cast<size_t>(l.loss.id)].data[0]; };
    constexpr double h = 1e-6;
    const char* names[] = {"q", "k", "v"};
    for (size_t p = 0; p < 3; ++p) {
        const auto& got = values[static_cast<size_t>(l.grads[p].id)].data;
        std::vector<double>& x = l.feeds[names[p]].data;
        ASSERT_EQ(got.size(), x.size());
        for (size_t i = 0; i < x.size(); ++i) {
            const double saved = x[i];
            x[i] = saved + h;
            const double up = loss_at();
            x[i] = saved - h;
            const double down = loss_at();
            x[i] = saved;
            const double want = (up - down) / (2 * h);
            EXPECT_NEAR(got[i], want, 1e-6 * (1 + std::fabs(want))) << "d" << names[p] << "[" << i << "]";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Attention, AttentionGrad, ::testing::ValuesIn(kSmallGradCases), case_name);

const std::vector<Case> kGpuGradCases = {
    {"causal_gqa_33_d64", 1, 4, 2, 33, 33, 64, true},
    {"full_cross_7_of_50_d80", 2, 2, 2, 7, 50, 80},
    {"full_gqa_20_of_36_d32", 1, 6, 2, 20, 36, 32},
    {"window_dynamic_start_gqa_d32", 1, 3, 1, 33, 50, 32, true, 9, 17},
    {"causal_50_d128", 1, 1, 1, 50, 50, 128, true},
    {"decode_gqa_d64", 1, 6, 2, 1, 33, 64, true},
};

class AttentionBackward : public GpuTest, public ::testing::WithParamInterface<Case> {};

// The loss's graph with out, dq, dk and dv as its outputs.
Graph& with_backward_outputs(Loss& l) {
    Graph& g = *l.b.g;
    g.output("out", l.out);
    g.output("dq", l.grads[0]);
    g.output("dk", l.grads[1]);
    g.output("dv", l.grads[2]);
    return g;
}

// out, dq, dk and dv on the GPU against the reference's.
void expect_backward_matches_reference(const Case& c, uint64_t seed) {
    Loss l = loss_of(c, seed);
    expect_matches_reference(with_backward_outputs(l), l.feeds);
}

TEST_P(AttentionBackward, MatchesReference) { expect_backward_matches_reference(GetParam(), 31); }

// A model's heads: q, k and v split from [batch, len, heads * dim] (reshape, permute {0, 2, 1, 3}), out merged back;
// the loss's gradients with respect to the unsplit tensors. The forward stores out merged though its gradients read
// it too (through the delta kernel), and dQ, dK and dV are stored merged by their kernels (FusionPlan::
// heads_merged_into), or where dQ is a matmul of the stored dS (grad_q_from_scores) by that matmul (MatmulSpec::
// heads_merged): no copy reads what an attention kernel stores. With k rotated by RoPE too (SmolLM2's), dK is
// read by the inverse RoPE, which merges it itself, and dV alone is stored merged. Whole sweeps and split into 3
// chunks (the forward's combine, the gradients' sums); `options` fast for the cooperative kernels.
void expect_merged_gradients_stored_without_a_copy(const Case& c, const CompileOptions& options, double tolerance) {
    for (const auto& [splits, rope_k] : {std::pair{"", false}, {"3", false}, {"", true}, {"3", true}}) {
        SCOPED_TRACE(std::string("splits '") + splits + "', k rotated " + std::to_string(rope_k));
        const ScopedEnv forced("MEGANEURA_ATTENTION_SPLITS", splits);
        Graph g;
        const auto heads = [&](const char* name, int64_t len, int64_t count) {
            const Tensor x = g.parameter(name, {c.batch, len, count * c.dim});
            return std::pair{x, g.permute(g.reshape(x, {c.batch, len, count, c.dim}), {0, 2, 1, 3})};
        };
        const auto [xq, q] = heads("xq", c.q_len, c.q_heads);
        auto [xk, k] = heads("xk", c.kv_len, c.kv_heads);
        const auto [xv, v] = heads("xv", c.kv_len, c.kv_heads);
        if (rope_k) k = g.rope(k, g.input("positions", {c.kv_len}, DType::I32), 100.0);
        AttentionOptions o{.causal = c.causal, .scale = c.scale, .window = c.window};
        if (c.start) o.query_start = g.input("start", {}, DType::I32);
        const Tensor merged = g.reshape(g.permute(g.attention(q, k, v, o), {0, 2, 1, 3}), {c.batch, c.q_len, c.q_heads * c.dim});
        g.output("merged", merged);
        const std::vector<Tensor> grads = grad(g.sum(merged * g.input("w", merged.shape())), {xq, xk, xv});
        for (size_t i = 0; i < grads.size(); ++i) g.output("d" + std::to_string(i), grads[i]);
        std::vector<int32_t> roots;
        for (const auto& output : g.outputs()) roots.push_back(output.second);
        sched::Tuning tuning = sched::tune_for(device().context()->caps(), options.precision);
        const sched::Schedule s = sched::lower(g, roots, tuning);
        std::map<int32_t, std::string> stored_by;  // value (root) -> the label of the kernel that stores it
        for (const sched::Step& step : s.steps) {
            for (size_t b = 0; b < step.values.size(); ++b) {
                if (step.kernel.iface.bindings[b].writes) stored_by[s.root(step.values[b])] = step.kernel.label;
            }
        }
        for (const sched::Step& step : s.steps) {
            if (step.kernel.label != "copy") continue;
            const std::string& by = stored_by[s.root(step.values[0])];
            EXPECT_NE(by.rfind("attention", 0), 0u) << "a copy of an attention's output";
            EXPECT_NE(by, "matmul") << "a copy of dQ's matmul of the stored dS (the graph's one matmul)";
        }
        ref::Feeds feeds = random_feeds(g, 17, {-0.5, 0.5});
        if (c.start) feeds["start"] = {{}, {static_cast<double>(*c.start)}};
        if (rope_k) {
            feeds["positions"].data.clear();
            for (int64_t t = 0; t < c.kv_len; ++t) feeds["positions"].data.push_back(static_cast<double>(3 * t % 11));
        }
        expect_matches_reference(g, feeds, tolerance, options);
    }
}

// Where the dK/dV kernel is the blocked f32 one and nothing is masked, it stores dS and dQ is a matmul of it
// (codegen::grad_q_from_scores); MEGANEURA_ATTENTION_GRAD_Q=kernel keeps dQ's own kernel. Both against the reference.
TEST_F(AttentionGpu, GradQIsAMatmulOfTheStoredScoresOrItsOwnKernel) {
    for (const Case& c : {kGpuGradCases[1], kGpuGradCases[2], kGpuGradCases[0]}) {
        for (const char* how : {"matmul", "kernel"}) {
            SCOPED_TRACE(c.name + " " + how);
            const ScopedEnv forced("MEGANEURA_ATTENTION_GRAD_Q", how);
            Loss l = loss_of(c, 43);
            Graph& g = with_backward_outputs(l);
            std::vector<int32_t> roots;
            for (const auto& output : g.outputs()) roots.push_back(output.second);
            const sched::Schedule s = sched::lower(g, roots, sched::tune_for(device().context()->caps()));
            const auto has = [&](const std::string& label) {
                return std::any_of(s.steps.begin(), s.steps.end(), [&](const sched::Step& st) { return st.kernel.label == label; });
            };
            const bool from_scores = std::string(how) == "matmul" && !c.causal;
            EXPECT_EQ(has("attention_grad_q"), !from_scores);
            EXPECT_EQ(has("matmul"), from_scores);
            expect_matches_reference(g, l.feeds);
        }
    }
}

TEST_P(AttentionBackward, MergedGradientsAreStoredWithoutACopy) {
    expect_merged_gradients_stored_without_a_copy(GetParam(), {}, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Attention, AttentionBackward, ::testing::ValuesIn(kGpuGradCases), case_name);

// The defaults give problems of 16 rows or more to the blocked kernels and the rest to the row-wise
// ones. Here the row-wise kernels take many rows, and the blocked ones other tile shapes: few
// threads per row group with a head dim they do not divide, a tile wider than the keys.
class AttentionTileShapes : public GpuTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(AttentionTileShapes, ForwardAndBackwardMatchReference) {
    const ScopedEnv tiles("MEGANEURA_ATTENTION_TILES", GetParam());
    for (const Case& c : {kGpuGradCases[0], kGpuGradCases[1], kGpuGradCases[2]}) {
        SCOPED_TRACE(c.name);
        expect_backward_matches_reference(c, 41);
    }
}

INSTANTIATE_TEST_SUITE_P(Attention, AttentionTileShapes, ::testing::Values("16,4,32,rowwise", "8,3,6", "64,16,128"),
                         [](const auto& info) {
                             std::string name = info.param;
                             for (char& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                             return name;
                         });

// The strict blocked forward takes its rows' maxima and sums across a group's threads in subgroup shuffles where the
// device runs them and can require a subgroup size, at the smallest that holds a group of 16 threads (the H200's 32,
// RDNA 3's 32 of 32..64, Intel's 16 of 8..32; lavapipe's 8 for its 4), compiled and fitting the device; through shared
// memory on MoltenVK, which cannot require one. The GPU tests run both paths: lavapipe's 16-row blocks of 4 threads a
// group shuffle; AttentionTileShapes' 8,3,6 (4 threads, half a subgroup) and 64,16,128 (16, two) do not.
TEST(AttentionBlockedSource, ForwardReducesInSubgroupsWhereTheDeviceCan) {
    Built b = build({"whisper", 1, 6, 6, 1500, 1500, 64});
    b.g->output("out", b.g->attention(b.q, b.k, b.v, b.options));
    for (const auto& [profile, subgroup] : std::vector<std::pair<std::string, uint32_t>>{
             {"nvidia-h200", 32}, {"amd-wave64", 32}, {"intel-arc", 16}, {"lavapipe", 8}, {"apple-m2", 0}}) {
        SCOPED_TRACE(profile);
        const rt::DeviceCaps& caps = rt::find_caps_profile(profile)->caps;
        const codegen::KernelSource k = compiler::program_kernels(*b.g, caps, {}).front();
        ASSERT_TRUE(k.choice.starts_with("blocked: ")) << k.choice;
        EXPECT_EQ(k.choice.find("subgroup shuffles") != std::string::npos, subgroup != 0) << k.choice;
        EXPECT_EQ(k.required_subgroup_size, subgroup);
        EXPECT_EQ(k.glsl.find("#define GROUP_SHUFFLES") != std::string::npos, subgroup != 0);
        const codegen::Spirv spirv = codegen::compile_glsl(k.glsl, compiler::shader_options(caps));
        for (const std::string& misfit : codegen::device_misfits(k, codegen::spirv_needs(*spirv, k.spec_values), caps)) {
            ADD_FAILURE() << misfit;
        }
    }
}

// The blocked forward reads a thread's keys of a tile as one vec2 where it has 2 (KEY_PAIRS) and its value tiles as
// head-dim quads where they divide evenly among a group's threads (VALUE_QUADS), each in the tiles the device's shared
// memory fits with that layout counted: Whisper-tiny's forward on the H200 takes both (the layout measured, session
// 35). The GPU tests run both: lavapipe's tiles (8 keys a thread) value quads, AttentionTileShapes' 8,3,6 key pairs.
TEST(AttentionBlockedSource, ForwardReadsKeyPairsAndValueQuadsWhereTheTilesAllow) {
    const auto defined = [](const std::string& glsl, const std::string& name) {
        const size_t at = glsl.find("#define " + name + " ");
        return at == std::string::npos ? -1L : std::stol(glsl.substr(at + name.size() + 9));
    };
    for (const int64_t dim : {33, 64, 80, 128}) {
        Built b = build({"whisper", 1, 6, 6, 1500, 1500, dim});
        b.g->output("out", b.g->attention(b.q, b.k, b.v, b.options));
        for (const std::string profile : {"nvidia-h200", "amd-wave64", "intel-arc", "lavapipe", "apple-m2"}) {
            SCOPED_TRACE(profile + ", head dim " + std::to_string(dim));
            const rt::DeviceCaps& caps = rt::find_caps_profile(profile)->caps;
            const codegen::KernelSource k = compiler::program_kernels(*b.g, caps, {}).front();
            ASSERT_TRUE(k.choice.starts_with("blocked: ")) << k.choice;
            const long tile = defined(k.glsl, "BT"), threads = defined(k.glsl, "TPR");
            ASSERT_GT(tile, 0);
            ASSERT_GT(threads, 0);
            EXPECT_EQ(k.glsl.find("#define KEY_PAIRS") != std::string::npos, tile == 2 * threads);
            EXPECT_EQ(k.glsl.find("#define VALUE_QUADS") != std::string::npos, dim % 4 == 0 && dim / 4 % threads == 0);
            if (profile == "nvidia-h200" && dim == 64) {
                EXPECT_NE(k.glsl.find("#define KEY_PAIRS"), std::string::npos);
                EXPECT_NE(k.glsl.find("#define VALUE_QUADS"), std::string::npos);
            }
            const codegen::Spirv spirv = codegen::compile_glsl(k.glsl, compiler::shader_options(caps));
            for (const std::string& misfit : codegen::device_misfits(k, codegen::spirv_needs(*spirv, k.spec_values), caps)) {
                ADD_FAILURE() << misfit;
            }
        }
    }
}

// ---- precision fast: the cooperative forward (codegen/attention_coop.cpp) ----

// Where the device has NV f16 cooperative matrices, fast attention forwards run on them: f16 Q, K, P
// and V, f32 scores, softmax and accumulation. A float64 emulation of exactly that rounding on these
// cases' random operands (uniform in [-2, 2)) gives relative L2 errors up to 4.5e-4 in out, 4e-5 in
// the logsumexp and 3.5e-4 in dq, dk and dv through the f32 backward, hence 2e-3, the other fast tests'
// bound. Elsewhere fast attention is the f32 kernels and matches as strict does.
double fast_tolerance() { return coop_device() ? 2e-3 : 1e-5; }

CompileOptions fast() {
    CompileOptions o;
    o.precision = Precision::Fast;
    return o;
}

// The kernels `g` lowers to in fast precision on this device.
std::vector<std::string> fast_labels(const Graph& g) {
    std::vector<int32_t> roots;
    for (const auto& [name, id] : g.outputs()) roots.push_back(id);
    const sched::Schedule s = sched::lower(g, roots, sched::tune_for(device().context()->caps(), Precision::Fast));
    std::vector<std::string> labels;
    for (const sched::Step& step : s.steps) labels.push_back(step.kernel.label);
    return labels;
}
// What a forward alone lowers to: one kernel (the logsumexp and a merge of the heads are stored by it),
// or where its keys are split across workgroups (few heads), the chunks' kernel, which merges them itself
// (AttentionTiles::last_chunk_merges), or its chunks and their combine.
void expect_one_fast_forward(const Graph& g) {
    const std::vector<std::string> labels = fast_labels(g);
    const std::string forward = coop_device() ? "attention_coop" : "attention";
    if (labels.size() == 2) EXPECT_EQ(labels, (std::vector<std::string>{forward + "_chunks", "attention_combine"}));
    else EXPECT_TRUE(labels == std::vector<std::string>{forward} || labels == std::vector<std::string>{forward + "_chunks"})
        << labels.front();
}

// Whisper's encoder at fewer positions (non-causal, rows not a multiple of the 64-row block), SmolLM2's
// causal GQA (9 query heads on 3 kv heads: blocks of rows cross the heads), a sliding window behind a
// dynamic start, and head dims whose P V takes 2 (d 80) and 4 (d 128, 32-key tiles) chunks.
const std::vector<Case> kFastCases = {
    {"whisper_like_100_d64", 1, 6, 6, 100, 100, 64},
    {"causal_gqa_9_of_3_70_d64", 1, 9, 3, 70, 70, 64, true},
    {"window_dynamic_start_gqa_33_of_50_d32", 1, 3, 1, 33, 50, 32, true, 5, 17},
    {"causal_bottom_right_40_of_90_d80", 1, 2, 1, 40, 90, 80, true},
    {"full_cross_20_of_45_d128", 2, 2, 2, 20, 45, 128},
    {"whisper_1500_d64", 1, 1, 1, 1500, 1500, 64},
};

class AttentionFast : public GpuTest, public ::testing::WithParamInterface<Case> {};

// out and the logsumexp the backward reads, on the cooperative forward where there is one.
TEST_P(AttentionFast, ForwardMatchesReference) {
    const Case& c = GetParam();
    Built b = build(c);
    Graph& g = *b.g;
    const Tensor out = g.attention(b.q, b.k, b.v, b.options);
    const Node n = g.node(out);
    g.output("out", out);
    g.output("lse", g.emit({.op = Op::AttentionLse, .inputs = n.inputs, .shape = {c.batch, c.q_heads, c.q_len},
                            .dtype = DType::F32, .ints = n.ints, .data = n.data}));
    expect_one_fast_forward(g);
    expect_matches_reference(g, feeds_for(c, g, 7), fast_tolerance(), fast());
}

INSTANTIATE_TEST_SUITE_P(Attention, AttentionFast, ::testing::ValuesIn(kFastCases), case_name);

// The merge of the heads stored by the cooperative forward itself (FusionPlan::heads_merged_into).
// Two cases only, here and below: on lavapipe each new shape's f32 kernels take up to a minute to JIT.
TEST_F(AttentionGpu, FastMergedHeadsAreStoredWithoutACopy) {
    for (const Case& c : {kFastCases[0], kFastCases[1]}) {
        SCOPED_TRACE(c.name);
        Built b = build(c);
        Graph& g = *b.g;
        const Tensor out = g.attention(b.q, b.k, b.v, b.options);
        g.output("merged", g.reshape(g.permute(out, {0, 2, 1, 3}), {c.batch, c.q_len, c.q_heads * c.dim}));
        expect_one_fast_forward(g);
        expect_matches_reference(g, feeds_for(c, g, 7), fast_tolerance(), fast());
    }
}

// Training through it with the f32 backward (MEGANEURA_FAST_GRADIENTS=f32 keeps the backward's
// products f32): the f32 backward kernels read the cooperative forward's out and logsumexp.
TEST_F(AttentionGpu, FastForwardTrainsThroughTheF32Backward) {
    const ScopedEnv f32_gradients("MEGANEURA_FAST_GRADIENTS", "f32");
    for (const Case& c : {kFastCases[0], kFastCases[1]}) {
        SCOPED_TRACE(c.name);
        Loss l = loss_of(c, 31);
        const Graph& g = with_backward_outputs(l);
        const std::vector<std::string> labels = fast_labels(g);
        EXPECT_EQ(std::count(labels.begin(), labels.end(), "attention_coop"), coop_device() ? 1 : 0);
        // Unmasked, dQ is a matmul of the dS the dK/dV kernel stores (codegen::grad_q_from_scores).
        EXPECT_EQ(std::count(labels.begin(), labels.end(), "attention_grad_q"), c.causal ? 1 : 0);
        EXPECT_EQ(std::count(labels.begin(), labels.end(), "attention_grad_kv"), 1);
        expect_matches_reference(g, l.feeds, fast_tolerance(), fast());
    }
}

// ---- precision fast: the cooperative backward (codegen/attention_coop_backward.cpp) ----

// dq, dk and dv through the cooperative dQ and dK/dV kernels where the device has them: Whisper's encoder
// at fewer positions and at its 1500, causal GQA at ratios 3 and 5 (SmolLM2's 9 query heads on 3), a
// window behind a dynamic start, head dims of 32, 48 (an odd count of 16-wide fragments), 80 and 128
// (32-row tiles), 1 and 7 queries against 33 keys (a single query: dQ stays on the f32 kernels, fewer
// than 16 rows per kv head), and a gradient far below f16's normal range (dO ~ 1e-6: the staged dO and dS
// are scaled by powers of two). Elsewhere they would be the f32 kernels that AttentionBackward and
// FastForwardTrainsThroughTheF32Backward run already, at a cost lavapipe cannot afford (JIT-compiling a
// new shape's f32 backward took it up to 6 minutes here), so only the choice is checked there.
const std::vector<Case> kFastGradCases = {
    {"whisper_like_100_d64", 1, 6, 6, 100, 100, 64},
    {"causal_gqa_9_of_3_70_d64", 1, 9, 3, 70, 70, 64, true},
    {"window_dynamic_start_gqa_33_of_50_d32", 1, 3, 1, 33, 50, 32, true, 5, 17},
    {"causal_bottom_right_40_of_90_d80", 1, 2, 1, 40, 90, 80, true},
    {"full_cross_20_of_45_d128", 2, 2, 2, 20, 45, 128},
    {"causal_gqa_5_of_1_7_of_33_d64", 1, 5, 1, 7, 33, 64, true},
    {"causal_gqa_5_of_1_1_of_33_d48", 2, 5, 1, 1, 33, 48, true},
    {"tiny_gradient_causal_gqa_9_of_3_70_d64", 1, 9, 3, 70, 70, 64, true, 0, std::nullopt, 0, 1e-6},
    {"whisper_1500_d64", 1, 1, 1, 1500, 1500, 64},
};

class AttentionFastBackward : public GpuTest, public ::testing::WithParamInterface<Case> {};

TEST_P(AttentionFastBackward, MatchesReference) {
    const Case& c = GetParam();
    Loss l = loss_of(c, 31);
    const Graph& g = with_backward_outputs(l);
    const std::vector<std::string> labels = fast_labels(g);
    const bool coop_q = coop_device() && c.q_len * (c.q_heads / c.kv_heads) >= 16;
    EXPECT_EQ(std::count(labels.begin(), labels.end(), "attention_grad_q_coop"), coop_q ? 1 : 0);
    EXPECT_EQ(std::count(labels.begin(), labels.end(), "attention_grad_kv_coop"), coop_device() ? 1 : 0);
    if (!coop_device()) GTEST_SKIP() << "no cooperative matrices: the f32 backward, tested by AttentionBackward";
    expect_matches_reference(g, l.feeds, fast_tolerance(), fast());
}

// The same on the cooperative backward (two cases: see FastMergedHeadsAreStoredWithoutACopy).
TEST_F(AttentionGpu, FastMergedGradientsAreStoredWithoutACopy) {
    if (!coop_device()) GTEST_SKIP() << "no cooperative matrices: the f32 backward, tested by AttentionBackward";
    for (const Case& c : {kFastGradCases[1], kFastGradCases[4]}) {
        SCOPED_TRACE(c.name);
        expect_merged_gradients_stored_without_a_copy(c, fast(), fast_tolerance());
    }
}

INSTANTIATE_TEST_SUITE_P(Attention, AttentionFastBackward, ::testing::ValuesIn(kFastGradCases), case_name);

// Causal with more queries than keys: the first 17 rows of each head see no key and are zeros, whole
// subgroups of them skip every tile.
TEST_F(AttentionGpu, FastRowThatSeesNoKeyIsZero) {
    Built b = build({"", 1, 2, 1, 20, 3, 32, true});
    b.g->output("out", b.g->attention(b.q, b.k, b.v, b.options));
    expect_one_fast_forward(*b.g);
    expect_matches_reference(*b.g, random_feeds(*b.g, 5), fast_tolerance(), fast());
}

// The kernel each forward takes in fast precision on the H200's caps, without the device: the
// cooperative one where it applies, its GLSL compiled and fitting the H200 (48 KiB of shared memory),
// and the reason where it declines.
TEST(AttentionCoopSource, ChosenAndCompiledForTheH200) {
    const rt::DeviceCaps& h200 = rt::find_caps_profile("nvidia-h200")->caps;
    struct Expect {
        Case c;
        std::string choice;  // the forward kernel's
    };
    const std::vector<Expect> cases = {
        {{"whisper", 1, 6, 6, 1500, 1500, 64},
         "cooperative: 1500 rows per kv head, 64 per workgroup, 64-key tiles, keys in 4 chunks of 384: 144 workgroups "
         "would underfill 132 compute units"},
        {{"smollm2_prefill", 1, 9, 3, 128, 128, 64, true},
         "cooperative: 384 rows per kv head, 16 per workgroup, 64-key tiles, keys in 2 chunks of 64: 72 workgroups would "
         "underfill 132 compute units"},
        {{"window_dynamic_start_d32", 1, 3, 1, 33, 50, 32, true, 5, 17},
         "cooperative: 99 rows per kv head, 16 per workgroup, 64-key tiles; keys not split: 50 keys are fewer than 128"},
        {{"d80", 4, 8, 8, 512, 512, 80},
         "cooperative: 512 rows per kv head, 64 per workgroup, 32-key tiles, keys in 3 chunks of 192: 256 workgroups "
         "would underfill 132 compute units"},
        {{"d128", 4, 8, 8, 512, 512, 128},
         "cooperative: 512 rows per kv head, 64 per workgroup, 32-key tiles, keys in 3 chunks of 192: 256 workgroups "
         "would underfill 132 compute units"},
        {{"d33", 1, 2, 1, 64, 64, 33},
         "blocked: 128 rows per kv head, row maxima and sums in subgroup shuffles, keys in 2 chunks of 32: 2 workgroups "
         "would underfill 132 compute units; cooperative declined: head dim 33 is not a multiple of 16"},
        {{"decode", 1, 9, 3, 1, 4096, 64, true, 0, 100},
         "key lanes, 3 rows per kv head, 16 lanes a key, keys in 64 chunks of 64 (flash-decoding): 3 workgroups would "
         "underfill 132 compute units; cooperative declined: 3 rows per kv head, fewer than a subgroup's 16"},
    };
    for (const Expect& e : cases) {
        SCOPED_TRACE(e.c.name);
        Built b = build(e.c);
        b.g->output("out", b.g->attention(b.q, b.k, b.v, b.options));
        const std::vector<codegen::KernelSource> kernels = compiler::program_kernels(*b.g, h200, fast());
        ASSERT_FALSE(kernels.empty());
        const codegen::KernelSource& k = kernels.front();
        EXPECT_EQ(k.choice, e.choice);
        if (k.label.rfind("attention_coop", 0) != 0) continue;
        EXPECT_EQ(k.required_subgroup_size, 32u);
        const codegen::Spirv spirv = codegen::compile_glsl(k.glsl, compiler::shader_options(h200));
        const codegen::SpirvNeeds needs = codegen::spirv_needs(*spirv, k.spec_values);
        EXPECT_LE(needs.shared_bytes, 48u * 1024);
        for (const std::string& misfit : codegen::device_misfits(k, needs, h200)) ADD_FAILURE() << misfit;
        // Strict keeps the f32 kernels.
        EXPECT_EQ(compiler::program_kernels(*b.g, h200, {}).front().label, k.label == "attention_coop" ? "attention" : "attention_chunks");
    }
}

// The backward kernels each problem takes in fast precision on the H200's caps: the cooperative dQ and
// dK/dV where they apply, their GLSL compiled and fitting the H200, and the reason where they decline.
TEST(AttentionCoopSource, BackwardChosenAndCompiledForTheH200) {
    const rt::DeviceCaps& h200 = rt::find_caps_profile("nvidia-h200")->caps;
    struct Expect {
        Case c;
        std::string dq, dkv;  // the kernels' choices
    };
    const std::string underfill = " workgroups would underfill 132 compute units";
    const std::vector<Expect> cases = {
        {{"whisper", 1, 6, 6, 1500, 1500, 64},
         "cooperative: 1500 rows per kv head, 64 per workgroup, 64-key tiles, keys in 4 chunks of 384: 144" + underfill,
         "cooperative: 1500 keys per kv head, 64 per workgroup, 64-row query tiles, query rows in 4 chunks of 384: 144" +
             underfill},
        // Fewer workgroups than compute units: sweeps split down to chunks of one tile.
        {{"smollm2", 1, 9, 3, 128, 128, 64, true},
         "cooperative: 384 rows per kv head, 16 per workgroup, 64-key tiles, keys in 2 chunks of 64: 72" + underfill,
         "cooperative: 128 keys per kv head, 16 per workgroup, 16-row query tiles, query rows in 12 chunks of 32: 24" +
             underfill},
        {{"window_dynamic_start_d32", 1, 3, 1, 33, 50, 32, true, 5, 17},
         "cooperative: 99 rows per kv head, 16 per workgroup, 64-key tiles; keys not split: 50 keys are fewer than 128",
         "cooperative: 50 keys per kv head, 16 per workgroup, 32-row query tiles, query rows in 4 chunks of 32: 4" +
             underfill},
        {{"d80", 4, 8, 8, 512, 512, 80},
         "cooperative: 512 rows per kv head, 64 per workgroup, 32-key tiles, keys in 3 chunks of 192: 256" + underfill,
         "cooperative: 512 keys per kv head, 64 per workgroup, 32-row query tiles, query rows in 3 chunks of 192: 256" +
             underfill},
        {{"d128", 4, 8, 8, 512, 512, 128},
         "cooperative: 512 rows per kv head, 64 per workgroup, 32-key tiles, keys in 3 chunks of 192: 256" + underfill,
         "cooperative: 512 keys per kv head, 64 per workgroup, 32-row query tiles, query rows in 3 chunks of 192: 256" +
             underfill},
        {{"d33_causal", 1, 2, 1, 64, 64, 33, true},
         "blocked: 128 rows per kv head, keys in 2 chunks of 32: 2" + underfill +
             "; cooperative declined: head dim 33 is not a multiple of 16",
         "blocked: 64 keys per kv head, query rows in 4 chunks of 32: 2" + underfill + "; "
         "cooperative declined: head dim 33 is not a multiple of 16"},
        // Unmasked on the f32 kernels: dQ is a matmul of the dS the dK/dV kernel stores (no dQ kernel: "").
        {{"d33", 1, 2, 1, 64, 64, 33},
         "",
         "blocked: 64 keys per kv head, query rows in 4 chunks of 32: 2" + underfill + "; "
         "cooperative declined: head dim 33 is not a multiple of 16; stores dS for dQ's matmul"},
        {{"one_query", 2, 5, 1, 1, 33, 48, true},
         "row-wise: 5 rows per kv head; cooperative declined: 5 rows per kv head, fewer than a subgroup's 16",
         "cooperative: 33 keys per kv head, 16 per workgroup, 16-row query tiles; query rows not split: 5 query rows are "
         "fewer than 32"},
    };
    for (const Expect& e : cases) {
        SCOPED_TRACE(e.c.name);
        Loss l = loss_of(e.c, 3);
        const Graph& g = with_backward_outputs(l);
        std::map<std::string, std::string> choices;  // by label
        int sums = 0;  // kernels that add a split sweep's chunks themselves (binding cnt: AttentionGradKernels::tile_counters)
        int sum_kernels = 0;  // the dispatches that add them (by default: MEGANEURA_SPLIT_SUM)
        for (const codegen::KernelSource& k : compiler::program_kernels(g, h200, fast())) {
            if (k.label.rfind("attention_grad", 0) != 0) continue;
            if (k.label.ends_with("_sum")) {
                ++sum_kernels;
                continue;
            }
            sums += std::any_of(k.iface.bindings.begin(), k.iface.bindings.end(), [](const codegen::Binding& b) { return b.name == "cnt"; });
            EXPECT_TRUE(choices.emplace(k.label, k.choice).second) << k.label;
            if (k.label.find("_coop") == std::string::npos) continue;
            EXPECT_EQ(k.required_subgroup_size, 32u);
            const codegen::Spirv spirv = codegen::compile_glsl(k.glsl, compiler::shader_options(h200));
            const codegen::SpirvNeeds needs = codegen::spirv_needs(*spirv, k.spec_values);
            EXPECT_LE(needs.shared_bytes, 48u * 1024);
            for (const std::string& misfit : codegen::device_misfits(k, needs, h200)) ADD_FAILURE() << misfit;
        }
        EXPECT_EQ(choices.size(), e.dq.empty() ? 1u : 2u);
        const bool coop_q = e.dq.rfind("cooperative", 0) == 0, coop_kv = e.dkv.rfind("cooperative", 0) == 0;
        EXPECT_EQ(choices[coop_q ? "attention_grad_q_coop" : "attention_grad_q"], e.dq);
        EXPECT_EQ(choices[coop_kv ? "attention_grad_kv_coop" : "attention_grad_kv"], e.dkv);
        EXPECT_EQ(sums, 0);
        EXPECT_EQ(sum_kernels, int(e.dq.find(" chunks of ") != std::string::npos) + int(e.dkv.find(" chunks of ") != std::string::npos));
        // Strict, and fast with MEGANEURA_FAST_GRADIENTS=f32, keep the f32 kernels.
        for (const bool strict : {true, false}) {
            const ScopedEnv f32_gradients("MEGANEURA_FAST_GRADIENTS", strict ? "" : "f32");
            for (const codegen::KernelSource& k : compiler::program_kernels(g, h200, strict ? CompileOptions{} : fast())) {
                if (k.label.rfind("attention_grad", 0) == 0) EXPECT_EQ(k.label.find("_coop"), std::string::npos) << k.label;
            }
        }
    }
}

// ---- errors ----

TEST(AttentionErrors, BadOperandsAreNamed) {
    Graph g;
    const Tensor q = g.input("q", {1, 4, 5, 8});
    const Tensor k = g.input("k", {1, 2, 7, 8});
    const Tensor v = g.input("v", {1, 2, 7, 8});
    EXPECT_EQ(error_of([&] { g.attention(q, k, g.input("v3", {1, 2, 7})); }),
              "[attention] q, k, v must be [B, H, T, D]; got (1,4,5,8), (1,2,7,8), (1,2,7)");
    EXPECT_EQ(error_of([&] { g.attention(q, k, g.input("v6", {1, 2, 6, 8})); }),
              "[attention] k is (1,2,7,8) but v is (1,2,6,8)");
    EXPECT_EQ(error_of([&] { g.attention(g.input("q9", {1, 4, 5, 9}), k, v); }),
              "[attention] q is (1,4,5,9), k is (1,2,7,8): batch or head dim differ");
    EXPECT_EQ(error_of([&] { g.attention(g.input("q3", {1, 3, 5, 8}), k, v); }),
              "[attention] query heads 3 are not a multiple of kv heads 2");
    EXPECT_EQ(error_of([&] { g.attention(q, k, g.input("vh", {1, 2, 7, 8}, DType::F16)); }),
              "[attention] q, k, v must share a float dtype; got f32, f32, f16");
    EXPECT_EQ(error_of([&] { g.attention(q, k, v, {.window = 3}); }),
              "[attention] a sliding window needs causal attention and window > 0");
    EXPECT_EQ(error_of([&] { g.attention(q, k, v, {.causal = true, .query_start = g.input("s", {1}, DType::I32)}); }),
              "[attention] query_start must be an i32 scalar");
}

}  // namespace
}  // namespace mn::test
