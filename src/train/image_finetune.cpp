#include "train/image_finetune.hpp"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>

#include "models/resnet.hpp"
#include "models/runner.hpp"
#include "train/dataset.hpp"
#include "train/image_folder.hpp"
#include "train/trainer.hpp"

namespace mn::train {

namespace fs = std::filesystem;

namespace {

struct Batch {
    std::vector<float> x;
    std::vector<int32_t> y;
};

bool is_head(const std::string& name) { return name == "fc.weight" || name == "fc.bias"; }

// OUT/classes.txt: written by a new run, and on --resume the image folder's classes must be the same.
void record_classes(const fs::path& out, const ImageFolder& folder, bool resume) {
    record_run(out.string(), "classes.txt", joined(folder.classes, "\n") + "\n", resume, [&](const std::string&) {
        return "--data " + folder.root + ": its classes (" + joined(folder.classes, ", ") + ") are not those of the run in " +
               out.string() + " (" + (out / "classes.txt").string() + ")";
    });
}

// The held-out images once each, in batches of the evaluation session's size (the last one padded).
HeldOut evaluate(Session& eval, const std::vector<LabelledImage>& images, int64_t batch, const io::ImageTransform& t) {
    Evaluation sums;
    std::vector<float> x;
    std::vector<int32_t> y;
    for (int64_t at = 0; at < static_cast<int64_t>(images.size()); at += batch) {
        std::vector<int64_t> rows;
        for (int64_t i = at; i < std::min<int64_t>(at + batch, static_cast<int64_t>(images.size())); ++i) rows.push_back(i);
        fill_image_batch(images, rows, batch, t, x, y);
        eval.set("images", x);
        eval.set("labels", y);
        eval.run();
        add_scores(eval.get("logits"), batch, y, static_cast<int64_t>(rows.size()), sums);
    }
    const double n = static_cast<double>(sums.count);
    return {.loss = sums.loss / n, .accuracy = sums.accuracy / n};
}

// torchvision's num_batches_tracked counts by name, read before training so that a bad one is an
// error then, not after the run.
std::map<std::string, int64_t> batch_counts(const io::TensorMap& base, const std::string& file) {
    std::map<std::string, int64_t> counts;
    for (const auto& [name, t] : base) {
        if (!name.ends_with(".num_batches_tracked")) continue;
        if (t.dtype != "I64" || t.numel() != 1)
            throw Error(file + ": " + name + " is " + t.dtype + " " + shape_str(t.shape) + ", expected one I64");
        std::memcpy(&counts[name], t.bytes.data(), 8);
    }
    return counts;
}

// The fine-tuned parameters and running statistics under torchvision's names, and each batch norm's
// num_batches_tracked (0-d, as torchvision's buffer) counting the batches its statistics saw: the
// base's count (0 where the base has none), `steps` more with batch statistics, as train() mode counts.
io::TensorMap fine_tuned_weights(const Session& train, const Graph& g, const std::map<std::string, int64_t>& counts,
                                 int64_t steps) {
    std::vector<std::string> names;
    for (const Node& n : g.nodes())
        if (n.op == Op::Parameter || n.op == Op::State) names.push_back(n.name);
    io::TensorMap weights = tensors_of(train, names);
    const std::string mean = ".running_mean";
    for (const std::string& name : names) {
        if (!name.ends_with(mean)) continue;
        const std::string tracked = name.substr(0, name.size() - mean.size()) + ".num_batches_tracked";
        const auto it = counts.find(tracked);
        const int64_t seen = (it == counts.end() ? 0 : it->second) + steps;
        io::TensorData t{.dtype = "I64", .shape = {}, .bytes = std::vector<uint8_t>(8)};
        std::memcpy(t.bytes.data(), &seen, 8);
        weights[tracked] = std::move(t);
    }
    return weights;
}

}  // namespace

FinetuneResult finetune_images(const Device& device, const ImageFinetuneRun& run) {
    const std::string checkpoint = prepare_output(run.out, run.resume);
    const ImageFolder folder = open_image_folder(run.data);
    const Shard shard = shard_of(run.world);
    if (shard.root() || run.resume) record_classes(run.out, folder, run.resume);

    const io::TensorMap base = io::read_safetensors(run.weights);
    models::ResNetConfig config = models::resnet_config_of(base, run.weights);
    const std::map<std::string, int64_t> counts = batch_counts(base, run.weights);
    const int64_t base_classes = config.num_classes, features = (config.width << (config.blocks.size() - 1)) * 4;
    config.num_classes = static_cast<int64_t>(folder.classes.size());
    const Shape images{run.batch, 3, run.image_size, run.image_size};
    models::ResNetConfig train_config = config;
    train_config.train_bn = run.train_bn;
    models::BuiltModel model = models::build_resnet(train_config, images);
    const Trainable trainable = trainable_parameters(*model.graph);
    // Evaluation reads what training changes: the parameters, and with batch statistics the running ones.
    std::vector<std::string> to_eval = trainable.names;
    for (const Node& n : model.graph->nodes())
        if (n.op == Op::State && run.train_bn) to_eval.push_back(n.name);
    models::check_fits_device(*model.graph, device, "resnet");

    const int64_t global_batch = run.batch * shard.ranks;
    const int64_t per_epoch = static_cast<int64_t>(folder.train.size()) / global_batch;
    if (per_epoch == 0)
        throw Error("--data " + run.data + ": " + std::to_string(folder.train.size()) + " training images, fewer than --batch " +
                    std::to_string(run.batch) + (shard.ranks > 1 ? " times " + std::to_string(shard.ranks) + " processes" : ""));
    const int64_t total = run.epochs * per_epoch;
    CompileOptions options = training_options(model.loss, {.lr = run.lr, .weight_decay = run.weight_decay,
                                                           .total_steps = total, .seed = run.seed});
    options.precision = run.precision;
    if (run.world) options.data_parallel = run.world->exchange();
    const auto loaded = [&](const std::string& name) { return !is_head(name); };  // from --weights
    options.skip_init = loaded;
    Session train = compile(*model.graph, device, options);
    train.load({run.weights}, is_head);
    if (run.resume) train.load(checkpoint);
    models::BuiltModel eval_model = models::build_resnet(config, images);
    Session eval = compile(*eval_model.graph, device, {.precision = run.precision, .read_back = std::vector<std::string>{"logits"}, .skip_init = loaded});
    eval.load({run.weights}, is_head);

    if (shard.root()) {
        print_plan(run.weights, trainable, run.train_bn ? "full fine-tune, batch norms on batch statistics" : "full fine-tune",
                   train.stats());
        const std::string head = "[" + std::to_string(config.num_classes) + ", " + std::to_string(features) + "]";
        std::fprintf(stderr, "new head fc.weight %s for %zu classes (%s), in place of the weights' [%lld, %lld]\n", head.c_str(),
                     folder.classes.size(), joined(folder.classes, ", ").c_str(), static_cast<long long>(base_classes),
                     static_cast<long long>(features));
        std::fprintf(stderr, "data %s: %zu training and %zu held-out images at %lld x %lld%s; %lld epochs of %lld steps of %lld images\n",
                     run.data.c_str(), folder.train.size(), folder.eval.size(), static_cast<long long>(run.image_size),
                     static_cast<long long>(run.image_size), run.augment ? " (training ones augmented)" : "",
                     static_cast<long long>(run.epochs), static_cast<long long>(per_epoch), static_cast<long long>(global_batch));
    }

    // Step s takes batch (s - 1) % per_epoch of its epoch's seeded order: a resumed run sees the
    // batches the uninterrupted one would have. The next step's batch is decoded while this one
    // trains on the device.
    const io::ImageTransform transform = io::ImageTransform::for_crop(run.image_size);
    int64_t order_epoch = -1;
    std::vector<int64_t> order;
    auto prepare = [&](int64_t step) {
        const int64_t epoch = (step - 1) / per_epoch, index = (step - 1) % per_epoch;
        if (epoch != order_epoch)
            order = BatchIterator::permutation(static_cast<int64_t>(folder.train.size()), run.seed, epoch), order_epoch = epoch;
        const int64_t first = index * global_batch + shard.rank * run.batch;
        std::vector<int64_t> rows(order.begin() + first, order.begin() + first + run.batch);
        const std::optional<Augment> augment = run.augment ? std::optional(Augment{run.seed, epoch}) : std::nullopt;
        return std::async(std::launch::async, [&, rows = std::move(rows), augment] {
            Batch b;
            fill_image_batch(folder.train, rows, run.batch, transform, b.x, b.y, augment);
            return b;
        });
    };
    std::future<Batch> next;
    auto feed = [&](int64_t step) {
        if (!next.valid()) next = prepare(step);  // the first step of this run
        const Batch b = next.get();
        train.set("images", b.x);
        train.set("labels", b.y);
        if (step < total) next = prepare(step + 1);
    };
    const std::string title = "Fine-tuning ResNet on " + std::to_string(folder.classes.size()) + " classes: " +
                              std::to_string(folder.train.size()) + " training / " + std::to_string(folder.eval.size()) +
                              " held-out images, batch " + std::to_string(run.batch);
    const FinetuneResult result = run_steps(
        train, eval, to_eval,
        {.out = run.out, .total = total, .eval_every = per_epoch, .epoch_steps = per_epoch, .per_step = global_batch,
         .unit = "images", .curve_title = title, .world = run.world},
        feed, [&] { return evaluate(eval, folder.eval, run.batch, transform); });

    if (!shard.root()) return result;
    io::write_safetensors((fs::path(run.out) / "model.safetensors").string(),
                          fine_tuned_weights(train, *model.graph, counts, run.train_bn ? train.step_count() : 0),
                          {{"format", "pt"}});
    std::fprintf(stderr, "fine-tuned weights %s/model.safetensors written (torchvision's names, fc for %zu classes; classes.txt)\n",
                 run.out.c_str(), folder.classes.size());
    return result;
}

}  // namespace mn::train
