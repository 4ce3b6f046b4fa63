// `meganeura finetune`: a Hugging Face model folder fine-tuned on a text file (train/finetune.hpp),
// fully or with LoRA, or torchvision ResNet weights on a folder of images (train/image_finetune.hpp),
// where the model will be deployed. A folder as --data picks the second.
#include <cstdio>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/world_arg.hpp"
#include "models/model_folder.hpp"
#include "train/finetune.hpp"
#include "train/image_finetune.hpp"

namespace mn::cli {

namespace {

std::vector<std::string> split_list(const std::string& text) {
    std::vector<std::string> items;
    std::stringstream in(text);
    for (std::string item; std::getline(in, item, ',');) {
        if (item.empty()) throw Error("option --lora-targets needs module names separated by commas, got '" + text + "'");
        items.push_back(item);
    }
    return items;
}

// The options of one kind of run, refused by name in the other.
void refuse(const Flags& f, const std::vector<const char*>& names, const std::string& why) {
    for (const char* name : names)
        if (f.given(name)) throw Error(std::string("--") + name + " " + why);
}

std::string output_folder(const Flags& f) {
    if (f.str("out").empty() == f.str("resume").empty()) throw Error("give one of --out DIR and --resume DIR");
    return f.str("resume").empty() ? f.str("out") : f.str("resume");
}


// After a run: true on the ranks but the first of a distributed run, which print nothing; MPI ends.
bool finished(distributed::World* world) {
    if (!world) return false;
    const bool quiet = !world->root();
    world->finish();
    return quiet;
}

// --data FOLDER: torchvision ResNet weights fine-tuned on one sub-folder of images per class.
int run_image_finetune(const Flags& f) {
    refuse(f, {"lora-rank", "lora-alpha", "lora-targets", "steps", "seq", "eval-every", "merge"},
           "is for text; an image folder trains for --epochs, evaluated after each");
    const std::string& weights = f.required("model");
    if (models::is_directory(weights) || !weights.ends_with(".safetensors"))
        throw Error("--model " + weights + ": with an image folder as --data, give torchvision ResNet weights (a .safetensors file)");
    const train::ImageFinetuneRun run{
        .weights = weights, .data = f.required("data"), .out = output_folder(f), .epochs = f.integer("epochs", 1, INT32_MAX),
        .batch = f.integer("batch", 1, 1 << 16), .image_size = f.integer("image-size", 32, 1 << 14), .lr = f.real("lr", 0, 10),
        .weight_decay = f.real("weight-decay", 0, 10), .seed = static_cast<uint64_t>(f.integer("seed", 0)),
        .augment = f.on("augment"), .train_bn = f.on("train-bn"), .resume = !f.str("resume").empty(),
        .precision = parse_precision(f), .world = join_world(f)};
    if (run.train_bn && run.batch < 2) throw Error("--train-bn normalizes with batch statistics: give --batch 2 or more");
    const Device device = run.world ? run.world->open_device() : Device::open();
    const train::FinetuneResult r = train::finetune_images(device, run);
    if (finished(run.world)) return 0;
    std::printf("finetuned %lld steps: loss %.4f -> %.4f, held-out loss %.4f -> %.4f, accuracy %.2f%% -> %.2f%%; output in %s\n",
                static_cast<long long>(r.steps), r.first_loss, r.last_loss, r.first_eval.loss, r.last_eval.loss,
                100 * r.first_eval.accuracy.value(), 100 * r.last_eval.accuracy.value(), run.out.c_str());
    return 0;
}

int run_finetune(const Flags& f) {
    if (models::is_directory(f.required("data"))) return run_image_finetune(f);
    if (f.given("steps") && f.given("epochs")) throw Error("give --steps or --epochs, not both (--steps counts the run's steps)");
    refuse(f, {"image-size", "augment", "train-bn"}, "is for an image folder as --data");
    const std::string& dir = f.required("model");
    if (!models::is_directory(dir)) throw Error("--model " + dir + " is not a Hugging Face model folder");
    train::FinetuneRun run{.data = f.required("data"), .out = output_folder(f),
                           .steps = f.integer("steps", 0, INT32_MAX), .epochs = f.integer("epochs", 1, INT32_MAX),
                           .batch = f.integer("batch", 1, 1 << 16), .seq = f.integer("seq", 2, 1 << 20),
                           .eval_every = f.integer("eval-every", 0, INT32_MAX), .lr = f.real("lr", 0, 10),
                           .weight_decay = f.real("weight-decay", 0, 10),
                           .seed = static_cast<uint64_t>(f.integer("seed", 0)), .resume = !f.str("resume").empty(),
                           .merge = f.on("merge"), .precision = parse_precision(f)};
    run.lora.rank = f.integer("lora-rank", 0, 1 << 16);
    run.lora.alpha = f.real("lora-alpha", 0);
    run.lora.targets = split_list(f.str("lora-targets"));
    // Without a rank they would be ignored: a full fine-tune where an adapter was meant.
    if (!run.lora.on()) refuse(f, {"lora-alpha", "lora-targets", "merge"}, "is for a LoRA fine-tune: give --lora-rank too");
    if (run.lora.alpha == 0) throw Error("option --lora-alpha is 0: the adapter would be scaled by 0 and never train");
    run.folder = models::open_model_folder(dir);
    run.world = join_world(f);
    const Device device = run.world ? run.world->open_device() : Device::open();
    const train::FinetuneResult r = train::finetune(device, run);
    if (finished(run.world)) return 0;
    std::printf("finetuned %lld steps: loss %.4f -> %.4f, held-out loss %.4f -> %.4f; output in %s\n",
                static_cast<long long>(r.steps), r.first_loss, r.last_loss, r.first_eval.loss, r.last_eval.loss, run.out.c_str());
    return 0;
}

}  // namespace

const Command finetune_command = {
    .name = "finetune",
    .summary = "fine-tune a Hugging Face model folder on text (fully or with LoRA), or a ResNet on images",
    .description = "Text: fine-tunes the causal LM of a model folder on a .txt file or a .jsonl file of {\"text\": ...}\n"
                   "lines: the text tokenized and packed into blocks of --seq tokens, a tenth of them held out for the\n"
                   "evaluation loss, AdamW with a cosine schedule over every parameter or, with --lora-rank, over\n"
                   "LoRA adapters only (the base frozen). Writes OUT/checkpoint.safetensors (to --resume from),\n"
                   "OUT/loss.csv and loss.svg, then the adapter in PEFT's format (adapter_model.safetensors,\n"
                   "adapter_config.json) or, for a full fine-tune, a model folder; --merge also writes OUT/merged.\n\n"
                   "Images: with --data FOLDER (one sub-folder of PNG/JPEG images per class) and -m torchvision ResNet\n"
                   "weights (.safetensors), a new classifier head for the classes, each image resized, center-cropped to\n"
                   "--image-size and normalized as torchvision's ImageNet evaluation transform, a tenth of each class\n"
                   "held out (--augment: training images through torchvision's RandomResizedCrop and RandomHorizontalFlip),\n"
                   "AdamW with a cosine schedule, the held-out loss and accuracy after every epoch. Writes the\n"
                   "checkpoint and the curve as for text, OUT/classes.txt and OUT/model.safetensors (torchvision's names).",
    .options = {{"model", "", "DIR|FILE", "the Hugging Face model folder, or ResNet weights for images (-m; required)"},
                {"data", "", "FILE|DIR", "training text (.txt, or .jsonl with a \"text\" per line), or an image folder (required)"},
                {"out", "", "DIR", "the output folder"},
                {"resume", "", "DIR", "continue the run whose output folder is DIR"},
                {"lora-rank", "0", "R", "LoRA rank; 0: a full fine-tune"},
                {"lora-alpha", "16", "A", "LoRA alpha (the adapter is scaled by alpha / rank)"},
                {"lora-targets", "q_proj,k_proj,v_proj,o_proj", "LIST", "the modules that get adapters"},
                {"steps", "0", "N", "optimizer steps; 0: --epochs passes over the training blocks"},
                {"epochs", "1", "E", "passes over the training blocks or images (with --steps 0)"},
                {"batch", "4", "B", "blocks or images per step (with --distributed: per process)"},
                {"seq", "128", "T", "tokens per block"},
                {"image-size", "224", "S", "the images' side after the crop (resized to S / 0.875 first)"},
                {"augment", "false", "", "training images through torchvision's RandomResizedCrop and RandomHorizontalFlip"},
                {"train-bn", "false", "", "batch norms on batch statistics while training (default: the weights' running ones)"},
                {"lr", "2e-4", "LR", "AdamW's learning rate, decayed to 0 on a cosine"},
                {"weight-decay", "0", "W", "AdamW's decoupled weight decay"},
                {"eval-every", "0", "N", "evaluate and checkpoint every N steps too; 0: at the end (text)"},
                {"seed", "0", "S", "the order of the blocks or images, and the new parameters' initialization"},
                {"merge", "false", "", "also write OUT/merged, the base with the adapter merged in"},
                precision_option(),
                kDistributed,
                kBucketMb},
    .run = run_finetune,
};

}  // namespace mn::cli
