// Differential tests (issue 11): random small models, forward and backward on the GPU, against the
// float64 reference, every parameter's gradient within 1e-4 relative L2. Two families:
//  - convolutional: conv / batch-norm (folded eval, eval, training) / ReLU / residual blocks, at
//    batch > 1, odd and even sizes, strides 1 and 2, max pooling, random running statistics;
//  - transformer: embeddings, RMS or layer norm, RoPE, attention with grouped-query heads and causal
//    or sliding-window masks, a SiLU or GELU MLP.
//
// A case whose float64 run puts a decision within float32's reach of its threshold (a ReLU input
// within 1e-5 of its tensor's largest, a near-tie in a max-pool window; exact ties and zeros are
// exact in float32 too, and decided alike) is ill-conditioned: float32
// arithmetic may take either side there, PyTorch's float32 as well, and a gradient then differs by
// design (issue 11's ResNet-50 reproducer is such a case). Those seeds are drawn again, and counted.
#include <algorithm>
#include <cmath>
#include <random>

#include "gpu_check.hpp"
#include "meganeura/autodiff.hpp"

namespace mn::test {
namespace {

constexpr double kGradientLimit = 1e-4;
constexpr double kDecisionMargin = 1e-5;  // relative to the argument's largest magnitude

struct Rng {
    std::mt19937_64 engine;
    int64_t pick(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(engine); }
    bool coin() { return pick(0, 1) == 1; }
};

// Every gradient of `loss` with respect to the graph's parameters, as outputs "grad.<name>".
void output_gradients(Graph& g, Tensor loss) {
    std::vector<Tensor> params;
    for (int32_t id = 0; id < static_cast<int32_t>(g.nodes().size()); ++id) {
        if (g.node(id).op == Op::Parameter) params.push_back(g.handle(id));
    }
    const std::vector<Tensor> grads = grad(loss, params);
    for (size_t i = 0; i < params.size(); ++i) g.output("grad." + g.node(params[i]).name, grads[i]);
}

// ---- the convolutional family ----

struct ConvBuilder {
    Graph& g;
    Rng& rng;
    int mode;  // batch norm: 0 folded into the convolution (ResNet's eval), 1 eval, 2 training
    int layers = 0;

    Tensor conv_bn(Tensor x, int64_t out, int64_t k, int64_t stride) {
        const std::string p = "l" + std::to_string(layers++);
        const int64_t in = x.shape()[1];
        const ConvOptions o{.stride = stride, .padding = k / 2};
        const Tensor w = g.parameter(p + ".weight", {out, in, k, k});
        const Tensor gamma = g.parameter(p + ".gamma", {out}), beta = g.parameter(p + ".beta", {out});
        const Tensor mean = g.state(p + ".running_mean", {out}), var = g.state(p + ".running_var", {out});
        if (mode == 0) {
            const Tensor scale = gamma * g.rsqrt(var + 1e-5);
            return g.conv2d(x, w * g.reshape(scale, {out, 1, 1, 1}), beta - mean * scale, o);
        }
        return g.batch_norm(g.conv2d(x, w, std::nullopt, o), gamma, beta, mean, var, mode == 2);
    }

    Tensor block(Tensor x, int64_t planes, int64_t stride) {
        Tensor h = g.relu(conv_bn(x, planes, 1, 1));
        h = conv_bn(h, planes, 3, stride);
        const bool same = stride == 1 && x.shape()[1] == planes;
        return g.relu(h + (same ? x : conv_bn(x, planes, 1, stride)));
    }
};

Tensor build_conv_model(Graph& g, Rng& rng) {
    ConvBuilder b{g, rng, static_cast<int>(rng.pick(0, 2))};
    const int64_t hw = rng.pick(5, 11);
    Tensor h = g.input("images", {rng.pick(2, 3), rng.pick(1, 3), hw, hw});
    h = g.relu(b.conv_bn(h, rng.pick(3, 6), 3, rng.pick(1, 2)));
    if (rng.coin()) h = g.max_pool2d(h, 3, 2, 1);
    for (int64_t i = rng.pick(1, 2); i-- > 0;) h = b.block(h, rng.pick(2, 6), rng.pick(1, 2));
    h = g.flatten(g.global_avg_pool2d(h));
    const int64_t classes = rng.pick(3, 5);
    const Tensor logits = g.linear(h, g.parameter("fc.weight", {classes, h.shape()[1]}), g.parameter("fc.bias", {classes}));
    g.output("logits", logits);
    return g.cross_entropy(logits, g.input("labels", {h.shape()[0]}, DType::I32));
}

// ---- the transformer family ----

Tensor build_transformer_model(Graph& g, Rng& rng) {
    const int64_t batch = rng.pick(1, 2), t = rng.pick(3, 9), vocab = rng.pick(13, 29);
    const int64_t hq = rng.pick(0, 1) ? 4 : 2, hkv = hq / (rng.coin() ? 2 : 1), hd = rng.coin() ? 8 : 4;
    const int64_t d = hq * hd;
    const bool rms = rng.coin();
    const Tensor ids = g.input("input_ids", {batch, t}, DType::I32);
    const Tensor positions = g.input("positions", {t}, DType::I32);
    int norms = 0;
    auto norm = [&](Tensor x) {
        const std::string p = "norm" + std::to_string(norms++);
        const Tensor w = g.parameter(p + ".weight", {d});
        return rms ? g.rms_norm(x, w) : g.layer_norm(x, w, g.parameter(p + ".bias", {d}));
    };
    auto heads = [&](Tensor x, const std::string& name, int64_t count) {  // [B, T, D] -> [B, count, T, hd]
        const Tensor y = g.linear(x, g.parameter(name, {count * hd, d}));
        return g.transpose(g.reshape(y, {batch, t, count, hd}), 1, 2);
    };
    Tensor h = g.embedding(ids, g.parameter("embed.weight", {vocab, d}));
    for (int64_t layer = rng.pick(1, 2), i = 0; i < layer; ++i) {
        const std::string p = "layer" + std::to_string(i) + ".";
        const Tensor a = norm(h);
        const Tensor q = g.rope(heads(a, p + "q.weight", hq), positions);
        const Tensor k = g.rope(heads(a, p + "k.weight", hkv), positions);
        const bool causal = rng.coin();  // a sliding window needs the causal mask
        const AttentionOptions o{.causal = causal, .window = causal && rng.coin() ? rng.pick(2, t) : 0};
        const Tensor att = g.attention(q, k, heads(a, p + "v.weight", hkv), o);
        h = h + g.linear(g.reshape(g.transpose(att, 1, 2), {batch, t, d}), g.parameter(p + "o.weight", {d, d}));
        const Tensor up = g.linear(norm(h), g.parameter(p + "up.weight", {2 * d, d}));
        h = h + g.linear(rng.coin() ? g.silu(up) : g.gelu(up), g.parameter(p + "down.weight", {d, 2 * d}));
    }
    const Tensor logits = g.reshape(g.linear(norm(h), g.parameter("head.weight", {vocab, d})), {batch * t, vocab});
    g.output("logits", logits);
    return g.cross_entropy(logits, g.input("labels", {batch * t}, DType::I32));
}

// ---- feeds and conditioning ----

// Parameters and images uniform in [-1, 1); batch-norm gammas in [0.5, 1.5), running means in
// [-0.2, 0.2) and variances in [0.5, 1.5); ids, labels and positions in range.
ref::Feeds feeds_for(const Graph& g, uint64_t seed) {
    ref::Feeds feeds = random_feeds(g, seed, {-1, 1});
    std::mt19937_64 rng(seed ^ 0x5eed);
    auto fill = [&](ref::Value& v, double lo, double hi) {
        std::uniform_real_distribution<double> d(lo, hi);
        for (double& x : v.data) x = static_cast<float>(d(rng));
    };
    const auto classes = static_cast<uint64_t>(g.node(*g.find("logits")).shape[1]);  // the vocabulary, for ids
    for (const Node& n : g.nodes()) {
        const std::string& name = n.name;
        ref::Value v{n.shape, std::vector<double>(static_cast<size_t>(numel(n.shape)))};
        if (name.ends_with(".running_mean")) {
            fill(v, -0.2, 0.2);
        } else if (name.ends_with(".running_var") || name.ends_with(".gamma") ||
                   (name.starts_with("norm") && name.ends_with(".weight"))) {
            fill(v, 0.5, 1.5);
        } else if (name == "labels" || name == "input_ids") {
            for (double& x : v.data) x = static_cast<double>(rng() % classes);
        } else if (name == "positions") {
            for (size_t i = 0; i < v.data.size(); ++i) v.data[i] = static_cast<double>(i);
        } else {
            continue;
        }
        feeds[name] = std::move(v);
    }
    return feeds;
}

double largest(const std::vector<double>& x) {
    double m = 0;
    for (double v : x) m = std::max(m, std::fabs(v));
    return m;
}

// The smallest distance of a decision from its threshold in the float64 run, relative to the
// argument's largest magnitude: greater / equal / sign arguments, and the gap between the two largest
// values of each max-pool window.
double decision_margin(const Graph& g, const std::vector<ref::Value>& values) {
    double margin = INFINITY;
    for (const Node& n : g.nodes()) {
        const auto& a = values[static_cast<size_t>(n.inputs.empty() ? 0 : n.inputs[0])].data;
        if (n.op == Op::Greater || n.op == Op::Equal || n.op == Op::Sign) {
            const auto& b = n.op == Op::Sign ? std::vector<double>{0.0} : values[static_cast<size_t>(n.inputs[1])].data;
            const double scale = std::max(largest(a), largest(b));
            for (size_t i = 0; i < a.size() && scale > 0; ++i) {
                const double gap = std::fabs(a[i] - b[b.size() == 1 ? 0 : i]);
                if (gap > 0) margin = std::min(margin, gap / scale);
            }
        } else if (n.op == Op::MaxPool2dGrad) {
            const Shape& x = g.node(n.inputs[0]).shape;
            const int64_t k = n.ints[0], stride = n.ints[1], pad = n.ints[2], h = x[2], w = x[3];
            const int64_t oh = (h + 2 * pad - k) / stride + 1, ow = (w + 2 * pad - k) / stride + 1;
            const double scale = largest(a);
            for (int64_t plane = 0; plane < x[0] * x[1]; ++plane) {
                for (int64_t i = 0; i < oh * ow; ++i) {
                    double first = -INFINITY, second = -INFINITY;
                    for (int64_t dy = 0; dy < k; ++dy) {
                        for (int64_t dx = 0; dx < k; ++dx) {
                            const int64_t y = i / ow * stride - pad + dy, xx = i % ow * stride - pad + dx;
                            if (y < 0 || y >= h || xx < 0 || xx >= w) continue;
                            const double v = a[static_cast<size_t>((plane * h + y) * w + xx)];
                            if (v > first) second = first, first = v;
                            else second = std::max(second, v);
                        }
                    }
                    if (first > second && second > -INFINITY && scale > 0) margin = std::min(margin, (first - second) / scale);
                }
            }
        }
    }
    return margin;
}

// `cases` well-conditioned random models of one family: each one's logits, loss and every gradient
// within kGradientLimit relative L2 of the float64 reference. At most one seed in four may be drawn
// again for its conditioning.
void expect_family_matches_reference(Tensor (*build)(Graph&, Rng&), uint64_t first_seed, int cases) {
    int passed = 0, redrawn = 0;
    for (uint64_t seed = first_seed; passed < cases; ++seed) {
        Rng rng{std::mt19937_64(seed)};
        Graph g;
        const Tensor loss = build(g, rng);
        g.output("loss", loss);
        output_gradients(g, loss);
        const ref::Feeds feeds = feeds_for(g, seed);
        const std::vector<ref::Value> want = ref::evaluate(g, feeds);
        if (decision_margin(g, want) < kDecisionMargin) {
            ++redrawn;
            ASSERT_LE(redrawn * 4, cases) << "too many ill-conditioned seeds";
            continue;
        }
        Session s = compile(g, device(), {.poison_outputs = true});
        set_feeds(s, g, feeds);
        s.run();
        for (const auto& [name, id] : g.outputs()) {
            EXPECT_LE(relative_l2(s.get(name), want[static_cast<size_t>(id)].data), kGradientLimit)
                << "seed " << seed << ", output '" << name << "' of\n" << g.str();
        }
        ++passed;
    }
}

using DifferentialTest = GpuTest;

TEST_F(DifferentialTest, ConvolutionalModelsMatchTheReference) { expect_family_matches_reference(build_conv_model, 1000, 16); }

TEST_F(DifferentialTest, TransformerModelsMatchTheReference) {
    expect_family_matches_reference(build_transformer_model, 2000, 16);
}

}  // namespace
}  // namespace mn::test
