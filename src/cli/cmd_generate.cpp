// `meganeura generate`: greedy decoding with a KV cache. One program prefills the prompt (writing
// every layer's keys and values into the cache), a second one, compiled from the same builder with
// the same weights, decodes one token per run at a run-time position.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "cli/commands.hpp"
#include "meganeura/session.hpp"
#include "models/runner.hpp"
#include "models/smollm2.hpp"

namespace mn::cli {

namespace {

std::vector<int32_t> parse_tokens(const std::string& text) {
    std::vector<int32_t> tokens;
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (item.empty() || used != item.size() || v < 0 || v > INT32_MAX) {
            throw Error("--tokens must be comma-separated token ids, got '" + item + "'");
        }
        tokens.push_back(static_cast<int32_t>(v));
    }
    if (tokens.empty()) throw Error("--tokens needs at least one token id");
    return tokens;
}

// The id of the largest logit in row `row` of logits [1, T, vocab] (the first one on ties).
int32_t argmax_row(const std::vector<float>& logits, int64_t row, int64_t vocab) {
    const auto begin = logits.begin() + row * vocab;
    return static_cast<int32_t>(std::max_element(begin, begin + vocab) - begin);
}

int run_generate(const Flags& f) {
    (void)f.choice("model", {"smollm2"});
    const std::string& size = f.choice("size", {"tiny", "full"});
    const std::vector<int32_t> prompt = parse_tokens(f.str("tokens"));
    const int64_t max_new = f.integer("max-new", 1, INT32_MAX);
    const models::LlamaConfig c = models::LlamaConfig::from_request({.size = size, .config_path = f.str("config")});
    for (int32_t t : prompt) {
        if (t >= c.vocab) throw Error("token id " + std::to_string(t) + " is outside the vocabulary of " + std::to_string(c.vocab));
    }
    const auto prompt_len = static_cast<int64_t>(prompt.size());
    const int64_t cache_len = prompt_len + max_new;
    if (cache_len > c.max_positions) {
        throw Error(std::to_string(cache_len) + " positions exceed max_position_embeddings " + std::to_string(c.max_positions));
    }

    const Device device = Device::open();
    const models::BuiltModel prefill_model = models::build_llama_cached(c, 1, prompt_len, cache_len);
    const models::BuiltModel decode_model = models::build_llama_cached(c, 1, 1, cache_len);
    models::check_fits_device(*prefill_model.graph, device, "smollm2");
    Session prefill = compile(*prefill_model.graph, device);
    Session decode = compile(*decode_model.graph, device);
    if (!f.str("weights").empty()) {
        prefill.load(f.str("weights"));
        decode.load(f.str("weights"));
    } else {
        std::fprintf(stderr, "meganeura generate: no --weights, using the random initialization\n");
    }

    prefill.set("input_ids", prompt);
    prefill.set("position", std::vector<int32_t>{0});
    prefill.run();
    for (int64_t l = 0; l < c.layers; ++l) {
        for (const char* which : {"k", "v"}) {
            const std::string name = models::cache_name(l, which);
            decode.set(name, prefill.get(name));
        }
    }
    std::vector<int32_t> generated = {argmax_row(prefill.get("logits"), prompt_len - 1, c.vocab)};
    for (int64_t pos = prompt_len; static_cast<int64_t>(generated.size()) < max_new; ++pos) {
        decode.set("input_ids", std::vector<int32_t>{generated.back()});
        decode.set("position", std::vector<int32_t>{static_cast<int32_t>(pos)});
        decode.run();
        generated.push_back(argmax_row(decode.get("logits"), 0, c.vocab));
    }
    for (size_t i = 0; i < generated.size(); ++i) std::printf("%s%d", i ? "," : "", generated[i]);
    std::printf("\n");
    return 0;
}

}  // namespace

const Command generate_command = {
    .name = "generate",
    .summary = "greedy decoding with a KV cache: prompt token ids in, generated token ids out",
    .description = "Decodes greedily with a KV cache: one program prefills the prompt, a second one decodes one\n"
                   "token per run, both on the same weights. Prints the generated token ids, comma-separated.",
    .options = {{"model", "smollm2", "NAME", "the causal LM (smollm2)"},
                {"weights", "", "FILE", "safetensors weights (default: random initialization, with a warning)"},
                {"tokens", "", "IDS", "the prompt as comma-separated token ids, e.g. 1,2,3 (required)"},
                {"max-new", "20", "N", "tokens to generate"},
                {"size", "full", "SIZE", "full (the published configuration) or tiny"},
                {"config", "", "FILE", "a Hugging Face config.json, overriding --size's configuration"}},
    .run = run_generate,
};

}  // namespace mn::cli
