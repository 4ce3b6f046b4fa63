#include "models/generation.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "common/parallel.hpp"
#include "models/lora.hpp"
#include "models/runner.hpp"

namespace mn::models {

namespace {

// The first index of the largest logit (std::max_element's, for logits without NaN): the maximum first, in lanes that
// need no branch, then its first index; std::max_element's compare-and-branch over SmolLM2's 49,152 logits took a
// decode step's host tens of microseconds.
int32_t argmax(const float* logits, int64_t vocab) {
    constexpr int64_t kLanes = 16;
    float lane[kLanes];
    std::fill(lane, lane + kLanes, logits[0]);
    int64_t i = 0;
    for (; i + kLanes <= vocab; i += kLanes) {
        for (int64_t j = 0; j < kLanes; ++j) lane[j] = lane[j] < logits[i + j] ? logits[i + j] : lane[j];
    }
    float top = *std::max_element(lane, lane + kLanes);
    for (; i < vocab; ++i) top = top < logits[i] ? logits[i] : top;
    return static_cast<int32_t>(std::find(logits, logits + vocab, top) - logits);
}

}  // namespace

int32_t Sampler::next(const float* logits, int64_t vocab) {
    if (o_.temperature <= 0) return argmax(logits, vocab);
    // Candidates by logit, largest first (ties by id), cut to top_k, then to the top_p mass.
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
    const auto k = static_cast<size_t>(o_.top_k > 0 ? std::min(o_.top_k, vocab) : vocab);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    order.resize(k);
    std::vector<double> p(k);
    const double top = logits[order[0]] / o_.temperature;
    for (size_t i = 0; i < k; ++i) p[i] = std::exp(logits[order[i]] / o_.temperature - top);
    const double total = std::accumulate(p.begin(), p.end(), 0.0);
    size_t keep = 0;
    for (double mass = 0; keep < k && (keep == 0 || mass < o_.top_p * total);) mass += p[keep++];
    p.resize(keep);
    std::discrete_distribution<size_t> pick(p.begin(), p.end());
    return order[pick(rng_)];
}

namespace {

// The configuration whose programs generate: without its adapter, which merge_adapter folds into the weights.
LlamaConfig without_adapter(LlamaConfig c) {
    c.lora = {};
    return c;
}

// Each module that c.lora adapts gets W + (alpha / r) B A in place of W (merge_lora), its A and B from `adapter` (by
// graph parameter name, as a LoRA graph names them): where generation runs W x + (alpha / r) B (A x) as it trains, a
// decode step of SmolLM2-135M took 1.11 against 0.82 ms with the adapter (H100, 2026-12-06: its two products a module
// are two more dispatches and levels a step), and merged it runs the base model's program.
void merge_adapter(Session& s, const Graph& base, const LoraConfig& lora, const io::TensorMap& adapter) {
    struct Module {
        std::string name;
        std::vector<float> a, b;
    };
    std::vector<Module> modules;
    std::set<std::string> expected;
    auto tensor = [&](const std::string& name, const Shape& shape) {
        expected.insert(name);
        const auto it = adapter.find(name);
        if (it == adapter.end()) throw Error("the adapter has no tensor '" + name + "'");
        if (it->second.shape != shape)
            throw Error("the adapter's '" + name + "' is " + shape_str(it->second.shape) + ", the model needs " + shape_str(shape));
        return it->second.to_f32("adapter tensor '" + name + "'");
    };
    for (const Node& n : base.nodes()) {
        const std::string suffix = ".weight";
        if (n.op != Op::Parameter || !n.name.ends_with(suffix)) continue;
        const std::string module = n.name.substr(0, n.name.size() - suffix.size());
        if (!lora.applies(module) || n.shape.size() != 2) continue;
        modules.push_back({module, tensor(module + ".lora_A.weight", {lora.rank, n.shape[1]}),
                           tensor(module + ".lora_B.weight", {n.shape[0], lora.rank})});
    }
    for (const auto& [name, t] : adapter)
        if (!expected.count(name)) throw Error("the adapter's '" + name + "' is not a module of this model with an adapter");
    std::vector<std::string> names;
    for (const Module& m : modules) names.push_back(m.name + ".weight");
    std::map<std::string, std::vector<float>> weights = s.get(names);  // one transfer each way
    parallel_for(modules.size(), [&](size_t k) {
        merge_lora(weights.at(names[k]), modules[k].a, modules[k].b, lora.rank, lora.scale());
    });
    s.set(weights);
}

}  // namespace

Generator::Generator(const Device& device, const LlamaConfig& c, int64_t prompt_len, int64_t cache_len,
                     const std::vector<std::string>& weights, const io::TensorMap& adapter, Precision precision)
    : c_(without_adapter(c)), prompt_len_(prompt_len), prefill_model_(build_llama_cached(c_, 1, prompt_len, cache_len)),
      decode_model_(build_llama_cached(c_, 1, 1, cache_len)), logits_(static_cast<size_t>(c.vocab)) {
    check_fits_device(*prefill_model_.graph, device, "smollm2");
    // The prefill's parameters come from the weights and the adapter where there are weights, the decode step's
    // from the prefill: neither draws initial values it would overwrite.
    CompileOptions options{.precision = precision, .read_back = std::vector<std::string>{"logits"}};
    if (!weights.empty()) options.skip_init = CompileOptions::every_parameter;
    prefill_ = compile(*prefill_model_.graph, device, options);
    options.skip_init = CompileOptions::every_parameter;
    decode_ = compile(*decode_model_.graph, device, options);
    if (!weights.empty()) prefill_.load(weights);
    if (c.lora.on()) merge_adapter(prefill_, *prefill_model_.graph, c.lora, adapter);
    std::vector<std::string> params;
    for (const Node& n : prefill_model_.graph->nodes())
        if (n.op == Op::Parameter) params.push_back(n.name);
    prefill_.copy_to(decode_, params);  // the random initialization too, when there are no weights
}

std::vector<float> Generator::prefill(const std::vector<int32_t>& prompt) {
    prefill_.set("input_ids", prompt);
    prefill_.set("position", std::vector<int32_t>{0});
    prefill_.run();
    std::vector<std::string> cache;
    for (int64_t l = 0; l < c_.layers; ++l)
        for (const char* which : {"k", "v"}) cache.push_back(cache_name(l, which));
    prefill_.copy_to(decode_, cache);
    const std::vector<float> logits = prefill_.get("logits");
    return {logits.end() - c_.vocab, logits.end()};
}

std::span<const float> Generator::decode(int32_t token, int64_t position) {
    decode_.set("input_ids", std::vector<int32_t>{token});
    decode_.set("position", std::vector<int32_t>{static_cast<int32_t>(position)});
    decode_.run();
    decode_.get("logits", logits_);
    return logits_;
}

}  // namespace mn::models
