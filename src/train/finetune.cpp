#include "train/finetune.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <random>
#include <set>

#include "io/tokenizer.hpp"
#include "models/runner.hpp"
#include "models/smollm2.hpp"
#include "train/lm_data.hpp"
#include "train/peft.hpp"

namespace mn::train {

namespace {

// The held-out loss: every evaluation block once, in batches; the last batch is filled with rows
// labelled -100, which count for nothing, and each batch weighs by the labels it counts.
double evaluate(Session& eval, const std::vector<std::vector<int32_t>>& blocks, int64_t batch, int64_t seq) {
    double total = 0, counted = 0;
    for (size_t at = 0; at < blocks.size(); at += static_cast<size_t>(batch)) {
        std::vector<int32_t> ids, labels;
        int64_t real = 0;
        for (int64_t r = 0; r < batch; ++r) {
            const size_t i = at + static_cast<size_t>(r);
            const bool have = i < blocks.size();
            real += have;
            for (int64_t t = 0; t < seq; ++t) {
                ids.push_back(have ? blocks[i][static_cast<size_t>(t)] : 0);
                labels.push_back(have ? blocks[i][static_cast<size_t>(t)] : Graph::kIgnoreIndex);
            }
        }
        eval.set("input_ids", ids);
        eval.set("labels", labels);
        eval.run();
        const double n = static_cast<double>(real * (seq - 1));  // the last position of a block has no label
        total += eval.get("loss")[0] * n;
        counted += n;
    }
    return total / counted;
}

// What a resumed run must repeat (OUT/run.txt): the adapter's shape, whose parameters and optimizer
// state the checkpoint holds, or that there is none. A full run resumed from a LoRA checkpoint took
// its base weights, dropped the adapter, began the base's moments at zero and wrote a model folder
// over the LoRA run's, with status 0.
std::string settings(const models::LoraConfig& lora) {
    if (!lora.on()) return "a full fine-tune (no --lora-rank)";
    char alpha[32];
    std::snprintf(alpha, sizeof alpha, "%g", lora.alpha);
    return "LoRA: --lora-rank " + std::to_string(lora.rank) + " --lora-alpha " + alpha + " --lora-targets " + joined(lora.targets, ",");
}

// Every --lora-targets name is a linear module of the model's layers: a name that matched nothing
// trained fewer modules than asked, silently, or (all of them) failed in compile with "nothing to train".
void check_targets(const Graph& g, const models::LoraConfig& lora) {
    std::vector<std::string> linear;  // the layers' 2-D weights' module names, in graph order
    for (const Node& n : g.nodes()) {
        if (n.op != Op::Parameter || n.shape.size() != 2 || n.name.find(".layers.") == std::string::npos ||
            !n.name.ends_with(".weight") || models::is_lora_parameter(n.name))
            continue;
        const std::string module = n.name.substr(0, n.name.rfind('.'));  // less ".weight"
        const std::string last = module.substr(module.rfind('.') + 1);
        if (std::find(linear.begin(), linear.end(), last) == linear.end()) linear.push_back(last);
    }
    for (const std::string& t : lora.targets)
        if (std::find(linear.begin(), linear.end(), t) == linear.end())
            throw Error("--lora-targets: the model has no module " + t + "; its layers' linear modules are " + joined(linear, ", "));
}

// The output folder is not the model folder (nor, merging, OUT/merged): a full fine-tune wrote its
// model.safetensors over the base's, then failed copying config.json onto itself (an internal
// error, status 3), the base lost; a LoRA run wrote its adapter into the base's folder, which
// generate --adapter refuses as a model folder.
void check_not_the_base(const FinetuneRun& run) {
    const auto same = [](const std::filesystem::path& a, const std::string& b) {
        std::error_code error;
        return std::filesystem::equivalent(a, b, error);
    };
    const std::string flag = run.resume ? "--resume " : "--out ";
    if (same(run.out, run.folder.dir))
        throw Error(flag + run.out + " is the model folder -m: the run would write over the base there; give another folder");
    const std::filesystem::path merged = std::filesystem::path(run.out) / "merged";
    if (run.merge && same(merged, run.folder.dir))
        throw Error("--merge writes " + merged.string() + ", the model folder -m: the merge would write over its base; give another -m or --out");
}

}  // namespace

FinetuneResult finetune(const Device& device, const FinetuneRun& run) {
    const models::ModelFolder& folder = run.folder;
    if (folder.tokenizer.empty()) throw Error("model folder " + folder.dir + ": no tokenizer.json to read --data with");
    check_not_the_base(run);
    const std::string checkpoint = prepare_output(run.out, run.resume);

    const io::Tokenizer tokenizer = io::Tokenizer::from_file(folder.tokenizer);
    const std::optional<int32_t> eos = folder.generation.eos_token_ids.empty()
                                           ? std::nullopt
                                           : std::optional<int32_t>(static_cast<int32_t>(folder.generation.eos_token_ids[0]));
    const LmBlocks data = pack_blocks(tokenizer, read_documents(run.data), run.seq, eos);

    models::LlamaConfig c = models::LlamaConfig::from_json(folder.config);
    c.lora = run.lora;
    if (tokenizer.vocab_size() > c.vocab)
        throw Error("tokenizer.json has " + std::to_string(tokenizer.vocab_size()) + " tokens, the model's vocab_size is " +
                    std::to_string(c.vocab));
    const Shape shape{run.batch, run.seq};
    models::BuiltModel model = models::build_causal_lm(c, shape);
    if (run.lora.on()) {
        check_targets(*model.graph, run.lora);
        models::freeze_all_but_lora(*model.graph);
    }
    const Shard shard = shard_of(run.world);
    if (shard.root() || run.resume) record_run(run.out, "run.txt", settings(run.lora) + "\n", run.resume, [&](const std::string& was) {
        return "--resume " + run.out + ": its run is " + was.substr(0, was.size() - (was.ends_with('\n') ? 1 : 0)) +
               "; this one is " + settings(run.lora) + " (" + run.out + "/run.txt)";
    });
    const Trainable trainable = trainable_parameters(*model.graph);
    models::check_fits_device(*model.graph, device, "smollm2");
    const int64_t global_batch = run.batch * shard.ranks;
    const int64_t per_epoch = std::max<int64_t>(1, static_cast<int64_t>(data.train.size()) / global_batch);
    const int64_t total = run.steps > 0 ? run.steps : run.epochs * per_epoch;
    CompileOptions options = training_options(model.loss, {.lr = run.lr, .weight_decay = run.weight_decay,
                                                           .total_steps = total, .seed = run.seed});
    options.precision = run.precision;
    if (run.world) options.data_parallel = run.world->exchange();
    const auto is_adapter = [&](const std::string& name) { return run.lora.on() && models::is_lora_parameter(name); };
    const auto loaded = [&](const std::string& name) { return !is_adapter(name); };  // from the folder's weights
    options.skip_init = loaded;
    Session train = compile(*model.graph, device, options);
    train.load(folder.weights, is_adapter);
    // A LoRA run's checkpoint holds the adapter, its optimizer state and the step, not the frozen
    // base: resumed, the base is -m's, as it is in the evaluation session. A checkpoint written before
    // this held the base too, which is not read: read, it trained on the first run's base while the
    // held-out loss used -m's, and --merge merged into the first run's.
    std::set<std::string> frozen;
    for (const Node& n : model.graph->nodes())
        if (n.op == Op::Parameter && !n.requires_grad) frozen.insert(n.name);
    if (run.resume) train.load({checkpoint}, [&](const std::string& name) { return frozen.count(name) > 0; });

    models::BuiltModel eval_model = models::build_causal_lm(c, shape);
    Session eval = compile(*eval_model.graph, device, {.precision = run.precision, .read_back = std::vector<std::string>{"loss"}, .skip_init = loaded});
    eval.load(folder.weights, is_adapter);

    if (shard.root()) print_plan(folder.dir, trainable,
               run.lora.on() ? "LoRA rank " + std::to_string(run.lora.rank) + " on " + std::to_string(trainable.names.size() / 2) + " modules"
                             : "full fine-tune",
               train.stats());
    if (shard.root())
        std::fprintf(stderr, "data %s: %lld tokens, %zu training and %zu held-out blocks of %lld; %lld steps of %lld blocks%s\n",
                     run.data.c_str(), static_cast<long long>(data.tokens), data.train.size(), data.eval.size(),
                     static_cast<long long>(run.seq), static_cast<long long>(total), static_cast<long long>(global_batch),
                     run.world ? (" (" + std::to_string(shard.ranks) + " processes of " + std::to_string(run.batch) + ")").c_str() : "");

    // Blocks in a seeded order per epoch, the epochs one after the other from one generator; step s
    // takes blocks (s - 1) * batch .. s * batch - 1 of that sequence, and a resumed run draws the
    // epochs before its first step again, so it sees the blocks the uninterrupted run would have. (It
    // began the first epoch's order again, training on other blocks.)
    const auto blocks = static_cast<int64_t>(data.train.size());
    std::mt19937_64 rng(run.seed);
    std::vector<size_t> order(data.train.size());
    int64_t order_epoch = -1;
    auto feed = [&](int64_t step) {
        std::vector<int32_t> ids;
        for (int64_t r = 0; r < run.batch; ++r) {
            const int64_t k = (step - 1) * global_batch + shard.rank * run.batch + r;
            for (; order_epoch < k / blocks; ++order_epoch) {
                std::iota(order.begin(), order.end(), 0);
                std::shuffle(order.begin(), order.end(), rng);
            }
            const std::vector<int32_t>& b = data.train[order[static_cast<size_t>(k % blocks)]];
            ids.insert(ids.end(), b.begin(), b.end());
        }
        train.set("input_ids", ids);
        train.set("labels", ids);
    };
    const FinetuneResult result =
        run_steps(train, eval, trainable.names,
                  {.out = run.out, .total = total, .eval_every = run.eval_every, .per_step = global_batch * run.seq,
                   .unit = "tokens", .curve_title = "Fine-tuning loss",
                   .frozen = [&](const std::string& name) { return frozen.count(name) > 0; }, .world = run.world},
                  feed, [&] { return HeldOut{.loss = evaluate(eval, data.eval, run.batch, run.seq)}; });

    if (!shard.root()) return result;
    std::vector<std::string> all;
    for (const Node& n : model.graph->nodes())
        if (n.op == Op::Parameter && !is_adapter(n.name)) all.push_back(n.name);
    if (!run.lora.on()) {
        write_model_folder(run.out, tensors_of(train, all), folder);
        std::fprintf(stderr, "model folder %s written\n", run.out.c_str());
        return result;
    }
    Adapter adapter{.lora = run.lora, .tensors = tensors_of(train, trainable.names)};
    write_adapter(run.out, adapter.tensors, run.lora, folder.dir);
    std::fprintf(stderr, "LoRA adapter %s/adapter_model.safetensors written (PEFT's format)\n", run.out.c_str());
    if (run.merge) {
        const std::string merged = (std::filesystem::path(run.out) / "merged").string();
        write_model_folder(merged, merge_adapter(tensors_of(train, all), adapter), folder);
        std::fprintf(stderr, "merged model folder %s written\n", merged.c_str());
    }
    return result;
}

}  // namespace mn::train
