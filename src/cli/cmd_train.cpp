// `meganeura train fashion-mnist` and `meganeura eval fashion-mnist`: the main job.
#include <cstdint>
#include <cstdio>
#include <filesystem>

#include "cli/flags.hpp"
#include "train/trainer.hpp"

namespace mn::cli {

namespace {

void require_dataset(const Flags& f) {
    if (f.positional().size() != 1 || f.positional()[0] != "fashion-mnist") {
        throw Error("expected the dataset name: fashion-mnist");
    }
}

}  // namespace

int cmd_train(const Args& args) {
    const Flags f(args, {{"model", "mlp"}, {"epochs", "2"}, {"batch", "64"}, {"lr", "1e-3"}, {"weight-decay", "0"},
                         {"seed", "0"}, {"checkpoint", "fashion-mnist.safetensors"}, {"resume", ""}, {"curve", ""},
                         {"data", ""}, {"schedule", "cosine"}, {"force", "false"}});
    require_dataset(f);
    if (f.str("schedule") != "cosine" && f.str("schedule") != "constant") {
        throw Error("--schedule must be cosine or constant, got '" + f.str("schedule") + "'");
    }
    train::ClassifierRun run{.model = f.str("model"), .epochs = f.integer("epochs", 1, INT32_MAX),
                             .batch = f.integer("batch", 1, INT32_MAX),
                             .seed = static_cast<uint64_t>(f.integer("seed", 0)),
                             .optimizer = AdamW{.lr = f.real("lr", 0), .weight_decay = f.real("weight-decay", 0)},
                             .checkpoint = f.str("checkpoint"), .resume = f.str("resume"),
                             .curve_prefix = f.str("curve"), .cosine = f.str("schedule") == "cosine"};
    if (run.resume.empty() && !f.on("force") && std::filesystem::exists(run.checkpoint)) {
        throw Error("--checkpoint " + run.checkpoint + " exists; pass --resume " + run.checkpoint +
                    " to continue it, or --force to replace it");
    }
    const train::Dataset train_set = train::load_fashion_mnist("train", f.str("data"));
    const train::Dataset test_set = train::load_fashion_mnist("test", f.str("data"));
    const Device device = Device::open();
    const train::Evaluation e = train::train_classifier(device, run, train_set, test_set);
    std::printf("test accuracy: %.2f%%\n", 100 * e.accuracy);
    return 0;
}

int cmd_eval(const Args& args) {
    const Flags f(args, {{"model", "mlp"}, {"checkpoint", "fashion-mnist.safetensors"}, {"batch", "500"}, {"data", ""}});
    require_dataset(f);
    const int64_t batch = f.integer("batch", 1, INT32_MAX);
    const train::Dataset test_set = train::load_fashion_mnist("test", f.str("data"));
    if (batch > test_set.count) {
        throw Error("option --batch is " + f.str("batch") + ", more than the " + std::to_string(test_set.count) +
                    " test images");
    }
    const Device device = Device::open();
    const train::Evaluation e = train::evaluate_classifier(device, f.str("model"), f.str("checkpoint"), test_set, batch);
    std::printf("evaluated %s on %s: %lld test images, loss %.4f\ntest accuracy: %.2f%%\n", f.str("checkpoint").c_str(),
                device.name().c_str(), static_cast<long long>(e.count), e.loss, 100 * e.accuracy);
    return 0;
}

}  // namespace mn::cli
