// The transformer models against PyTorch, and SmolLM2's KV-cache decode against its full forward.
//
// tests/torch/transformer_reference.py writes tiny-config weights, inputs and PyTorch's results
// (float64 on the float32 weights); `meganeura forward --backward` runs on the same files; the
// issue's gates apply in strict mode: forward relative L2 <= 1e-4, loss relative difference
// <= 1e-5, and gradient-norm error <= 1e-3 for the total and for every parameter (each
// parameter's gradient must also match elementwise, relative L2 <= 1e-3).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "gpu_check.hpp"
#include "error_of.hpp"
#include "host_tools.hpp"
#include "model_gates.hpp"
#include "compiler/program_kernels.hpp"
#include "io/safetensors.hpp"
#include "models/generation.hpp"
#include "models/runner.hpp"
#include "models/smollm2.hpp"
#include "models/whisper.hpp"
#include "optimize/optimize.hpp"
#include "temp_dir.hpp"

namespace mn::test {
namespace {

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Runs the reference script for `name` (with `script_flags`) and `meganeura forward --backward` on its
// files (with its config.json when it wrote one), and checks the gates.
void expect_matches_torch(const std::string& name, const std::string& script_flags) {
    MN_REQUIRE_TORCH();
    TempDir dir("tf-" + name);
    const std::string script = source_dir() + "/tests/torch/transformer_reference.py";
    int status = 0;
    const std::string py = run_command(reference_python() + " '" + script + "' " + name + " '" + dir.dir().string() + "' " +
                                           script_flags, &status);
    ASSERT_EQ(status, 0) << py;
    const std::string config = std::filesystem::exists(dir.path("config.json")) ? " --config " + dir.path("config.json") : "";
    const std::string cli = run_command(cli_binary() + " forward --model " + name + " --size tiny --weights " +
                                            dir.path("weights.safetensors") + " --inputs " + dir.path("inputs.safetensors") +
                                            " --out " + dir.path("got.safetensors") + config + " --backward --precision strict",
                                        &status);
    ASSERT_EQ(status, 0) << cli;
    const io::TensorMap want = io::read_safetensors(dir.path("expected.safetensors"));
    const io::TensorMap got = io::read_safetensors(dir.path("got.safetensors"));

    expect_passes_gates(got, want, name, name == "smollm2" ? "logits" : "output");
}

class TransformerVsTorch : public GpuTest, public ::testing::WithParamInterface<std::string> {};

// SmolLM2's labels are Hugging Face's (shifted inside, some -100 ignored).
TEST_P(TransformerVsTorch, ForwardLossAndGradientsMatch) { expect_matches_torch(GetParam(), ""); }

INSTANTIATE_TEST_SUITE_P(Models, TransformerVsTorch, ::testing::Values("smollm2", "smolvla", "whisper"),
                         [](const auto& info) { return info.param; });

class CausalLmVsTorch : public GpuTest {};

// Labels already aligned with the logits, under their explicit name: not shifted again.
TEST_F(CausalLmVsTorch, ShiftedLabelsAreTakenAsTheyAre) { expect_matches_torch("smollm2", "--shifted-labels"); }

// A Qwen2 config.json: q, k and v projections with biases, which the builder reads and trains.
TEST_F(CausalLmVsTorch, Qwen2AttentionBiasesAreBuilt) { expect_matches_torch("smollm2", "--qwen2"); }

// Llama 3.1's rope_scaling, each band of frequencies (kept, blended, divided) in use.
TEST_F(CausalLmVsTorch, Llama3RopeScalingIsBuilt) { expect_matches_torch("smollm2", "--llama3-rope"); }

// ---- SmolLM2's KV cache ----

class KvCacheTest : public GpuTest {};

std::vector<float> row(const std::vector<float>& logits, int64_t r, int64_t vocab) {
    return {logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab};
}

// The first `prompt` tokens prefilled, then the others decoded one at a time: the logits after each
// equal `want`'s row at its position (want: one forward over all of `tokens`), to within `tol`.
void expect_generation_follows(models::Generator& generator, const std::vector<int32_t>& tokens, int64_t prompt,
                               const std::vector<float>& want, int64_t vocab, double tol = 1e-5) {
    const std::vector<float> prompt_logits = generator.prefill({tokens.begin(), tokens.begin() + prompt});
    EXPECT_LE(relative_l2(prompt_logits, widen(row(want, prompt - 1, vocab))), tol) << "prefill";
    for (auto t = static_cast<size_t>(prompt); t < tokens.size(); ++t) {
        const std::span<const float> step = generator.decode(tokens[t], static_cast<int64_t>(t));
        const std::vector<float> logits(step.begin(), step.end());
        EXPECT_LE(relative_l2(logits, widen(row(want, static_cast<int64_t>(t), vocab))), tol) << "decode position " << t;
    }
}

// A prompt prefilled at once, then one token per decode run, both programs in `precision`: the logits at every
// position against those of one f32 forward over the whole sequence, to within `tol`.
void expect_decode_follows_the_forward(Precision precision, double tol) {
    TempDir dir("kv");
    const models::LlamaConfig c = models::LlamaConfig::tiny();
    const std::vector<int32_t> tokens = {5, 17, 96, 0, 42, 17, 63, 8};
    const auto total = static_cast<int64_t>(tokens.size());
    constexpr int64_t kPrompt = 3, kCache = 11;  // a cache longer than the sequence: unused rows stay masked

    const models::ModelRequest request{.input_shapes = {{"input_ids", {1, total}}, {"labels", {1, total}}}};
    models::PreparedModel full = models::prepare_model(device(), "smollm2", request, false, {.seed = 5});
    full.session.save(dir.path("weights.safetensors"));
    full.session.set("input_ids", tokens);
    full.session.set("labels", tokens);
    full.session.run();
    const std::vector<float> want = full.session.get("logits");

    // The prompt prefilled at once; the cache and the weights copied to the decode program on the device.
    models::Generator generator(device(), c, kPrompt, kCache, {dir.path("weights.safetensors")}, {}, precision);
    expect_generation_follows(generator, tokens, kPrompt, want, c.vocab, tol);
}

TEST_F(KvCacheTest, DecodeLogitsEqualTheFullForwardAtEveryPosition) { expect_decode_follows_the_forward(Precision::Strict, 1e-5); }

// `generate --precision fast`: on a device with cooperative matrices the decode step's GEMVs read f16 copies of the
// weights and the prefill's products f16 tiles, so its logits follow the f32 forward to within the benchmark
// protocol's forward gate (1% relative L2, bench/README.md); elsewhere fast is f32.
TEST_F(KvCacheTest, FastDecodeFollowsTheForwardWithinTheGate) { expect_decode_follows_the_forward(Precision::Fast, 1e-2); }

// A cache long enough that the decode step splits its keys across workgroups (flash-decoding, the
// path a 4K cache takes on the H200; here 23 chunks of 32 keys): the decode logits still equal the
// full forward's, at positions that fill the cache partly (the last chunks see no key) and wholly.
TEST_F(KvCacheTest, LongCacheDecodeSplitsItsKeysAndEqualsTheFullForward) {
    TempDir dir("kv-long");
    models::LlamaConfig c = models::LlamaConfig::tiny();
    constexpr int64_t kPrompt = 600, kCache = 720;
    c.max_positions = kCache;
    std::vector<int32_t> tokens;
    for (int64_t t = 0; t < kCache; ++t) tokens.push_back(static_cast<int32_t>((t * 37 + t / 7) % c.vocab));
    const models::BuiltModel full = models::build_causal_lm(c, {1, kCache}, false);
    Session forward = compile(*full.graph, device());
    forward.save(dir.path("weights.safetensors"));
    forward.set("input_ids", tokens);
    forward.set("labels", tokens);
    forward.run();
    const std::vector<float> want = forward.get("logits");

    const models::BuiltModel decode = models::build_llama_cached(c, 1, 1, kCache);
    int chunked = 0, combined = 0;
    for (const codegen::KernelSource& k : compiler::program_kernels(*decode.graph, device().context()->caps(), {})) {
        chunked += k.label == "attention_chunks";
        combined += k.label == "attention_combine";
    }
    EXPECT_EQ(chunked, c.layers);
    EXPECT_EQ(combined, c.layers);

    // The prefill computes (and reads back) the last position's logits only.
    EXPECT_EQ(models::build_llama_cached(c, 1, kPrompt, kCache).output.shape(), (Shape{1, 1, c.vocab}));
    models::Generator generator(device(), c, kPrompt, kCache, {dir.path("weights.safetensors")});
    expect_generation_follows(generator, tokens, kPrompt, want, c.vocab);
}

// At one token a decode step's split of the heads moves no element, so v's is a view, not a copy kernel
// (optimize/'s identities), and the stacked q, k and v weights are the three in place (Lowering::stack_leaves): the
// program copies nothing, and hoists nothing.
TEST_F(KvCacheTest, ADecodeStepCopiesNothing) {
    const models::LlamaConfig c = models::LlamaConfig::tiny();
    const models::BuiltModel decode = models::build_llama_cached(c, 1, 1, 11);
    for (const codegen::KernelSource& k : compiler::program_kernels(*decode.graph, device().context()->caps(), {})) {
        EXPECT_NE(k.label, "copy");
    }
    EXPECT_EQ(compile(*decode.graph, device()).stats().hoisted_dispatches, 0u);
}

// A decode step copied each layer's whole KV caches twice per token: a slice_scatter wrote the cache with the
// new row into a temporary and an assignment copied it back (4 dispatches per layer; 0.75 GB per token for
// SmolLM2-135M at 4K positions). Now each cache's rows are written in place: in a prefill, the value rows by a
// slice_write and the key rows by the RoPE that rotates them, one dispatch each of one thread per element (pair)
// written; in a decode step, both by the GEMV of q, k and v (FusionPlan::cache_in_gemv). No dispatch writes a
// cache with as many threads as the cache has elements.
TEST_F(KvCacheTest, ADecodeStepCopiedTheWholeCacheTwicePerToken) {
    const models::LlamaConfig c = models::LlamaConfig::tiny();
    constexpr int64_t kCache = 256;
    const rt::DeviceCaps& caps = device().context()->caps();
    for (const int64_t tokens : {int64_t{1}, int64_t{5}}) {  // a decode step, a prefill
        const models::BuiltModel model = models::build_llama_cached(c, 1, tokens, kCache);
        sched::Schedule s = compiler::lower_program(optimize::optimize(*model.graph), sched::tune_for(caps));
        std::map<std::string, int64_t> cache_writes;  // by kernel
        for (const sched::Step& step : s.steps) {
            EXPECT_NE(step.kernel.label, "slice_scatter");
            EXPECT_NE(step.kernel.label, "assign");
            for (size_t b = 0; b < step.values.size(); ++b) {
                const sched::Value& v = s.values[static_cast<size_t>(s.root(step.values[b]))];
                if (v.storage != sched::Storage::State || !step.kernel.iface.bindings[b].writes) continue;
                ++cache_writes[step.kernel.label];
                const auto& groups = step.kernel.groups;
                const uint64_t threads = uint64_t{step.kernel.iface.local_size} * groups[0] * groups[1] * groups[2];
                EXPECT_LT(threads, static_cast<uint64_t>(numel(v.shape))) << step.kernel.label << " at " << tokens << " tokens";
            }
        }
        const std::map<std::string, int64_t> want = tokens == 1 ? std::map<std::string, int64_t>{{"matmul_gemv", 2 * c.layers}}
                                                                : std::map<std::string, int64_t>{{"rope", c.layers}, {"slice_write", c.layers}};
        EXPECT_EQ(cache_writes, want) << tokens << " tokens";
    }
}

// `meganeura generate` prints greedy continuations: each printed token is the argmax of the full
// forward's logits at the position before it.
TEST_F(KvCacheTest, GenerateIsGreedyUnderTheFullForward) {
    TempDir dir("generate");
    const models::LlamaConfig c = models::LlamaConfig::tiny();
    const std::vector<int32_t> prompt = {7, 3, 90};
    constexpr int64_t kNew = 4, kTotal = 7;
    const models::ModelRequest request{.input_shapes = {{"input_ids", {1, kTotal}}, {"labels", {1, kTotal}}}};
    models::PreparedModel full = models::prepare_model(device(), "smollm2", request, false, {.seed = 9});
    full.session.save(dir.path("weights.safetensors"));

    int status = 0;
    const std::string text = run_command(cli_binary() + " generate --model smollm2 --size tiny --weights " +
                                             dir.path("weights.safetensors") + " --tokens 7,3,90 --max-new 4",
                                         &status);
    ASSERT_EQ(status, 0) << text;
    std::vector<int32_t> sequence = prompt;
    for (size_t at = 0; sequence.size() < static_cast<size_t>(kTotal);) {
        const size_t end = text.find_first_of(",\n", at);
        ASSERT_NE(end, std::string::npos) << text;
        sequence.push_back(std::stoi(text.substr(at, end - at)));
        at = end + 1;
    }
    full.session.set("input_ids", sequence);
    full.session.set("labels", sequence);
    full.session.run();
    const std::vector<float> logits = full.session.get("logits");
    for (int64_t t = static_cast<int64_t>(prompt.size()) - 1; t + 1 < kTotal; ++t) {
        std::vector<float> r = row(logits, t, c.vocab);
        const auto best = std::max_element(r.begin(), r.end()) - r.begin();
        const float top = r[static_cast<size_t>(best)];
        r[static_cast<size_t>(best)] = -INFINITY;
        if (top - *std::max_element(r.begin(), r.end()) < 1e-4f) continue;  // a near tie: either is greedy
        EXPECT_EQ(best, sequence[static_cast<size_t>(t + 1)]) << "position " << t + 1 << " of " << text;
    }
}

// ---- q, k and v as one product (optimize/siblings.cpp) ----

class SiblingProductsTest : public GpuTest {};

// Small random weights, random KV caches, token ids in the vocabulary and a cache position that leaves
// room for the tokens.
ref::Feeds llama_feeds(const Graph& g, int64_t vocab, uint64_t seed) {
    ref::Feeds feeds = random_feeds(g, seed, {-0.2, 0.2});
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> cache(-1, 1);
    for (const Node& n : g.nodes()) {
        if (n.op == Op::State) {
            ref::Value v{n.shape, std::vector<double>(static_cast<size_t>(numel(n.shape)))};
            for (double& x : v.data) x = static_cast<float>(cache(rng));
            feeds[n.name] = std::move(v);
        }
        if (n.op != Op::Input || n.dtype != DType::I32) continue;
        std::vector<double>& ids = feeds.at(n.name).data;
        for (size_t i = 0; i < ids.size(); ++i) ids[i] = n.name == "position" ? 5 : static_cast<double>((i * 37 + seed) % vocab);
    }
    return feeds;
}

// The tiny model's inference over 7 tokens, and its prefill of 4 and decode step into a cache of 11.
std::vector<std::pair<std::string, models::BuiltModel>> llama_programs(const models::LlamaConfig& c) {
    std::vector<std::pair<std::string, models::BuiltModel>> programs;
    programs.emplace_back("inference", models::build_causal_lm(c, {1, 7}));
    programs.emplace_back("prefill", models::build_llama_cached(c, 1, 4, 11));
    programs.emplace_back("decode", models::build_llama_cached(c, 1, 1, 11));
    return programs;
}

// The session's outputs, and the KV caches as their assignments leave them, against the float64 reference of g.
void expect_outputs_and_caches_match(Session& s, const Graph& g, const ref::Feeds& feeds, const std::string& what) {
    const std::vector<ref::Value> want = ref::evaluate(g, feeds);
    for (const auto& [name, id] : g.outputs()) {
        EXPECT_LE(relative_l2(s.get(name), want[static_cast<size_t>(id)].data), 1e-5) << what << " " << name;
    }
    for (size_t id = 0; id < g.nodes().size(); ++id) {
        if (g.nodes()[id].op != Op::Assign) continue;
        const std::string& cache = g.node(g.nodes()[id].inputs[0]).name;
        EXPECT_LE(relative_l2(s.get(cache), want[id].data), 1e-5) << what << " " << cache;
    }
}

// In inference, a prefill and a decode step of the tiny SmolLM2, each layer's q, k and v are one product
// that stores the three: per layer two dispatches fewer per run than the program without the fusion (the
// same passes otherwise), in the level the three products shared; a decode step's GEMV also rotates q and k
// and writes k and v into the caches (FusionPlan::rope_in_gemv), so its two RoPEs and the value rows'
// slice_write go too, with their level; and the stacked weight is no copy: the three weights are parts of its bytes
// (Lowering::stack_leaves), so nothing more is hoisted, and new weights set are what the product reads. The outputs and
// the KV caches against the float64 reference of the graph as built.
TEST_F(SiblingProductsTest, QkvIsOneProductInInferenceAndDecode) {
    const models::LlamaConfig c = models::LlamaConfig::tiny();
    for (const auto& [what, model] : llama_programs(c)) {
        const Graph& g = *model.graph;
        optimize::Stats stats;
        const Graph apart = optimize::eliminate_dead_code(optimize::simplify(g, stats), stats);
        const SessionStats unfused = compile(apart, device(), {.optimize = false}).stats();
        Session s = compile(g, device());
        const bool decode = what == "decode";
        EXPECT_EQ(s.stats().dispatches, unfused.dispatches - (decode ? 5 : 2) * c.layers) << what;
        EXPECT_EQ(s.stats().barriers, unfused.barriers - (decode ? c.layers : 0)) << what;
        EXPECT_EQ(s.stats().hoisted_dispatches, unfused.hoisted_dispatches) << what;

        for (const uint64_t seed : {3, 4}) {  // new weights for the second run, written into the stack
            const ref::Feeds feeds = llama_feeds(g, c.vocab, seed);
            set_feeds(s, g, feeds);
            s.run();
            expect_outputs_and_caches_match(s, g, feeds, what);
        }
    }
}

// With Qwen2's biases on q, k and v the three are one product too, which adds the three biases stacked
// (siblings.cpp) as its epilogue and stores each slice of the sum in the layout its reader wants: q and k for RoPEs
// that read their split of the heads in place, v split into heads (no copy), in a decode step's GEMV too. Two
// dispatches a layer fewer than the three products, in each program.
TEST_F(SiblingProductsTest, BiasedQkvMatchesTheReferenceInInferenceAndDecode) {
    models::LlamaConfig c = models::LlamaConfig::tiny();
    c.qkv_bias = true;
    for (const auto& [what, model] : llama_programs(c)) {
        const Graph& g = *model.graph;
        optimize::Stats stats;
        const Graph apart = optimize::eliminate_dead_code(optimize::simplify(g, stats), stats);
        const SessionStats unfused = compile(apart, device(), {.optimize = false}).stats();
        Session s = compile(g, device());
        EXPECT_EQ(s.stats().dispatches, unfused.dispatches - 2 * c.layers) << what;
        EXPECT_EQ(s.stats().barriers, unfused.barriers) << what;
        const ref::Feeds feeds = llama_feeds(g, c.vocab, 5);
        set_feeds(s, g, feeds);
        s.run();
        expect_outputs_and_caches_match(s, g, feeds, what);
    }
}

void write_text(const std::string& path, const char* text) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_TRUE(f) << path;
    std::fputs(text, f);
    std::fclose(f);
}

TEST(TransformerModels, ConfigJsonLoadsLikeHuggingFace) {
    TempDir dir("config");
    write_text(dir.path("config.json"), R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
        "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536,
        "vocab_size": 49152, "rope_theta": 100000, "rms_norm_eps": 1e-05, "tie_word_embeddings": true,
        "max_position_embeddings": 8192, "torch_dtype": "bfloat16"})");
    const models::LlamaConfig c = models::LlamaConfig::from_json(dir.path("config.json"));
    const models::LlamaConfig d = models::LlamaConfig::smollm2_135m();
    EXPECT_EQ(c.hidden, d.hidden);
    EXPECT_EQ(c.layers, d.layers);
    EXPECT_EQ(c.heads, d.heads);
    EXPECT_EQ(c.kv_heads, d.kv_heads);
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.ffn, d.ffn);
    EXPECT_EQ(c.vocab, d.vocab);
    EXPECT_EQ(c.rope_theta, 100000.0);
    EXPECT_EQ(c.rms_eps, 1e-5);
    EXPECT_TRUE(c.tied_embeddings);
    EXPECT_THROW(models::LlamaConfig::from_json(dir.path("missing.json")), Error);
}

// HuggingFaceTB/SmolLM2-135M's and Qwen/Qwen2.5-0.5B's published config.json load (Qwen2 with its q/k/v
// biases); a field that would change the model and that the builder lacks is refused by name.
TEST(TransformerModels, ConfigFieldsTheBuilderLacksAreRefused) {
    TempDir dir("config");
    write_text(dir.path("smollm2.json"), R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false,
        "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 576,
        "initializer_range": 0.041666666666666664, "intermediate_size": 1536, "is_llama_config": true,
        "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 9, "num_hidden_layers": 30,
        "num_key_value_heads": 3, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_interleaved": false,
        "rope_scaling": null, "rope_theta": 100000, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
        "transformers_version": "4.42.3", "use_cache": true, "vocab_size": 49152})");
    const models::LlamaConfig smol = models::LlamaConfig::from_json(dir.path("smollm2.json"));
    EXPECT_EQ(smol.hidden, 576);
    EXPECT_FALSE(smol.qkv_bias || smol.o_bias || smol.mlp_bias);
    write_text(dir.path("qwen2.json"), R"({"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
        "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896,
        "initializer_range": 0.02, "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
        "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
        "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": true, "use_sliding_window": false,
        "vocab_size": 151936})");
    const models::LlamaConfig qwen = models::LlamaConfig::from_json(dir.path("qwen2.json"));
    EXPECT_TRUE(qwen.qkv_bias);
    EXPECT_FALSE(qwen.o_bias || qwen.mlp_bias);
    EXPECT_EQ(qwen.head_dim, 64);
    const models::BuiltModel m = models::find_model("smollm2").build({.config_path = dir.path("qwen2.json"),
                                                                      .input_shapes = {{"input_ids", {1, 4}}, {"labels", {1, 4}}}});
    EXPECT_EQ(m.graph->find("model.layers.23.self_attn.k_proj.bias")->shape(), (Shape{128}));
    EXPECT_FALSE(m.graph->find("model.layers.0.self_attn.o_proj.bias"));

    const std::pair<const char*, const char*> refused[] = {
        {R"({"model_type": "llama", "rope_scaling": {"factor": 4.0, "rope_type": "yarn"}})",
         R"(rope_scaling.rope_type is "yarn"; only "linear" and "llama3" are implemented)"},
        {R"({"model_type": "llama", "rope_scaling": {"factor": 4.0, "type": "linear", "finetuned": true}})",
         "not implemented by the llama builder: rope_scaling.finetuned = true"},
        {R"({"model_type": "llama", "rope_scaling": {"factor": -2, "type": "linear"}})",
         "rope_scaling.factor is -2, expected a finite number above 0"},
        {R"({"model_type": "llama", "hidden_act": "gelu"})", R"(hidden_act is "gelu"; only "silu" is implemented)"},
        {R"({"model_type": "qwen2", "use_sliding_window": true})", "use_sliding_window is true; only false is implemented"},
        {R"({"model_type": "llama", "attention_dropout": 0.1})", "attention_dropout is 0.1; only 0 is implemented"},
        {R"({"model_type": "llama", "partial_rotary_factor": 0.5, "qk_norm": true})",
         "not implemented by the llama builder: partial_rotary_factor = 0.5, qk_norm = true"},
        {R"({"model_type": "mistral"})", R"(model_type is "mistral"; this builder implements "llama" and "qwen2")"},
        {R"({"hidden_size": 64})", R"(model_type is absent; this builder implements "llama" and "qwen2")"},
    };
    // linear scaling divides every frequency by the factor (positions / factor)
    write_text(dir.path("linear.json"), R"({"model_type": "llama", "head_dim": 16, "rope_theta": 100.0,
        "rope_scaling": {"type": "linear", "factor": 4.0}})");
    const models::LlamaConfig linear = models::LlamaConfig::from_json(dir.path("linear.json"));
    models::LlamaConfig unscaled = linear;
    unscaled.rope_scaling.reset();
    for (size_t i = 0; i < 8; ++i)
        EXPECT_EQ(linear.rope_inv_freq()[i], static_cast<float>(unscaled.rope_inv_freq()[i] / 4)) << i;
    for (const auto& [json, message] : refused) {
        write_text(dir.path("bad.json"), json);
        const std::string error = error_of([&] { models::LlamaConfig::from_json(dir.path("bad.json")); });
        EXPECT_NE(error.find(message), std::string::npos) << json << "\n" << error;
    }
}

// openai/whisper-tiny's config.json (the fields the encoder reads, and some it does not) gives the
// built-in configuration; a config that does not fit is refused naming what is wrong.
TEST(TransformerModels, WhisperConfigJsonLoadsLikeHuggingFace) {
    TempDir dir("config");
    write_text(dir.path("config.json"), R"({"architectures": ["WhisperForConditionalGeneration"], "d_model": 384,
        "encoder_layers": 4, "encoder_attention_heads": 6, "encoder_ffn_dim": 1536, "num_mel_bins": 80,
        "max_source_positions": 1500, "decoder_layers": 4, "vocab_size": 51865, "torch_dtype": "float32"})");
    const models::WhisperConfig c = models::WhisperConfig::from_json(dir.path("config.json"));
    const models::WhisperConfig d = models::WhisperConfig::tiny_en();
    EXPECT_EQ(c.mels, d.mels);
    EXPECT_EQ(c.frames, d.frames);
    EXPECT_EQ(c.d, d.d);
    EXPECT_EQ(c.layers, d.layers);
    EXPECT_EQ(c.heads, d.heads);
    EXPECT_EQ(c.ffn, d.ffn);
    const models::BuiltModel m = models::find_model("whisper").build({.config_path = dir.path("config.json")});
    EXPECT_EQ(m.graph->find("model.encoder.embed_positions.weight")->shape(), (Shape{1500, 384}));

    write_text(dir.path("bad.json"), R"({"d_model": 384, "encoder_attention_heads": 5})");
    const std::string error = error_of([&] { models::WhisperConfig::from_json(dir.path("bad.json")); });
    EXPECT_NE(error.find("bad.json: d_model 384 is not a multiple of encoder_attention_heads 5"), std::string::npos) << error;
}

// A registry model already outputs its loss as "loss": compiling it for training reuses that
// output, and a step lowers the loss of a fixed batch.
class TransformerTrainingTest : public GpuTest {};

TEST_F(TransformerTrainingTest, RegistryModelsTrainWithSessionStep) {
    const models::ModelRequest request{.input_shapes = {{"input_ids", {1, 6}}, {"labels", {1, 6}}}};
    models::BuiltModel m = models::find_model("smollm2").build(request);
    Session s = compile(*m.graph, device(), {.loss = m.loss, .optimizer = AdamW{.lr = 1e-2}, .seed = 2});
    s.set("input_ids", std::vector<int32_t>{1, 2, 3, 4, 5, 6});
    s.set("labels", std::vector<int32_t>{1, 2, 3, 4, 5, 6});  // Hugging Face's: labels = input_ids
    const float first = s.step();
    float last = first;
    for (int i = 0; i < 4; ++i) last = s.step();
    EXPECT_LT(last, first);
}

// The published SmolLM2-135M configuration builds with its published parameter count.
TEST(TransformerModels, FullSmolLM2HasThePublishedParameterCount) {
    const models::BuiltModel m = models::find_model("smollm2").build({.size = "full"});
    int64_t params = 0;
    for (const Node& n : m.graph->nodes()) {
        if (n.op == Op::Parameter) params += numel(n.shape);
    }
    EXPECT_EQ(params, 134515008);  // tied embeddings: no lm_head.weight
}

}  // namespace
}  // namespace mn::test
