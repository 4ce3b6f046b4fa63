// `meganeura generate`: a causal LM continues a prompt (models/generation.hpp), the text streamed as
// it comes, greedy unless sampling is asked for (or the model folder's generation_config.json does
// sample), until an end-of-sequence token or --max-new tokens; then llama.cpp's timing line.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "cli/commands.hpp"
#include "cli/model_arg.hpp"
#include "cli/token_ids.hpp"
#include "io/tokenizer.hpp"
#include "models/generation.hpp"
#include "train/peft.hpp"

namespace mn::cli {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); }

// The sampling options: the flags where given, else the folder's generation_config.json when it
// samples (do_sample), else greedy.
models::SamplingOptions sampling(const Flags& f, const ModelArg& m) {
    models::SamplingOptions o{.seed = static_cast<uint64_t>(f.integer("seed", 0))};
    if (m.folder && m.folder->generation.do_sample) {
        o.temperature = m.folder->generation.temperature;
        o.top_k = m.folder->generation.top_k;
        o.top_p = m.folder->generation.top_p;
    }
    if (!f.str("temperature").empty()) o.temperature = f.real("temperature", 0, 100);
    else if (o.temperature == 0 && (!f.str("top-k").empty() || !f.str("top-p").empty())) o.temperature = 1;
    if (!f.str("top-k").empty()) o.top_k = f.integer("top-k", 0, INT32_MAX);
    if (!f.str("top-p").empty()) o.top_p = f.real("top-p", 0, 1);
    if (o.top_p <= 0) throw Error("option --top-p is 0: no token could be sampled (give a value above 0)");
    return o;
}

// Prints the text of each generated token as it comes, whole UTF-8 characters only (a character
// may take several tokens), or the ids, comma-separated, when there is no tokenizer. The text is
// Hugging Face's decode of the prompt and the generated ids together: valid UTF-8, each ill-formed
// sequence of their bytes one U+FFFD (it wrote the bytes as they were).
class Streamer {
public:
    explicit Streamer(const io::Tokenizer* t) : t_(t) {}
    void put(int32_t id) {
        if (t_) {
            write(t_->decode_bytes({id}, true));
        } else {
            std::printf("%s%d", first_ ? "" : ",", id);
            std::fflush(stdout);
        }
        first_ = false;
    }
    void put_prompt(const std::vector<int32_t>& ids) {
        if (t_) write(t_->decode_bytes(ids, true));
    }
    void finish() {
        const std::string text = io::valid_utf8(pending_);
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::printf("\n");
        std::fflush(stdout);
    }

private:
    void write(const std::string& bytes) {
        pending_ += bytes;
        const size_t whole = io::complete_utf8_prefix(pending_);
        const std::string text = io::valid_utf8(std::string_view(pending_).substr(0, whole));
        std::fwrite(text.data(), 1, text.size(), stdout);
        pending_.erase(0, whole);
        std::fflush(stdout);
    }

    const io::Tokenizer* t_;
    std::string pending_;
    bool first_ = true;
};

int run_generate(const Flags& f) {
    const ModelArg m = model_arg(f);
    if (m.name != "smollm2") throw Error("generate runs causal LMs (smollm2, or a Llama / Qwen2 folder), not " + m.name);
    models::LlamaConfig c = models::LlamaConfig::from_request(m.request);
    std::optional<train::Adapter> adapter;
    if (!f.str("adapter").empty()) {
        if (!m.folder) throw Error("--adapter needs the base model as a folder (-m DIR)");
        adapter = train::read_adapter(f.str("adapter"));
        c.lora = adapter->lora;
    }
    const models::SamplingOptions options = sampling(f, m);
    std::optional<io::Tokenizer> tokenizer;
    if (m.folder && !m.folder->tokenizer.empty()) tokenizer = io::Tokenizer::from_file(m.folder->tokenizer);
    if (f.str("prompt").empty() == f.str("tokens").empty()) throw Error("give one of --prompt TEXT and --tokens IDS");
    if (!f.str("prompt").empty() && !tokenizer) throw Error("--prompt needs a model folder with a tokenizer.json; use --tokens IDS");
    const std::vector<int32_t> prompt = f.str("prompt").empty() ? parse_token_ids(f.str("tokens"), "--tokens")
                                                                : tokenizer->encode(f.str("prompt"));
    if (prompt.empty()) throw Error("the prompt has no tokens");
    for (const int32_t t : prompt)
        if (t >= c.vocab) throw Error("token id " + std::to_string(t) + " is outside the vocabulary of " + std::to_string(c.vocab));
    const int64_t max_new = f.str("max-new").empty() && m.folder && m.folder->generation.max_new_tokens
                                ? *m.folder->generation.max_new_tokens
                                : f.str("max-new").empty() ? 20 : f.integer("max-new", 1, INT32_MAX);
    const auto prompt_len = static_cast<int64_t>(prompt.size());
    if (prompt_len + max_new > c.max_positions)
        throw Error(std::to_string(prompt_len + max_new) + " positions exceed max_position_embeddings " +
                    std::to_string(c.max_positions));
    std::vector<int64_t> eos;
    if (m.folder && !f.on("ignore-eos")) eos = m.folder->generation.eos_token_ids;
    if (m.weights.empty()) std::fprintf(stderr, "meganeura generate: no weights, using the random initialization\n");

    const Device device = Device::open();
    models::Generator generator(device, c, prompt_len, prompt_len + max_new, m.weights,
                                adapter ? adapter->tensors : io::TensorMap{}, parse_precision(f));
    if (!f.on("no-warmup")) {
        // As llama.cpp does: both programs run once before anything is timed, since a program's
        // first run pays for what the driver defers to it, which is not the speed of generation
        // (lavapipe, the tests' tiny SmolLM2, a 76-token prompt: 20 ms cold, 10 ms warm).
        // The timed prefill rewrites every cache position the warm-up wrote.
        generator.prefill(prompt);
        generator.decode(prompt.back(), prompt_len);
    }
    models::Sampler sampler(options);
    Streamer out(tokenizer ? &*tokenizer : nullptr);
    out.put_prompt(prompt);
    const Clock::time_point start = Clock::now();
    int32_t next = sampler.next(generator.prefill(prompt).data(), c.vocab);
    const double prompt_ms = ms_since(start);
    const Clock::time_point decoding = Clock::now();
    int64_t generated = 0, decodes = 0;
    while (std::find(eos.begin(), eos.end(), next) == eos.end()) {
        out.put(next);
        if (++generated == max_new) break;
        const std::span<const float> logits = generator.decode(next, prompt_len + generated - 1);
        ++decodes;
        next = sampler.next(logits.data(), c.vocab);
    }
    const double generation_ms = ms_since(decoding);
    out.finish();
    // llama.cpp's closing report, on stderr: the prompt's speed, and the generation's as decoding
    // runs per second (the first token came with the prompt, so counting it would overstate the rate).
    std::fprintf(stderr, "prompt eval: %lld tokens in %.2f ms (%.2f tokens/s); generation: %lld tokens, %lld decoding runs in "
                 "%.2f ms (%.2f tokens/s)\n", static_cast<long long>(prompt_len), prompt_ms,
                 1e3 * static_cast<double>(prompt_len) / prompt_ms, static_cast<long long>(generated),
                 static_cast<long long>(decodes), generation_ms, decodes ? 1e3 * static_cast<double>(decodes) / generation_ms : 0.0);
    return 0;
}

}  // namespace

const Command generate_command = {
    .name = "generate",
    .summary = "continue a prompt with a causal LM, streaming the text (KV cache on the device)",
    .description = "Continues a prompt with a causal LM: one program prefills the prompt into a KV cache, a second\n"
                   "one decodes one token per run, the cache copied between them on the device. Streams the text\n"
                   "(the ids, comma-separated, without a tokenizer) until an end-of-sequence token of the folder's\n"
                   "generation_config.json or --max-new tokens; greedy unless sampling is asked for (or the\n"
                   "folder's generation_config.json samples). Ends with the prompt's and the generation's speed.",
    .options = model_options("smollm2", "full",
                             {{"prompt", "", "TEXT", "the prompt as text (needs the folder's tokenizer.json)"},
                              {"tokens", "", "IDS", "the prompt as comma-separated token ids, e.g. 1,2,3"},
                              {"max-new", "", "N", "tokens to generate at most (default: generation_config.json's, else 20)"},
                              {"temperature", "", "T", "sample at this temperature; 0: greedy (default: greedy, or 1 with --top-k or --top-p)"},
                              {"top-k", "", "K", "sample from the K likeliest tokens; 0: all"},
                              {"top-p", "", "P", "sample from the likeliest tokens whose probability reaches P"},
                              {"seed", "0", "S", "the sampler's random seed"},
                              {"ignore-eos", "false", "", "go on past end-of-sequence tokens"},
                              {"no-warmup", "false", "", "time the programs' first runs (by default each runs once untimed first)"},
                              {"adapter", "", "DIR", "a LoRA adapter in PEFT's format (finetune's output) on the folder's model"},
                              precision_option()}),
    .run = run_generate,
};

}  // namespace mn::cli
