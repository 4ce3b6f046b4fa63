// `meganeura train fashion-mnist` and `meganeura eval fashion-mnist`: the main job.
#include <cstdint>
#include <cstdio>
#include <filesystem>

#include "cli/commands.hpp"
#include "cli/world_arg.hpp"
#include "train/trainer.hpp"

namespace mn::cli {

namespace {

void require_dataset(const Flags& f) {
    if (f.positional().size() != 1 || f.positional()[0] != "fashion-mnist") {
        throw Error("expected the dataset name: fashion-mnist");
    }
}

const Option kModel = {"model", "mlp", "NAME", "mlp (784-256-128-10) or cnn"};
const Option kData = {"data", "", "DIR", "folder of the Fashion-MNIST IDX files (default: $MEGANEURA_DATA_DIR/"
                                         "fashion-mnist, else /usr/share/datasets/fashion-mnist)"};

int run_train(const Flags& f) {
    require_dataset(f);
    train::ClassifierRun run{.model = f.str("model"), .epochs = f.integer("epochs", 1, INT32_MAX),
                             .batch = f.integer("batch", 1, INT32_MAX),
                             .seed = static_cast<uint64_t>(f.integer("seed", 0)),
                             .optimizer = AdamW{.lr = f.real("lr", 0), .weight_decay = f.real("weight-decay", 0)},
                             .checkpoint = f.str("checkpoint"), .resume = f.str("resume"),
                             .curve_prefix = f.str("curve"),
                             .cosine = f.choice("schedule", {"cosine", "constant"}) == "cosine"};
    if (run.resume.empty() && !f.on("force") && std::filesystem::exists(run.checkpoint)) {
        throw Error("--checkpoint " + run.checkpoint + " exists; pass --resume " + run.checkpoint +
                    " to continue it, or --force to replace it");
    }
    run.world = join_world(f);
    const train::Dataset train_set = train::load_fashion_mnist("train", f.str("data"));
    const train::Dataset test_set = train::load_fashion_mnist("test", f.str("data"));
    const Device device = run.world ? run.world->open_device() : Device::open();
    const train::Evaluation e = train::train_classifier(device, run, train_set, test_set);
    if (!run.world || run.world->root()) std::printf("test accuracy: %.2f%%\n", 100 * e.accuracy);
    if (run.world) run.world->finish();
    return 0;
}

int run_eval(const Flags& f) {
    require_dataset(f);
    const int64_t batch = f.integer("batch", 1, INT32_MAX);
    const std::string& model = f.str("model");
    const train::Dataset test_set = train::load_fashion_mnist("test", f.str("data"));
    if (batch > test_set.count) {
        throw Error("option --batch is " + f.str("batch") + ", more than the " + std::to_string(test_set.count) +
                    " test images");
    }
    const Device device = Device::open();
    const train::Evaluation e = train::evaluate_classifier(device, model, f.str("checkpoint"), test_set, batch);
    std::printf("evaluated %s on %s: %lld test images, loss %.4f\ntest accuracy: %.2f%%\n", f.str("checkpoint").c_str(),
                device.name().c_str(), static_cast<long long>(e.count), e.loss, 100 * e.accuracy);
    return 0;
}

}  // namespace

const Command train_command = {
    .name = "train",
    .positional = "fashion-mnist",
    .summary = "train a Fashion-MNIST classifier, evaluate it each epoch, write the checkpoint and loss curve",
    .description =
        "Trains a classifier on Fashion-MNIST with AdamW, evaluates it on the test set after each epoch,\n"
        "and writes the checkpoint (parameters and optimizer state, safetensors) and the loss curve (CSV\n"
        "and SVG). An existing checkpoint is replaced only with --resume (continue it) or --force; a\n"
        "non-finite loss stops training naming the step, and the checkpoint keeps its last finite state.",
    .options = {kModel,
                {"epochs", "2", "N", "passes over the training set"},
                {"batch", "64", "N", "images per step (with --distributed: per process)"},
                {"lr", "1e-3", "LR", "AdamW's learning rate (the peak of the cosine schedule)"},
                {"weight-decay", "0", "WD", "AdamW's decoupled weight decay"},
                {"schedule", "cosine", "NAME", "learning-rate schedule: cosine (decay to 0 over the run) or constant"},
                {"seed", "0", "N", "seed of the initialization and of the shuffling"},
                {"checkpoint", "fashion-mnist.safetensors", "FILE", "checkpoint written after every epoch"},
                {"resume", "", "FILE", "continue from this checkpoint (parameters, optimizer state, step)"},
                {"force", "false", "", "replace an existing --checkpoint"},
                {"curve", "", "PREFIX", "write the loss curve to PREFIX.csv and PREFIX.svg (default: the "
                                        "checkpoint's name without .safetensors)"},
                kData,
                kDistributed,
                kBucketMb},
    .run = run_train,
};

const Command eval_command = {
    .name = "eval",
    .positional = "fashion-mnist",
    .summary = "reload a Fashion-MNIST checkpoint and report its test loss and accuracy",
    .description = "Reloads a checkpoint written by meganeura train and reports its loss and accuracy on the\n"
                   "10,000 Fashion-MNIST test images.",
    .options = {kModel,
                {"checkpoint", "fashion-mnist.safetensors", "FILE", "the checkpoint to evaluate"},
                {"batch", "500", "N", "images per run"},
                kData},
    .run = run_eval,
};

}  // namespace mn::cli
