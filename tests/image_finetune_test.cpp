// `meganeura finetune -m RESNET.safetensors --data FOLDER` end to end on lavapipe: tiny ResNet-shaped
// weights (a stem of 8 channels, one bottleneck in each of two stages, a 10-class head) fine-tuned on
// three classes of small images; the held-out loss goes down and the accuracy rises above chance, the
// new head has three rows, the outputs are written, and a run resumes from its checkpoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "gpu_check.hpp"
#include "image_folder.hpp"
#include "io/safetensors.hpp"
#include "models/resnet.hpp"
#include "tiny_folder.hpp"
#include "host_tools.hpp"

namespace mn::test {
namespace {

namespace fs = std::filesystem;

// Weights as torchvision's state_dict names them, with the running statistics of a trained network
// (not 0 and 1, so the folding of batch norm into the convolutions matters).
void write_tiny_resnet(const std::string& path) {
    Graph g;
    const models::ResNetConfig config{.blocks = {1, 1}, .width = 8, .num_classes = 10};
    g.output("logits", models::resnet_logits(g, g.input("images", {1, 3, 32, 32}), config));
    Session s = compile(g, device(), {.seed = 5});
    for (const Node& n : g.nodes()) {
        if (n.op != Op::State) continue;
        const bool var = n.name.ends_with("running_var");
        s.set(n.name, std::vector<float>(size_t(numel(n.shape)), var ? 1.5f : 0.1f));
    }
    s.save(path);
}

struct Summary {
    int64_t steps = 0;
    double eval_loss_before = 0, eval_loss_after = 0, accuracy_before = 0, accuracy_after = 0;
};

Summary summary_of(const std::string& out) {
    std::smatch m;
    const std::regex line("finetuned ([0-9]+) steps: loss [0-9.]+ -> [0-9.]+, held-out loss ([0-9.]+) -> ([0-9.]+), "
                          "accuracy ([0-9.]+)% -> ([0-9.]+)%");
    if (!std::regex_search(out, m, line)) {
        ADD_FAILURE() << "no summary line in:\n" << out;
        return {};
    }
    return {std::stoll(m[1]), std::stod(m[2]), std::stod(m[3]), std::stod(m[4]), std::stod(m[5])};
}

class ImageFinetuneTest : public GpuTest {};

TEST_F(ImageFinetuneTest, LearnsTheClassesWritesTheModelAndResumes) {
    TempDir dir("image-finetune");
    const std::string weights = dir.path("resnet.safetensors"), data = dir.path("data"), out = dir.path("out");
    write_tiny_resnet(weights);
    write_image_folder(data, {.per_class = 20});  // 18 training and 2 held-out images per class
    const std::string run = "finetune -m " + weights + " --data " + data + " --image-size 32 --batch 6 --lr 3e-3 ";
    int status = 0;
    std::string text = meganeura(run + "--epochs 3 --out " + out, &status);
    ASSERT_EQ(status, 0) << text;
    const Summary s = summary_of(text);
    EXPECT_EQ(s.steps, 27);  // 3 epochs of 54 / 6
    EXPECT_LT(s.eval_loss_after, s.eval_loss_before) << text;
    EXPECT_GE(s.accuracy_after, 83.0) << text;  // 5 of 6 held-out images; chance is a third
    EXPECT_NE(text.find("new head fc.weight [3, 64] for 3 classes (blue, green, red), in place of the weights' [10, 64]"),
              std::string::npos) << text;
    EXPECT_NE(text.find("(epoch 3)"), std::string::npos) << text;
    for (const char* f : {"checkpoint.safetensors", "loss.csv", "loss.svg", "classes.txt", "model.safetensors"})
        EXPECT_TRUE(fs::exists(out + "/" + f)) << f;
    std::ifstream classes(out + "/classes.txt");
    std::stringstream names;
    names << classes.rdbuf();
    EXPECT_EQ(names.str(), "blue\ngreen\nred\n");
    const io::TensorMap model = io::read_safetensors(out + "/model.safetensors");
    EXPECT_EQ(model.at("fc.weight").shape, (Shape{3, 64}));
    EXPECT_EQ(model.at("bn1.running_var").to_f32(), std::vector<float>(8, 1.5f));  // eval-mode BN keeps the base's
    EXPECT_FALSE(model.count("optimizer.exp_avg.fc.weight"));
    EXPECT_EQ(model.at("layer2.0.downsample.1.num_batches_tracked").to_i32(), std::vector<int32_t>{0});  // none in the base

    text = meganeura(run + "--epochs 3 --out " + out, &status);
    EXPECT_EQ(status, 1) << text;
    EXPECT_NE(text.find("has a checkpoint; pass --resume"), std::string::npos) << text;
    text = meganeura(run + "--epochs 4 --resume " + out, &status);
    ASSERT_EQ(status, 0) << text;
    EXPECT_EQ(summary_of(text).steps, 9) << text;  // the fourth epoch only

    // Another folder's classes do not continue this run.
    write_image_folder(dir.path("other"), {.classes = {"blue", "green"}, .per_class = 6});
    text = meganeura("finetune -m " + weights + " --data " + dir.path("other") + " --image-size 32 --batch 6 --epochs 5 --resume " + out,
                     &status);
    EXPECT_EQ(status, 1) << text;
    EXPECT_NE(text.find("its classes (blue, green) are not those of the run in " + out), std::string::npos) << text;
}

// The round trip through torchvision (tests/torch/torchvision_resnet.py): a torchvision state_dict
// (1000 classes, int64 num_batches_tracked) fine-tuned with augmentation and batch statistics, and
// the result loaded back into torchvision's ResNet with three classes, strictly.
TEST_F(ImageFinetuneTest, TorchvisionWeightsInTorchvisionWeightsOut) {
    MN_REQUIRE_TORCH();
    TempDir dir("image-finetune");
    const std::string script = source_dir() + "/tests/torch/torchvision_resnet.py";
    const std::string base = dir.path("base.safetensors"), out = dir.path("out");
    int status = 0;
    std::string text = run_command(reference_python() + " " + script + " write " + base, &status);
    ASSERT_EQ(status, 0) << text;
    write_image_folder(dir.path("data"), {.per_class = 4});
    text = meganeura("finetune -m " + base + " --data " + dir.path("data") + " --image-size 32 --batch 3 --augment --train-bn --out " +
                     out, &status);
    ASSERT_EQ(status, 0) << text;
    EXPECT_NE(text.find("9 training and 3 held-out images at 32 x 32 (training ones augmented)"), std::string::npos) << text;
    EXPECT_NE(text.find("new head fc.weight [3, 2048] for 3 classes (blue, green, red), in place of the weights' [1000, 2048]"),
              std::string::npos) << text;
    EXPECT_NE(text.find("trainable (full fine-tune, batch norms on batch statistics)"), std::string::npos) << text;
    text = run_command(reference_python() + " " + script + " check " + base + " " + out + " 3", &status);
    EXPECT_EQ(status, 0) << text;
}

// Bad input is one line and exit code 1, before anything is compiled where it can be.
TEST_F(ImageFinetuneTest, BadInputIsAClearError) {
    TempDir dir("image-finetune");
    const std::string weights = dir.path("resnet.safetensors"), data = dir.path("data");
    write_tiny_resnet(weights);
    write_image_folder(data, {.per_class = 4});
    auto fails = [&](const std::string& args, const std::string& message) {
        int status = 0;
        const std::string text = meganeura("finetune " + args, &status);
        EXPECT_EQ(status, 1) << args << "\n" << text;
        EXPECT_EQ(text.rfind("meganeura finetune: error: ", 0), 0u) << args << "\n" << text;
        EXPECT_NE(text.find(message), std::string::npos) << args << "\n" << text;
        EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
    };
    const std::string out = " --out " + dir.path("out");
    fails("-m " + weights + " --data " + data + " --seq 16" + out, "--seq is for text");
    fails("-m " + weights + " --data " + dir.path("text.txt") + " --augment" + out, "--augment is for an image folder as --data");
    fails("-m " + dir.path("") + " --data " + data + out, "give torchvision ResNet weights (a .safetensors file)");
    fails("-m " + weights + " --data " + data + " --image-size 16" + out, "option --image-size is 16, expected from 32");
    fails("-m " + weights + " --data " + data + " --train-bn --batch 1" + out, "--train-bn normalizes with batch statistics");
    fails("-m " + weights + " --data " + data + " --batch 64" + out, "9 training images, fewer than --batch 64");
    fs::create_directories(dir.path("empty"));
    fails("-m " + weights + " --data " + dir.path("empty") + out, "0 class folders");
    io::write_safetensors(dir.path("other.safetensors"), {{"w", io::TensorData::from_f32({2}, {1, 2})}});
    fails("-m " + dir.path("other.safetensors") + " --data " + data + out, "no tensor 'conv1.weight'");
    std::ofstream(data + "/red/9.jpg") << "not a JPEG";
    fails("-m " + weights + " --data " + data + out, data + "/red/9.jpg: not an image this build reads");
    fs::remove(data + "/red/9.jpg");

    // A header intact and the body cut short passes the first look; decoding it stops the run.
    std::ifstream in(data + "/red/0.png", std::ios::binary);
    const std::string png((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const char* c : {"blue", "green", "red"})
        for (int i = 0; i < 4; ++i) std::ofstream(data + "/" + c + "/" + std::to_string(i) + ".png", std::ios::binary) << png.substr(0, 200);
    int status = 0;
    const std::string text = meganeura("finetune -m " + weights + " --data " + data + " --batch 3" + out, &status);
    EXPECT_EQ(status, 1) << text;
    EXPECT_TRUE(std::regex_search(text, std::regex("\nmeganeura finetune: error: " + data + "/[a-z]+/[0-3].png: cannot decode: [^\n]+\n$")))
        << text;
}

}  // namespace
}  // namespace mn::test
