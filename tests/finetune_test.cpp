// Frozen parameters, LoRA, and `meganeura finetune` end to end on a tiny random model folder: the
// loss goes down, the adapter is PEFT's (tests/torch/check_peft_export.py), the merged folder and
// `generate --adapter` agree, and a run resumes from its checkpoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include "error_of.hpp"
#include "gpu_check.hpp"
#include "io/safetensors.hpp"
#include "models/generation.hpp"
#include "models/lora.hpp"
#include "models/smollm2.hpp"
#include "tiny_folder.hpp"
#include "train/lm_data.hpp"
#include "host_tools.hpp"

namespace mn::test {
namespace {

namespace fs = std::filesystem;

class FrozenTest : public GpuTest {};

// Two layers, the first frozen: it keeps its values and gets no optimizer state, and the second
// trains exactly as when the first is a constant input holding the same values.
TEST_F(FrozenTest, AFrozenParameterIsAConstantToTraining) {
    auto build = [](Graph& g, bool frozen_parameter) {
        const Tensor x = g.input("x", {6, 5});
        const Tensor w1 = frozen_parameter ? g.parameter("w1", {7, 5}, Init::normal(0, 0.5)) : g.input("w1", {7, 5});
        if (frozen_parameter) g.set_requires_grad(w1, false);
        const Tensor w2 = g.parameter("w2", {3, 7}, Init::normal(0, 0.5));
        return g.cross_entropy(g.linear(g.relu(g.linear(x, w1)), w2), g.input("labels", {6}, DType::I32));
    };
    Graph a, b;
    const Tensor la = build(a, true), lb = build(b, false);
    Session sa = compile(a, device(), {.loss = la, .optimizer = AdamW{.lr = 0.05}, .seed = 3});
    Session sb = compile(b, device(), {.loss = lb, .optimizer = AdamW{.lr = 0.05}, .seed = 3});
    const std::vector<float> w1 = sa.get("w1"), w2 = sa.get("w2");
    sb.set("w1", w1);
    sb.set("w2", sa.get("w2"));
    std::vector<float> x(30);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i));
    for (Session* s : {&sa, &sb}) {
        s->set("x", x);
        s->set("labels", std::vector<int32_t>{0, 1, 2, 2, 1, 0});
        for (int i = 0; i < 3; ++i) s->step();
    }
    EXPECT_EQ(sa.get("w1"), w1);
    const std::vector<float> want = sb.get("w2");
    EXPECT_LE(relative_l2(sa.get("w2"), std::vector<double>(want.begin(), want.end())), 1e-6);
    EXPECT_NE(sa.get("w2"), w2);  // it trained
    EXPECT_FALSE(error_of([&] { (void)sa.get("optimizer.exp_avg.w2"); }).size());
    EXPECT_NE(error_of([&] { (void)sa.get("optimizer.exp_avg.w1"); }), "");

    Graph all_frozen;
    const Tensor w = all_frozen.parameter("w", {2, 2});
    all_frozen.set_requires_grad(w, false);
    const Tensor loss = all_frozen.sum(w);
    EXPECT_EQ(error_of([&] { compile(all_frozen, device(), {.loss = loss}); }),
              "compile: no f32 parameter requires a gradient; there is nothing to train");
    EXPECT_EQ(error_of([&] { all_frozen.set_requires_grad(loss, false); }), "[set_requires_grad] expects a parameter, got sum");
}

// An adapter starts at B = 0: the model with adapters computes the base model's logits.
TEST_F(FrozenTest, LoraStartsFromTheBaseModel) {
    models::LlamaConfig c = models::LlamaConfig::tiny();
    models::BuiltModel base = models::build_causal_lm(c, {1, 5});
    c.lora = {.rank = 4, .alpha = 8, .targets = {"q_proj", "v_proj", "down_proj"}};
    models::BuiltModel adapted = models::build_causal_lm(c, {1, 5});
    models::freeze_all_but_lora(*adapted.graph);
    int64_t trainable = 0;
    for (const Node& n : adapted.graph->nodes())
        if (n.op == Op::Parameter && n.requires_grad) {
            trainable += numel(n.shape);
            EXPECT_TRUE(models::is_lora_parameter(n.name)) << n.name;
        }
    EXPECT_EQ(trainable, 2 * (4 * 64 + 4 * 64 + 4 * 64 + 4 * 32 + 4 * 96 + 4 * 64));  // A [4, in] and B [out, 4], 2 layers
    Session sb = compile(*base.graph, device(), {.seed = 1});
    Session sa = compile(*adapted.graph, device(), {.seed = 1});
    for (const Node& n : base.graph->nodes())
        if (n.op == Op::Parameter) sa.set(n.name, sb.get(n.name));
    for (Session* s : {&sa, &sb}) {
        s->set("input_ids", std::vector<int32_t>{4, 8, 15, 16, 23});
        s->set("labels", std::vector<int32_t>{4, 8, 15, 16, 23});
        s->run();
    }
    EXPECT_EQ(sa.get("logits"), sb.get("logits"));
}

// Generation merges an adapter into the weights it adapts (W + alpha / r * B A), and computes the logits of the model
// that applies it as training does, W x + alpha / r * B (A x). An adapter missing one of the model's adapter tensors,
// or holding one that no adapted module has, is an error.
TEST_F(FrozenTest, GenerationMergesTheAdapterIntoTheWeights) {
    models::LlamaConfig c = models::LlamaConfig::tiny();
    c.lora = {.rank = 4, .alpha = 8, .targets = {"q_proj", "v_proj", "down_proj"}};
    const std::vector<int32_t> ids = {4, 8, 15, 16, 23};
    models::BuiltModel delta = models::build_causal_lm(c, {1, 5});
    Session sd = compile(*delta.graph, device(), {.seed = 1});
    io::TensorMap adapter;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0, 0.3f);
    for (const Node& n : delta.graph->nodes()) {
        if (n.op != Op::Parameter || !models::is_lora_parameter(n.name)) continue;
        std::vector<float> v(static_cast<size_t>(numel(n.shape)));
        for (float& x : v) x = normal(rng);  // B too, which starts at zero: the adapter counts
        sd.set(n.name, v);
        adapter[n.name] = io::TensorData::from_f32(n.shape, v);
    }
    sd.set("input_ids", ids);
    sd.set("labels", ids);
    sd.run();
    const std::vector<float> all = sd.get("logits");
    TempDir dir("merge");
    const std::string weights = dir.path("weights.safetensors");
    sd.save(weights);  // the base weights, and the adapter, which the generator's programs do not have

    models::Generator generator(device(), c, 5, 8, {weights}, adapter);
    EXPECT_LE(relative_l2(generator.prefill(ids), std::vector<double>(all.end() - c.vocab, all.end())), 1e-5);

    io::TensorMap missing = adapter, extra = adapter;
    missing.erase("model.layers.1.self_attn.v_proj.lora_B.weight");
    EXPECT_EQ(error_of([&] { models::Generator(device(), c, 5, 8, {weights}, missing); }),
              "the adapter has no tensor 'model.layers.1.self_attn.v_proj.lora_B.weight'");
    extra["model.layers.0.self_attn.k_proj.lora_A.weight"] = adapter.at("model.layers.0.self_attn.q_proj.lora_A.weight");
    EXPECT_EQ(error_of([&] { models::Generator(device(), c, 5, 8, {weights}, extra); }),
              "the adapter's 'model.layers.0.self_attn.k_proj.lora_A.weight' is not a module of this model with an adapter");
}

TEST(LmData, DocumentsArePackedIntoBlocksWithAHeldOutTenth) {
    TempDir dir("lmdata");
    std::ofstream(dir.path("d.jsonl")) << "{\"text\": \"one\"}\n\n{\"text\": \"two\", \"id\": 2}\n";
    EXPECT_EQ(train::read_documents(dir.path("d.jsonl")), (std::vector<std::string>{"one", "two"}));
    std::ofstream(dir.path("bad.jsonl")) << "{\"text\": \"one\"}\n{\"body\": 1}\n";
    EXPECT_EQ(error_of([&] { train::read_documents(dir.path("bad.jsonl")); }),
              dir.path("bad.jsonl") + " line 2: expected an object with a \"text\" string");
    EXPECT_NE(error_of([&] { train::read_documents(dir.path("d.csv")); }), "");
}

class FinetuneTest : public GpuTest {};

// About 100 blocks of 16 tokens of the tiny tokenizer, in `file`.
void write_apache_text(const std::string& file) {
    std::string text(2000, '\0');
    std::ifstream("/usr/share/common-licenses/Apache-2.0").read(text.data(), static_cast<std::streamsize>(text.size()));
    std::ofstream(file) << text;
}

TEST_F(FinetuneTest, LoraLowersTheLossExportsPeftAndResumes) {
    MN_REQUIRE_TORCH();
    TempDir dir("finetune");
    const std::string base = dir.path("base"), out = dir.path("out");
    make_tiny_folder(base, "--text /usr/share/common-licenses/GPL-3");
    int status = 0;
    const std::string run = "finetune -m " + base + " --data " + dir.path("gpl.txt") +
                            " --lora-rank 4 --lora-alpha 8 --seq 32 --batch 2 --lr 1e-2 --eval-every 8 --merge ";
    fs::copy_file("/usr/share/common-licenses/GPL-3", dir.path("gpl.txt"));
    std::string text = meganeura(run + "--steps 16 --out " + out, &status);
    ASSERT_EQ(status, 0) << text;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(text, m, std::regex("finetuned 16 steps: loss ([0-9.]+) -> ([0-9.]+), held-out loss ([0-9.]+) -> ([0-9.]+)")))
        << text;
    EXPECT_LT(std::stod(m[2]), std::stod(m[1]) - 0.1) << text;
    EXPECT_LT(std::stod(m[4]), std::stod(m[3])) << text;
    EXPECT_NE(text.find("trainable (LoRA rank 4 on 8 modules)"), std::string::npos) << text;
    for (const char* f : {"adapter_model.safetensors", "adapter_config.json", "checkpoint.safetensors", "loss.csv", "loss.svg",
                          "merged/model.safetensors", "merged/config.json", "merged/tokenizer.json"})
        EXPECT_TRUE(fs::exists(out + "/" + f)) << f;
    const std::string check = run_command("cd " + source_dir() + "/tests/torch && " + reference_python() + " "
                                          "check_peft_export.py " + base + " " + out, &status);
    EXPECT_EQ(status, 0) << check;

    // The base with the adapter generates what the merged folder generates.
    const std::string gen = " --prompt 'This License' --max-new 10 --ignore-eos";
    const std::string with_adapter = meganeura("generate -m " + base + " --adapter " + out + gen, &status);
    EXPECT_EQ(status, 0) << with_adapter;
    const std::string merged = meganeura("generate -m " + out + "/merged" + gen, &status);
    EXPECT_EQ(with_adapter.substr(0, with_adapter.rfind("prompt eval")), merged.substr(0, merged.rfind("prompt eval")));

    text = meganeura(run + "--steps 16 --out " + out, &status);
    EXPECT_EQ(status, 1) << text;
    EXPECT_NE(text.find("has a checkpoint; pass --resume"), std::string::npos) << text;
    text = meganeura(run + "--steps 20 --resume " + out, &status);
    ASSERT_EQ(status, 0) << text;
    EXPECT_NE(text.find("finetuned 4 steps"), std::string::npos) << text;
}

// A full fine-tune writes a model folder that runs as one.
TEST_F(FinetuneTest, FullFinetuneWritesAModelFolder) {
    MN_REQUIRE_TORCH();
    TempDir dir("finetune");
    const std::string base = dir.path("base"), out = dir.path("out");
    make_tiny_folder(base);
    std::ofstream(dir.path("d.jsonl")) << "{\"text\": \"The quick brown fox jumps over the lazy dog, again and again.\"}\n"
                                          "{\"text\": \"A tokenizer learns its merges from text like this one.\"}\n";
    int status = 0;
    std::string text = meganeura("finetune -m " + base + " --data " + dir.path("d.jsonl") + " --seq 8 --batch 2 --steps 3 --out " + out, &status);
    ASSERT_EQ(status, 0) << text;
    EXPECT_NE(text.find("trainable (full fine-tune)"), std::string::npos) << text;
    text = meganeura("generate -m " + out + " --prompt 'The fox' --max-new 3", &status);
    EXPECT_EQ(status, 0) << text;
    // It is no adapter (that read "OUT/adapter_config.json: cannot open it").
    text = meganeura("generate -m " + base + " --adapter " + out + " --prompt 'The fox' --max-new 3", &status);
    EXPECT_EQ(status, 1);
    EXPECT_NE(text.find("error: --adapter " + out + " is a model folder, not a LoRA adapter: run it as -m " + out), std::string::npos) << text;
    text = meganeura("generate -m " + base + " --adapter " + dir.path("none") + " --prompt 'The fox' --max-new 3", &status);
    EXPECT_EQ(status, 1);
    EXPECT_NE(text.find("error: --adapter " + dir.path("none") + ": there is no " + dir.path("none") + "/adapter_config.json"),
              std::string::npos) << text;
    text = meganeura("finetune -m " + base + " --data " + dir.path("d.jsonl") + " --seq 64 --out " + dir.path("o2"), &status);
    EXPECT_EQ(status, 1);
    EXPECT_NE(text.find("fewer than two blocks of --seq 64"), std::string::npos) << text;
}

// A user's mistakes with LoRA and --resume are one-line errors with status 1, and leave the output
// folder as it was. Each once passed: --lora-targets without --lora-rank trained every parameter; a
// target matching no module trained fewer (or failed in compile with "nothing to train"); a LoRA run
// resumed without --lora-rank became a full fine-tune from the base's weights (its adapter dropped,
// its moments zero) and wrote a model folder into the LoRA run's; a finished run resumed "finetuned 0
// steps: loss 0.0000 -> 0.0000"; a file as --out was an internal error (status 3); --epochs beside
// --steps was ignored; the model folder as --out had its weights replaced by the full fine-tune's,
// then the run failed with status 3.
TEST_F(FinetuneTest, LoraAndResumeMistakesAreErrors) {
    MN_REQUIRE_TORCH();
    TempDir dir("finetune");
    const std::string base = dir.path("base"), out = dir.path("out");
    make_tiny_folder(base);
    std::string text(2000, '\0');  // about 100 blocks: each run evaluates a few
    std::ifstream("/usr/share/common-licenses/Apache-2.0").read(text.data(), static_cast<std::streamsize>(text.size()));
    std::ofstream(dir.path("d.txt")) << text;
    const std::string run = "finetune -m " + base + " --data " + dir.path("d.txt") + " --seq 16 --batch 2 ";
    auto expect_error = [&](const std::string& args, const std::string& part) {
        SCOPED_TRACE(args);
        int status = 0;
        const std::string text = meganeura(run + args, &status);
        EXPECT_EQ(status, 1) << text;
        const size_t line = text.find("meganeura finetune: error: ");
        EXPECT_NE(line, std::string::npos) << text;
        EXPECT_NE(text.find(part, line), std::string::npos) << text;
    };
    expect_error("--steps 2 --out " + dir.path("d.txt"), "--out " + dir.path("d.txt") + " is a file, not a folder");
    expect_error("--steps 2 --epochs 2 --out " + out, "give --steps or --epochs, not both");
    expect_error("--steps 2 --out " + out + " --lora-targets q_proj", "--lora-targets is for a LoRA fine-tune: give --lora-rank too");
    expect_error("--steps 2 --out " + out + " --lora-rank 4 --lora-alpha 0", "option --lora-alpha is 0");
    // The model folder as the output: a full run wrote over the base's weights, then failed (status 3).
    const io::TensorMap weights = io::read_safetensors(base + "/model.safetensors");
    expect_error("--steps 2 --out " + base, "--out " + base + " is the model folder -m: the run would write over the base there");
    expect_error("--steps 1 --out " + base + "/ --lora-rank 4", "--out " + base + "/ is the model folder -m");
    EXPECT_EQ(io::read_safetensors(base + "/model.safetensors").at("model.norm.weight").to_f32(), weights.at("model.norm.weight").to_f32());
    EXPECT_FALSE(fs::exists(base + "/checkpoint.safetensors"));
    fs::create_directories(dir.path("o3"));
    fs::copy(base, dir.path("o3/merged"), fs::copy_options::recursive);
    {
        int status = 0;
        const std::string text = meganeura("finetune -m " + dir.path("o3/merged") + " --data " + dir.path("d.txt") +
                                           " --seq 16 --batch 2 --steps 1 --lora-rank 4 --merge --out " + dir.path("o3"), &status);
        EXPECT_EQ(status, 1) << text;
        EXPECT_NE(text.find("error: --merge writes " + dir.path("o3/merged") + ", the model folder -m"), std::string::npos) << text;
    }
    expect_error("--steps 2 --out " + out + " --lora-rank 4 --lora-targets q_proj,qproj",
                 "--lora-targets: the model has no module qproj; its layers' linear modules are q_proj, k_proj, v_proj, "
                 "o_proj, gate_proj, up_proj, down_proj");

    int status = 0;
    const std::string trained = meganeura(run + "--steps 2 --out " + out + " --lora-rank 4", &status);
    ASSERT_EQ(status, 0) << trained;
    const std::string lora = "LoRA: --lora-rank 4 --lora-alpha 16 --lora-targets q_proj,k_proj,v_proj,o_proj";
    expect_error("--steps 4 --resume " + out, "--resume " + out + ": its run is " + lora + "; this one is a full fine-tune");
    expect_error("--steps 4 --resume " + out + " --lora-rank 8", "this one is LoRA: --lora-rank 8");
    expect_error("--steps 2 --resume " + out + " --lora-rank 4", "--resume " + out + ": the run has taken 2 steps");
    EXPECT_FALSE(fs::exists(out + "/model.safetensors"));
    EXPECT_TRUE(fs::exists(out + "/adapter_model.safetensors"));
    const std::string resumed = meganeura(run + "--steps 3 --resume " + out + " --lora-rank 4", &status);
    EXPECT_EQ(status, 0) << resumed;
    EXPECT_NE(resumed.find("finetuned 1 steps"), std::string::npos) << resumed;
}

// A LoRA run resumed on another base (-m) trains, evaluates and merges on that base, the one given:
// the frozen base came from the checkpoint for training and --merge, from -m for the held-out loss.
TEST_F(FinetuneTest, AResumedLoraRunTrainsOnTheBaseGiven) {
    MN_REQUIRE_TORCH();
    TempDir dir("finetune");
    const std::string a = dir.path("a"), b = dir.path("b"), out = dir.path("out");
    make_tiny_folder(a);
    make_tiny_folder(b, "--seed 1");
    std::string text(2000, '\0');
    std::ifstream("/usr/share/common-licenses/Apache-2.0").read(text.data(), static_cast<std::streamsize>(text.size()));
    std::ofstream(dir.path("d.txt")) << text;
    const std::string run = " --data " + dir.path("d.txt") + " --seq 16 --batch 2 --lora-rank 4 --merge ";
    int status = 0;
    std::string log = meganeura("finetune -m " + a + run + "--steps 2 --out " + out, &status);
    ASSERT_EQ(status, 0) << log;
    log = meganeura("finetune -m " + b + run + "--steps 3 --resume " + out, &status);
    ASSERT_EQ(status, 0) << log;
    const io::TensorMap merged = io::read_safetensors(out + "/merged/model.safetensors");
    const io::TensorMap base = io::read_safetensors(b + "/model.safetensors");
    for (const char* name : {"model.norm.weight", "model.layers.1.mlp.down_proj.weight"})  // not adapted
        EXPECT_EQ(merged.at(name).to_f32(), base.at(name).to_f32()) << name;
}

// A LoRA run's checkpoint holds the adapter, its AdamW moments and the step, not the frozen base: it
// held every parameter (SmolLM2-135M's 540 MB in each checkpoint, beside an adapter of a few MB). A
// checkpoint written so, with the base (here another one's) in it, still resumes: what it holds of
// the base is not read, the base is -m's.
TEST_F(FinetuneTest, ALoraCheckpointHoldsTheAdapterNotTheBase) {
    MN_REQUIRE_TORCH();
    TempDir dir("finetune");
    const std::string a = dir.path("a"), b = dir.path("b"), out = dir.path("out");
    make_tiny_folder(a);
    make_tiny_folder(b, "--seed 1");
    write_apache_text(dir.path("d.txt"));
    const std::string run = "finetune -m " + a + " --data " + dir.path("d.txt") + " --seq 16 --batch 2 --lora-rank 4 --merge ";
    int status = 0;
    std::string log = meganeura(run + "--steps 2 --out " + out, &status);
    ASSERT_EQ(status, 0) << log;
    const std::string file = out + "/checkpoint.safetensors";
    io::TensorMap checkpoint = io::read_safetensors(file);
    const io::TensorMap adapter = io::read_safetensors(out + "/adapter_model.safetensors");
    std::set<std::string> parameters;
    for (const auto& [name, t] : checkpoint) {
        std::string parameter = name;
        for (const std::string prefix : {"optimizer.exp_avg.", "optimizer.exp_avg_sq."})
            if (name.starts_with(prefix)) parameter = name.substr(prefix.size());
        EXPECT_TRUE(models::is_lora_parameter(parameter)) << name;
        parameters.insert(parameter);
    }
    EXPECT_EQ(parameters.size(), adapter.size());  // 2 layers of 4 modules, A and B
    EXPECT_EQ(checkpoint.size(), 3 * adapter.size());
    EXPECT_LT(fs::file_size(file), 4 * fs::file_size(out + "/adapter_model.safetensors"));
    EXPECT_EQ(io::read_safetensors_metadata(file).at("meganeura.step"), "2");

    for (const auto& [name, t] : io::read_safetensors(b + "/model.safetensors")) checkpoint[name] = t;
    io::write_safetensors(file, checkpoint, io::read_safetensors_metadata(file));
    log = meganeura(run + "--steps 3 --resume " + out, &status);
    ASSERT_EQ(status, 0) << log;
    EXPECT_NE(log.find("finetuned 1 steps"), std::string::npos) << log;
    const io::TensorMap merged = io::read_safetensors(out + "/merged/model.safetensors");
    const io::TensorMap base = io::read_safetensors(a + "/model.safetensors");
    for (const char* name : {"model.norm.weight", "model.layers.1.mlp.down_proj.weight"})  // not adapted
        EXPECT_EQ(merged.at(name).to_f32(), base.at(name).to_f32()) << name;
    EXPECT_FALSE(io::read_safetensors(file).count("model.norm.weight"));
}

// SIGTERM (a job's time limit) or SIGINT (Ctrl-C) stops a run after the step in progress, its
// checkpoint written, with status 1; resumed, it ends where the uninterrupted run ends, bit for bit.
// A resumed text run drew its blocks from a generator seeded anew, so it began the first epoch's
// order again and trained on other blocks than the uninterrupted run did.
TEST_F(FinetuneTest, AnInterruptedRunResumesToTheUninterruptedResult) {
    MN_REQUIRE_TORCH();
    TempDir dir("finetune");
    const std::string base = dir.path("base"), whole = dir.path("whole"), cut = dir.path("cut"), log = dir.path("cut.log");
    make_tiny_folder(base);
    write_apache_text(dir.path("d.txt"));
    const std::string run = cli_binary() + " finetune -m " + base + " --data " + dir.path("d.txt") +
                            " --seq 16 --batch 2 --lora-rank 4 --lr 1e-2 --steps 40 ";
    int status = 0;
    std::string text = run_command(run + "--out " + whole, &status);
    ASSERT_EQ(status, 0) << text;
    // Signalled once the first held-out loss is printed (the handler is in place by then).
    text = run_command(run + "--out " + cut + " > " + log + " 2>&1 & pid=$!; until grep -q 'held-out loss' " + log +
                       " || ! kill -0 $pid; do sleep 0.01; done; kill -TERM $pid; wait $pid; echo status $?; cat " + log, &status);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(text, m, std::regex("status 1\n[\\s\\S]*error: SIGTERM: stopped after step ([0-9]+) of 40; " + cut +
                                                      "/checkpoint.safetensors holds it, and --resume " + cut + " continues the run\n")))
        << text;
    const int stopped = std::stoi(m[1]);
    text = run_command(run + "--resume " + cut, &status);
    ASSERT_EQ(status, 0) << text;
    EXPECT_NE(text.find("finetuned " + std::to_string(40 - stopped) + " steps"), std::string::npos) << text;
    const io::TensorMap want = io::read_safetensors(whole + "/adapter_model.safetensors");
    const io::TensorMap got = io::read_safetensors(cut + "/adapter_model.safetensors");
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [name, t] : want) EXPECT_EQ(got.at(name).to_f32(), t.to_f32()) << name;
    auto csv = [](const std::string& path) {
        std::stringstream s;
        s << std::ifstream(path).rdbuf();
        return s.str();
    };
    EXPECT_EQ(csv(cut + "/loss.csv"), csv(whole + "/loss.csv"));
}

// The cosine schedule's last step trains: the cosine reached 0 at the last step rather than after it,
// so a run's last step changed nothing, and --steps 1 wrote an adapter whose B were all zero with
// status 0 ("finetuned 1 steps: loss 6.2461 -> 6.2461").
TEST_F(FinetuneTest, TheLastStepTrains) {
    MN_REQUIRE_TORCH();
    TempDir dir("finetune");
    const std::string base = dir.path("base"), out = dir.path("out");
    make_tiny_folder(base);
    write_apache_text(dir.path("d.txt"));
    int status = 0;
    const std::string log = meganeura("finetune -m " + base + " --data " + dir.path("d.txt") +
                                      " --seq 16 --batch 2 --lora-rank 4 --lr 1e-2 --steps 1 --out " + out, &status);
    ASSERT_EQ(status, 0) << log;
    int adapted = 0;
    for (const auto& [name, t] : io::read_safetensors(out + "/adapter_model.safetensors")) {
        if (name.find(".lora_B.") == std::string::npos) continue;
        const std::vector<float> b = t.to_f32();
        EXPECT_TRUE(std::any_of(b.begin(), b.end(), [](float v) { return v != 0; })) << name;
        ++adapted;
    }
    EXPECT_EQ(adapted, 8);
}

// --precision fast trains and evaluates in precision fast: on a device with cooperative matrices its forward products
// on f16 tiles and its gradients scaled into f16, so its losses follow strict's to within the benchmark protocol's
// forward gate (1% relative, bench/README.md); where fast has no cooperative matrices it is strict, to the digit.
TEST_F(FinetuneTest, FastPrecisionFollowsStrict) {
    MN_REQUIRE_TORCH();
    TempDir dir("finetune");
    const std::string base = dir.path("base");
    make_tiny_folder(base);
    write_apache_text(dir.path("d.txt"));
    std::vector<double> losses[2];
    for (const char* precision : {"strict", "fast"}) {
        int status = 0;
        const std::string log = meganeura("finetune -m " + base + " --data " + dir.path("d.txt") + " --seq 16 --batch 2 --lora-rank 4 " +
                                              "--lr 1e-2 --steps 4 --precision " + precision + " --out " + dir.path(precision),
                                          &status);
        ASSERT_EQ(status, 0) << log;
        std::smatch m;
        ASSERT_TRUE(std::regex_search(log, m, std::regex("loss ([0-9.]+) -> ([0-9.]+), held-out loss ([0-9.]+) -> ([0-9.]+)"))) << log;
        for (size_t i = 1; i <= 4; ++i) losses[precision[0] == 'f'].push_back(std::stod(m[i]));
    }
    for (size_t i = 0; i < 4; ++i) {
        if (coop_device()) EXPECT_NEAR(losses[1][i], losses[0][i], 1e-2 * losses[0][i]) << "loss " << i;
        else EXPECT_EQ(losses[1][i], losses[0][i]) << "loss " << i;
    }
}

// A model whose weights give a non-finite loss is refused at the first evaluation, naming the
// weights; it stopped at step 1 with "the loss is nan; OUT/checkpoint.safetensors keeps the last
// evaluated state", a file no new run had written.
TEST_F(FinetuneTest, NonFiniteWeightsAreNamedBeforeTraining) {
    MN_REQUIRE_TORCH();
    TempDir dir("finetune");
    const std::string base = dir.path("base");
    make_tiny_folder(base);
    io::TensorMap weights = io::read_safetensors(base + "/model.safetensors");
    io::TensorData& norm = weights.at("model.norm.weight");
    std::vector<float> values = norm.to_f32();
    values[0] = std::numeric_limits<float>::quiet_NaN();
    norm = io::TensorData::from_f32(norm.shape, values);
    io::write_safetensors(base + "/model.safetensors", weights);
    std::ofstream(dir.path("d.txt")) << std::string(400, 'a') << " The quick brown fox jumps over the lazy dog.";
    int status = 0;
    const std::string text =
        meganeura("finetune -m " + base + " --data " + dir.path("d.txt") + " --seq 16 --batch 2 --steps 2 --out " + dir.path("out"), &status);
    EXPECT_EQ(status, 1) << text;
    EXPECT_NE(text.find("error: the held-out loss is nan before any training: the model's weights give non-finite values"),
              std::string::npos) << text;
}

}  // namespace
}  // namespace mn::test
