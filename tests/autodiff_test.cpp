// Tests of mn::grad. Every VJP rule is checked against central differences of the float64
// reference (loss = sum(op(params) * w) with a random w, so the upstream gradient is never all
// ones); the GPU runs a backward graph per op family against the reference; and there are tests of
// pruning, zero gradients, rule coverage (read from ops.def) and regressions for the bugs that
// cost the published implementation the most time (shared/LESSONS.md, "Correctness bugs").
#include <algorithm>
#include <functional>
#include <memory>
#include <set>

#include "gpu_check.hpp"
#include "meganeura/autodiff.hpp"

namespace mn::test {
namespace {

// A parameter of a case: its shape and where its values are drawn from. With either_sign the
// magnitudes come from [lo, hi] and the sign at random, which keeps them off a kink at 0.
struct Param {
    Shape shape;
    double lo = -2, hi = 2;
    bool either_sign = false;
};

using Params = const std::vector<Tensor>&;
using OpFn = std::function<Tensor(Graph&, Params)>;

struct Case {
    std::string name;  // a gtest name: letters, digits and '_'
    std::vector<Param> params;  // fed as parameters p0, p1, ...
    OpFn op;                    // the op under test, of the parameters
    ref::Feeds fixed = {};      // the other inputs op reads (labels)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

ref::Value random_value(const Param& p, std::mt19937_64& rng) {
    std::uniform_real_distribution<double> d(p.lo, p.hi);
    ref::Value v{p.shape, {}};
    for (int64_t i = 0; i < numel(p.shape); ++i) {
        const double x = p.either_sign && rng() % 2 ? -d(rng) : d(rng);
        v.data.push_back(static_cast<float>(x));  // representable on the GPU too
    }
    return v;
}

std::string param_name(size_t i) { return "p" + std::to_string(i); }

// A case's graph, with loss = sum(op(params) * w) (op(params) * w for a scalar op) and its feeds.
// The graph is on the heap because Tensors point at it.
struct Built {
    std::unique_ptr<Graph> g = std::make_unique<Graph>();
    Tensor loss;
    std::vector<Tensor> params, grads;
    ref::Feeds feeds;
};

Built forward(const Case& c) {
    Built b;
    Graph& g = *b.g;
    std::mt19937_64 rng(std::hash<std::string>{}(c.name));
    for (size_t i = 0; i < c.params.size(); ++i) {
        b.params.push_back(g.parameter(param_name(i), c.params[i].shape));
        b.feeds[param_name(i)] = random_value(c.params[i], rng);
    }
    const Tensor y = c.op(g, b.params);
    const Tensor w = g.input("w", y.shape());
    b.feeds["w"] = random_value({y.shape(), -1, 1}, rng);
    b.loss = y.shape().empty() ? y * w : g.sum(y * w);
    for (const auto& [name, v] : c.fixed) b.feeds[name] = v;
    return b;
}

// Every gradient against central differences of the loss on the float64 reference.
void expect_matches_finite_differences(const Case& c) {
    Built b = forward(c);
    const Graph before = *b.g;  // the forward graph alone, for the differences
    b.grads = grad(b.loss, b.params);
    ASSERT_EQ(b.grads.size(), b.params.size());
    const auto values = ref::evaluate(*b.g, b.feeds);
    ref::Feeds feeds = b.feeds;
    const auto loss_at = [&] { return ref::evaluate(before, feeds)[static_cast<size_t>(b.loss.id)].data[0]; };
    constexpr double h = 1e-6;
    for (size_t i = 0; i < b.params.size(); ++i) {
        const std::string name = param_name(i);
        ASSERT_EQ(b.grads[i].shape(), b.params[i].shape()) << "grad of " << name;
        ASSERT_EQ(b.grads[i].dtype(), b.params[i].dtype()) << "grad of " << name;
        const std::vector<double>& got = values[static_cast<size_t>(b.grads[i].id)].data;
        std::vector<double>& x = feeds[name].data;
        size_t bad = 0, worst = 0;
        double worst_excess = 0, worst_want = 0;
        for (size_t k = 0; k < x.size(); ++k) {
            const double saved = x[k];
            x[k] = saved + h;
            const double up = loss_at();
            x[k] = saved - h;
            const double down = loss_at();
            x[k] = saved;
            const double want = (up - down) / (2 * h);
            const double excess = std::fabs(got[k] - want) / (1e-6 * (1 + std::fabs(want)));
            if (!(excess <= 1)) ++bad;  // NaN counts
            if (!(excess <= worst_excess)) worst_excess = excess, worst = k, worst_want = want;
        }
        EXPECT_EQ(bad, 0u) << "grad of " << name << " " << shape_str(b.params[i].shape()) << ": " << bad << " of "
                           << x.size() << " elements off; worst [" << worst << "]: got " << got[worst]
                           << ", finite difference " << worst_want << "\n"
                           << b.g->str();
    }
}

// ---- the cases ----

const Param kAny{{3, 5}};
const Param kWide{{3, 5}, -4, 4};
const Param kPositive{{3, 5}, 0.5, 3};
const Param kOffZero{{3, 5}, 0.2, 2, true};

ref::Value labels(std::vector<double> v) { return {{static_cast<int64_t>(v.size())}, std::move(v)}; }

Tensor cross_entropy_of(Graph& g, Tensor logits) {
    return g.cross_entropy(logits, g.input("labels", {logits.shape()[0]}, DType::I32));
}
const OpFn kCrossEntropy = [](Graph& g, Params p) { return cross_entropy_of(g, p[0]); };

std::string axes_name(const std::vector<int64_t>& axes) {
    if (axes.empty()) return "all";
    std::string s = "axes";
    for (int64_t a : axes) s += "_" + (a < 0 ? "m" + std::to_string(-a) : std::to_string(a));
    return s;
}

// One case or more for every differentiable op (and for sign/greater/equal, whose gradient is 0).
std::vector<Case> op_cases() {
    std::vector<Case> cases = {
        // unary
        {"neg", {kAny}, [](Graph& g, Params p) { return g.neg(p[0]); }},
        {"exp", {kAny}, [](Graph& g, Params p) { return g.exp(p[0]); }},
        {"log", {kPositive}, [](Graph& g, Params p) { return g.log(p[0]); }},
        {"sqrt", {kPositive}, [](Graph& g, Params p) { return g.sqrt(p[0]); }},
        {"rsqrt", {kPositive}, [](Graph& g, Params p) { return g.rsqrt(p[0]); }},
        {"abs", {kOffZero}, [](Graph& g, Params p) { return g.abs(p[0]); }},
        {"relu", {kOffZero}, [](Graph& g, Params p) { return g.relu(p[0]); }},
        {"sigmoid", {kWide}, [](Graph& g, Params p) { return g.sigmoid(p[0]); }},
        {"tanh", {kWide}, [](Graph& g, Params p) { return g.tanh(p[0]); }},
        {"silu", {kWide}, [](Graph& g, Params p) { return g.silu(p[0]); }},
        {"gelu", {kWide}, [](Graph& g, Params p) { return g.gelu(p[0]); }},
        {"gelu_tanh", {kWide}, [](Graph& g, Params p) { return g.gelu(p[0], "tanh"); }},
        {"cast_f32", {kAny}, [](Graph& g, Params p) { return g.cast(p[0], DType::F32); }},
        {"sign", {kOffZero}, [](Graph& g, Params p) { return g.sign(p[0]); }},
        // binary, broadcasting one way, the other and both
        {"add", {{{2, 3, 5}}, {{3, 1}}}, [](Graph& g, Params p) { return p[0] + p[1]; }},
        {"sub", {{{3, 1}}, {{2, 1, 5}}}, [](Graph& g, Params p) { return p[0] - p[1]; }},
        {"mul", {{{}}, {{2, 3, 5}}}, [](Graph& g, Params p) { return p[0] * p[1]; }},
        {"div", {{{3, 5}}, {{2, 1, 5}, 0.5, 2, true}}, [](Graph& g, Params p) { return p[0] / p[1]; }},
        {"maximum", {{{2, 3, 5}}, {{5}}}, [](Graph& g, Params p) { return g.maximum(p[0], p[1]); }},
        {"minimum", {{{3, 1}}, {{3, 5}}}, [](Graph& g, Params p) { return g.minimum(p[0], p[1]); }},
        {"pow", {{{2, 3, 5}, 0.5, 2}, {{5}, -2, 2}}, [](Graph& g, Params p) { return g.pow(p[0], p[1]); }},
        {"pow_cube_of_any_sign", {kAny}, [](Graph& g, Params p) { return g.pow(p[0], 3.0); }},
        {"pow_sqrt", {kPositive}, [](Graph& g, Params p) { return g.pow(p[0], 0.5); }},
        {"pow_negative", {kPositive}, [](Graph& g, Params p) { return g.pow(p[0], -1.5); }},
        {"greater", {kAny, {{5}}}, [](Graph& g, Params p) { return g.greater(p[0], p[1]); }},
        {"equal", {kAny, {{5}}}, [](Graph& g, Params p) { return g.equal(p[0], p[1]); }},
        // matmul
        {"matmul_batched", {{{2, 3, 4, 5}}, {{3, 5, 6}}}, [](Graph& g, Params p) { return g.matmul(p[0], p[1]); }},
        {"matmul_broadcast_a", {{{4, 5}}, {{2, 5, 3}}}, [](Graph& g, Params p) { return g.matmul(p[0], p[1]); }},
        {"matmul_batch_dims_of_1", {{{2, 1, 4, 5}}, {{3, 5, 6}}}, [](Graph& g, Params p) { return g.matmul(p[0], p[1]); }},
        {"matmul_batched_tt", {{{3, 5, 4}}, {{2, 1, 6, 5}}},
         [](Graph& g, Params p) { return g.matmul(p[0], p[1], true, true); }},
        {"linear", {{{2, 3, 5}}, {{4, 5}}, {{4}}}, [](Graph& g, Params p) { return g.linear(p[0], p[1], p[2]); }},
        // softmax family and losses
        {"softmax_last", {kWide}, [](Graph& g, Params p) { return g.softmax(p[0]); }},
        {"softmax_middle", {{{2, 4, 3}, -4, 4}}, [](Graph& g, Params p) { return g.softmax(p[0], 1); }},
        {"log_softmax_last", {kWide}, [](Graph& g, Params p) { return g.log_softmax(p[0]); }},
        {"log_softmax_middle", {{{2, 4, 3}, -4, 4}}, [](Graph& g, Params p) { return g.log_softmax(p[0], 1); }},
        {"cross_entropy", {{{4, 5}, -3, 3}}, kCrossEntropy, {{"labels", labels({0, 4, 2, 2})}}},
        // rows labelled -100 count for nothing: the mean is over the other two
        {"cross_entropy_ignored", {{{4, 5}, -3, 3}}, kCrossEntropy, {{"labels", labels({-100, 4, -100, 2})}}},
        {"mse_loss", {kAny, kAny}, [](Graph& g, Params p) { return g.mse_loss(p[0], p[1]); }},
        // data movement
        {"reshape", {{{2, 3, 4}}}, [](Graph& g, Params p) { return g.reshape(p[0], {4, -1}); }},
        {"permute", {{{2, 3, 4}}}, [](Graph& g, Params p) { return g.permute(p[0], {2, 0, 1}); }},
        {"transpose", {{{2, 3, 4}}}, [](Graph& g, Params p) { return g.transpose(p[0], 0, 2); }},
        {"slice", {{{2, 5, 4}}}, [](Graph& g, Params p) { return g.slice(p[0], 1, 1, 4); }},
        {"slice_step_2", {{{3, 7}}}, [](Graph& g, Params p) { return g.slice(p[0], -1, 1, 6, 2); }},
        {"slice_negative_start", {{{5, 4}}}, [](Graph& g, Params p) { return g.slice(p[0], 0, -3, 100, 2); }},
        {"concat", {{{2, 1, 3}}, {{2, 3, 3}}, {{2, 2, 3}}},
         [](Graph& g, Params p) { return g.concat({p[0], p[1], p[2]}, 1); }},
        {"expand", {{{3, 1}}}, [](Graph& g, Params p) { return g.expand(p[0], {2, 3, 4}); }},
        {"expand_scalar", {{{}}}, [](Graph& g, Params p) { return g.expand(p[0], {3, 5}); }},
        {"flatten", {{{2, 3, 4}}}, [](Graph& g, Params p) { return g.flatten(p[0]); }},
        // convolution: strides 1 and 2, padding 0 and 1, dilation 2, groups 1 and > 1, odd sizes
        {"conv2d_bias", {{{2, 3, 5, 7}}, {{4, 3, 3, 3}}, {{4}}},
         [](Graph& g, Params p) { return g.conv2d(p[0], p[1], p[2]); }},
        {"conv2d_stride2_pad1", {{{2, 3, 7, 5}}, {{4, 3, 3, 3}}},
         [](Graph& g, Params p) { return g.conv2d(p[0], p[1], std::nullopt, {.stride = 2, .padding = 1}); }},
        {"conv2d_dilation2_pad1", {{{1, 2, 7, 7}}, {{3, 2, 3, 3}}},
         [](Graph& g, Params p) { return g.conv2d(p[0], p[1], std::nullopt, {.padding = 1, .dilation = 2}); }},
        {"conv2d_groups2_stride2", {{{2, 4, 5, 5}}, {{6, 2, 3, 3}}},
         [](Graph& g, Params p) { return g.conv2d(p[0], p[1], std::nullopt, {.stride = 2, .groups = 2}); }},
        {"conv2d_depthwise_pad1", {{{1, 3, 5, 5}}, {{3, 1, 3, 3}}},
         [](Graph& g, Params p) { return g.conv2d(p[0], p[1], std::nullopt, {.padding = 1, .groups = 3}); }},
        {"conv2d_1x1_stride2", {{{2, 3, 5, 5}}, {{2, 3, 1, 1}}},
         [](Graph& g, Params p) { return g.conv2d(p[0], p[1], std::nullopt, {.stride = 2}); }},
        {"conv1d_stride2_pad1_groups2", {{{2, 4, 9}}, {{6, 2, 3}}, {{6}}},
         [](Graph& g, Params p) { return g.conv1d(p[0], p[1], p[2], {.stride = 2, .padding = 1, .groups = 2}); }},
        // pooling, normalization, upsampling
        {"max_pool2d_k3_s2_p1", {{{2, 3, 7, 7}}}, [](Graph& g, Params p) { return g.max_pool2d(p[0], 3, 2, 1); }},
        {"max_pool2d_k2", {{{1, 2, 6, 5}}}, [](Graph& g, Params p) { return g.max_pool2d(p[0], 2); }},
        {"avg_pool2d_k3_s2_p1", {{{1, 2, 7, 5}}}, [](Graph& g, Params p) { return g.avg_pool2d(p[0], 3, 2, 1); }},
        {"global_avg_pool2d", {{{2, 3, 3, 5}}}, [](Graph& g, Params p) { return g.global_avg_pool2d(p[0]); }},
        {"upsample_nearest2x", {{{1, 2, 3, 5}}}, [](Graph& g, Params p) { return g.upsample_nearest2x(p[0]); }},
        {"batch_norm_train", {{{3, 4, 3, 5}}, {{4}}, {{4}}},
         [](Graph& g, Params p) { return g.batch_norm(p[0], p[1], p[2], std::nullopt, std::nullopt, true); }},
        {"batch_norm_eval", {{{2, 3, 3, 3}}, {{3}}, {{3}}, {{3}}, {{3}, 0.5, 2}},
         [](Graph& g, Params p) { return g.batch_norm(p[0], p[1], p[2], p[3], p[4], false); }},
        {"group_norm", {{{2, 6, 3, 5}}, {{6}}, {{6}}}, [](Graph& g, Params p) { return g.group_norm(p[0], 3, p[1], p[2]); }},
        // attention (more cases in attention_test.cpp)
        {"attention_causal_gqa", {{{1, 4, 3, 2}}, {{1, 2, 3, 2}}, {{1, 2, 3, 2}}},
         [](Graph& g, Params p) { return g.attention(p[0], p[1], p[2], {.causal = true}); }},
        // a value used more than once: its gradients add up
        {"fan_out", {kAny}, [](Graph& g, Params p) { return p[0] * p[0] + g.exp(p[0]) - p[0]; }},
        {"concat_of_itself", {{{2, 3}}, {{1, 3}}}, [](Graph& g, Params p) { return g.concat({p[0], p[1], p[0]}, 0); }},
        // transformer ops (ids repeat, so the embedding gradient sums rows)
        {"embedding", {{{5, 3}}}, [](Graph& g, Params p) { return g.embedding(g.input("ids", {2, 3}, DType::I32), p[0]); },
         {{"ids", {{2, 3}, {4, 0, 4, 1, 4, 2}}}}},
        {"rms_norm", {{{2, 3, 5}}, {{5}}}, [](Graph& g, Params p) { return g.rms_norm(p[0], p[1], 1e-5); }},
        {"layer_norm", {{{2, 3, 5}}, {{5}}, {{5}}}, [](Graph& g, Params p) { return g.layer_norm(p[0], p[1], p[2], 1e-5); }},
        {"rope", {{{2, 3, 6}}}, [](Graph& g, Params p) { return g.rope(p[0], g.input("positions", {3}, DType::I32), 100.0); },
         {{"positions", {{3}, {0, 5, 17}}}}},
        {"slice_scatter", {{{2, 5, 3}}, {{2, 2, 3}}},
         [](Graph& g, Params p) { return g.slice_scatter(p[0], p[1], 1, g.input("start", {}, DType::I32)); },
         {{"start", {{}, {2}}}}},
        {"slice_scatter_last_axis", {{{3, 4}}, {{3, 1}}},
         [](Graph& g, Params p) { return g.slice_scatter(p[0], p[1], -1, g.input("start", {}, DType::I32)); },
         {{"start", {{}, {3}}}}},
        {"mlp", {{{4, 5}}, {{6, 5}}, {{6}}, {{3, 6}}, {{3}}},
         [](Graph& g, Params p) { return cross_entropy_of(g, g.linear(g.relu(g.linear(p[0], p[1], p[2])), p[3], p[4])); },
         {{"labels", labels({2, 0, 1, 2})}}},
    };
    // matmul, every transpose combination of a [4, 5] @ b [5, 3]
    for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
            cases.push_back({std::string("matmul_") + (ta ? "t" : "n") + (tb ? "t" : "n"),
                             {{ta ? Shape{5, 4} : Shape{4, 5}}, {tb ? Shape{3, 5} : Shape{5, 3}}},
                             [ta, tb](Graph& g, Params p) { return g.matmul(p[0], p[1], ta, tb); }});
        }
    }
    // sum, mean and max of [2, 3, 4] over several axes, keepdim both ways
    using Reduce = Tensor (Graph::*)(Tensor, std::vector<int64_t>, bool);
    for (const auto& [name, fn] : std::vector<std::pair<std::string, Reduce>>{
             {"sum", &Graph::sum}, {"mean", &Graph::mean}, {"max", &Graph::max}}) {
        for (const std::vector<int64_t>& axes : std::vector<std::vector<int64_t>>{{}, {1}, {0, 2}, {-1}}) {
            for (bool keepdim : {false, true}) {
                cases.push_back({name + "_" + axes_name(axes) + (keepdim ? "_keepdim" : ""), {{{2, 3, 4}}},
                                 [fn, axes, keepdim](Graph& g, Params p) { return (g.*fn)(p[0], axes, keepdim); }});
            }
        }
    }
    return cases;
}

class FiniteDifferences : public ::testing::TestWithParam<Case> {};

TEST_P(FiniteDifferences, GradientsMatch) { expect_matches_finite_differences(GetParam()); }

const auto case_name = [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; };

INSTANTIATE_TEST_SUITE_P(Autodiff, FiniteDifferences, ::testing::ValuesIn(op_cases()), case_name);

// ---- regressions for the published bugs ----

TEST(AutodiffRegression, LogSoftmaxBackwardIsLogSoftmaxs) {
    for (int64_t axis : {0, 1, -1}) {
        SCOPED_TRACE(axis);
        expect_matches_finite_differences(
            {"log_softmax", {{{6, 5}, -6, 6}}, [axis](Graph& g, Params p) { return g.log_softmax(p[0], axis); }});
    }
}

TEST(AutodiffRegression, GeluBackwardMatchesItsOwnForward) {
    for (const char* approx : {"none", "tanh"}) {
        SCOPED_TRACE(approx);  // the approximations' slopes differ by up to ~1e-3, far above the tolerance
        expect_matches_finite_differences(
            {"gelu", {{{64}, -5, 5}}, [approx](Graph& g, Params p) { return g.gelu(p[0], approx); }});
    }
}

// A cube, so that reducing over a wrong axis still gives a gradient of the right shape.
TEST(AutodiffRegression, ReductionOverTheRightAxis) {
    using Reduce = Tensor (Graph::*)(Tensor, std::vector<int64_t>, bool);
    for (Reduce fn : {&Graph::sum, &Graph::mean, &Graph::max}) {
        for (int64_t axis : {0, 1, 2}) {
            for (bool keepdim : {false, true}) {
                SCOPED_TRACE(std::to_string(axis) + (keepdim ? " keepdim" : ""));
                expect_matches_finite_differences(
                    {"reduce", {{{4, 4, 4}}}, [=](Graph& g, Params p) { return (g.*fn)(p[0], {axis}, keepdim); }});
            }
        }
    }
}

// Reductions of reductions, scaled: each one's upstream gradient is neither 1 nor uniform.
TEST(AutodiffRegression, UpstreamGradientReachesThroughReductions) {
    expect_matches_finite_differences({"chained", {{{3, 4, 5}}}, [](Graph& g, Params p) {
                                           return g.mean(g.sum(p[0] * 2.5, {2}, true) * p[0], {0}) * 0.75;
                                       }});
    expect_matches_finite_differences({"scaled_total", {kAny}, [](Graph& g, Params p) { return g.sum(p[0]) * 3.0; }});
}

TEST(AutodiffRegression, CrossEntropyWith257Classes) {
    expect_matches_finite_differences({"cross_entropy", {{{3, 257}, -5, 5}}, kCrossEntropy,
                                       {{"labels", labels({0, 256, 100})}}});
}

// ---- zero gradients, pruning, errors ----

int count(const Graph& g, Op op) {
    return static_cast<int>(std::count_if(g.nodes().begin(), g.nodes().end(), [op](const Node& n) { return n.op == op; }));
}

TEST(AutodiffPruning, ParameterTheLossIgnoresGetsZeros) {
    Graph g;
    Tensor x = g.parameter("x", {3, 5});
    Tensor unused = g.parameter("unused", {2, 7});
    Tensor loss = g.sum(g.exp(x));
    const auto grads = grad(loss, {unused, x});
    ASSERT_EQ(grads.size(), 2u);
    ASSERT_EQ(grads[0].shape(), (Shape{2, 7}));
    ref::Feeds feeds{{"x", {{3, 5}, std::vector<double>(15, 0.5)}}, {"unused", {{2, 7}, std::vector<double>(14, 1.0)}}};
    const auto values = ref::evaluate(g, feeds);
    EXPECT_EQ(values[static_cast<size_t>(grads[0].id)].data, std::vector<double>(14, 0.0));
    EXPECT_NEAR(values[static_cast<size_t>(grads[1].id)].data[3], std::exp(0.5), 1e-12);
}

// loss = sum(relu(x @ W)) + sum(exp(y)) with respect to W alone: neither exp's derivative (the
// branch reaches only y) nor x's matmul gradient may be built.
TEST(AutodiffPruning, BranchesThatReachNoWantedParameterAreNotBuilt) {
    Graph g;
    Tensor x = g.parameter("x", {4, 5});
    Tensor w = g.parameter("W", {5, 3});
    Tensor y = g.parameter("y", {3, 5});
    Tensor loss = g.sum(g.relu(g.matmul(x, w))) + g.sum(g.exp(y));
    ASSERT_EQ(count(g, Op::Exp), 1);
    ASSERT_EQ(count(g, Op::MatMul), 1);
    const auto grads = grad(loss, {w});
    ASSERT_EQ(grads.size(), 1u);
    EXPECT_EQ(grads[0].shape(), (Shape{5, 3}));
    EXPECT_EQ(count(g, Op::Exp), 1) << g.str();
    EXPECT_EQ(count(g, Op::MatMul), 2) << g.str();  // x^T @ upstream only
}

// An op without a rule is an error only on a path to a wanted parameter.
TEST(AutodiffErrors, OpWithoutARuleIsNamedOnlyWhenItMatters) {
    Graph g;
    Tensor x = g.parameter("x", {3});
    Tensor y = g.parameter("y", {3});
    Tensor loss = g.sum(g.gelu_deriv(y)) + g.sum(x * x);
    EXPECT_EQ(grad(loss, {x}).size(), 1u);
    try {
        grad(loss, {y});
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("gelu_deriv"), std::string::npos) << e.what();
    }
}

TEST(AutodiffErrors, LossMustBeAScalar) {
    Graph g;
    Tensor x = g.parameter("x", {3});
    EXPECT_THROW(grad(g.exp(x), {x}), Error);
}

// ---- coverage, read from ops.def ----

// Every op ops.def marks Vjp has a finite-difference case, which checks its rule (autodiff.cpp's switch names
// every op, -Werror=switch; a NoVjp op is refused: AutodiffErrors above).
TEST(AutodiffCoverage, EveryRuleHasAFiniteDifferenceCase) {
    std::set<Op> tested;
    for (const Case& c : op_cases()) {
        const Built b = forward(c);
        for (const Node& n : b.g->nodes()) tested.insert(n.op);
    }
    for (int i = 0; i < kOpCount; ++i) {
        const Op op = static_cast<Op>(i);
        if (op_info(op).differentiable) EXPECT_TRUE(tested.contains(op)) << op_info(op).name;
    }
}

// ---- the GPU's backward graphs against the reference's, one per op family ----

class GpuBackward : public GpuTest, public ::testing::WithParamInterface<Case> {};

TEST_P(GpuBackward, BackwardMatchesReference) {
    Built b = forward(GetParam());
    b.grads = grad(b.loss, b.params);
    b.g->output("loss", b.loss);
    for (size_t i = 0; i < b.grads.size(); ++i) b.g->output("grad." + param_name(i), b.grads[i]);
    expect_matches_reference(*b.g, b.feeds);
}

std::vector<Case> gpu_cases() {
    std::vector<double> label_values;
    for (int i = 0; i < 33; ++i) label_values.push_back((i * 37) % 257);
    std::vector<double> some_ignored = label_values;
    for (size_t i = 0; i < some_ignored.size(); i += 3) some_ignored[i] = Graph::kIgnoreIndex;
    return {
        {"unary_chain", {{{7, 33}, -3, 3}}, [](Graph& g, Params p) {
             Tensor x = p[0];
             return g.gelu(g.tanh(x), "tanh") * g.silu(x) + g.gelu(x) * g.sigmoid(x) + g.relu(x) - g.abs(x) +
                    g.sqrt(g.exp(-x)) + g.log(g.rsqrt(x * x + 1.0));
         }},
        {"broadcast_binary", {{{2, 7, 33}}, {{7, 1}, 0.5, 2}, {{33}}}, [](Graph& g, Params p) {
             return (p[0] + p[1]) * p[2] / p[1] - g.maximum(p[0], p[2]) + g.minimum(p[1], p[0]) +
                    g.pow(p[0] * p[0] + 0.5, p[2]);
         }},
        {"matmul_batched_transposed", {{{3, 9, 17}}, {{2, 1, 13, 9}}},
         [](Graph& g, Params p) { return g.matmul(p[0], p[1], true, true); }},
        {"linear", {{{5, 33}}, {{7, 33}}, {{7}}}, [](Graph& g, Params p) { return g.linear(p[0], p[1], p[2]); }},
        {"reductions", {{{3, 7, 33}}}, [](Graph& g, Params p) {
             return g.sum(p[0], {1}) * g.mean(p[0], {1}) + g.sum(g.max(p[0], {0, 2}, true) * p[0], {1}) +
                    g.max(p[0], {1});
         }},
        {"softmax", {{{5, 257}, -5, 5}}, [](Graph& g, Params p) { return g.softmax(p[0]) * g.log_softmax(p[0], 0); }},
        {"cross_entropy", {{{33, 257}, -5, 5}}, kCrossEntropy, {{"labels", labels(label_values)}}},
        {"cross_entropy_ignored", {{{33, 257}, -5, 5}}, kCrossEntropy, {{"labels", labels(some_ignored)}}},
        {"transformer_ops", {{{11, 34}}, {{34}, 0.5, 2}, {{34}}, {{34}}}, [](Graph& g, Params p) {
             Tensor h = g.rms_norm(g.embedding(g.input("ids", {2, 7}, DType::I32), p[0]), p[1], 1e-5);
             h = g.rope(g.reshape(h, {2, 1, 7, 34}), g.input("positions", {7}, DType::I32), 1000.0);
             return g.layer_norm(h, p[2], p[3], 1e-5);
         }, {{"ids", {{2, 7}, {3, 0, 3, 10, 5, 3, 0, 1, 2, 3, 4, 5, 6, 10}}}, {"positions", {{7}, {0, 1, 2, 3, 40, 41, 900}}}}},
        {"slice_scatter", {{{2, 3, 9, 5}}, {{2, 3, 2, 5}}},
         [](Graph& g, Params p) { return g.slice_scatter(p[0], p[1], 2, g.input("start", {}, DType::I32)); },
         {{"start", {{}, {6}}}}},
        {"conv2d_groups2_stride2_pad1", {{{2, 4, 9, 11}}, {{6, 2, 3, 3}}, {{6}}},
         [](Graph& g, Params p) { return g.conv2d(p[0], p[1], p[2], {.stride = 2, .padding = 1, .groups = 2}); }},
        {"conv2d_dilation2_wide", {{{2, 37, 7, 9}}, {{67, 37, 3, 3}}},
         [](Graph& g, Params p) { return g.conv2d(p[0], p[1], std::nullopt, {.padding = 2, .dilation = 2}); }},
        // few channels over many pixels: the weight gradient splits its K across workgroups
        {"conv2d_split_k_weight_grad", {{{2, 3, 33, 31}}, {{4, 3, 3, 3}}},
         [](Graph& g, Params p) { return g.conv2d(p[0], p[1], std::nullopt, {.padding = 1}); }},
        {"conv1d", {{{2, 5, 17}}, {{7, 5, 3}}}, [](Graph& g, Params p) { return g.conv1d(p[0], p[1], std::nullopt, {.stride = 2}); }},
        {"max_pool2d", {{{2, 3, 9, 7}}}, [](Graph& g, Params p) { return g.max_pool2d(p[0], 3, 2, 1); }},
        {"norms_and_pools", {{{2, 6, 6, 5}}, {{6}}, {{6}}}, [](Graph& g, Params p) {
             Tensor h = g.batch_norm(p[0], p[1], p[2], std::nullopt, std::nullopt, true);
             h = g.group_norm(g.silu(h), 2, p[1], p[2]);
             return g.upsample_nearest2x(g.avg_pool2d(h, 2)) + g.global_avg_pool2d(h);
         }},
        {"data_movement", {{{2, 7, 33}}, {{2, 3, 33}}, {{1, 33}}}, [](Graph& g, Params p) {
             Tensor a = g.slice(p[0], 1, 1, 6, 2);
             Tensor b = g.permute(g.reshape(p[1], {2, 33, 3}), {0, 2, 1});
             return g.flatten(g.concat({a, b, g.expand(p[2], {2, 3, 33})}, 1));
         }},
    };
}

INSTANTIATE_TEST_SUITE_P(Autodiff, GpuBackward, ::testing::ValuesIn(gpu_cases()), case_name);

}  // namespace
}  // namespace mn::test
