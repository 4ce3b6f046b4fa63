// ResNet-50 and the diffusion U-Net against PyTorch (tests/torch/conv_reference.py): the script
// writes random weights, inputs and float64 expectations; `meganeura forward --backward` runs the
// model on them; the gates are forward relative L2 <= 1e-4 and gradient-norm errors
// <= 1e-3, in total and for every parameter (the worst one is named).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "gpu_check.hpp"
#include "io/safetensors.hpp"
#include "meganeura/autodiff.hpp"
#include "models/resnet.hpp"

namespace mn::test {
namespace {

namespace fs = std::filesystem;

bool torch_available() {
    static const bool ok =
        std::system("/usr/bin/python3 -c 'import torch, torchvision, numpy' > /dev/null 2>&1") == 0;
    return ok;
}

class TempDir {
public:
    TempDir() : path_(fs::temp_directory_path() / ("meganeura_conv_" + std::to_string(std::random_device{}()))) {
        fs::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    std::string file(const std::string& name) const { return (path_ / name).string(); }

private:
    fs::path path_;
};

// The expectations are F64, meganeura's outputs F32.
std::vector<double> values(const io::TensorData& t) {
    if (t.dtype == "F64") {
        std::vector<double> d(t.bytes.size() / sizeof(double));
        std::memcpy(d.data(), t.bytes.data(), t.bytes.size());
        return d;
    }
    const std::vector<float> f = t.to_f32("tensor");
    return {f.begin(), f.end()};
}

double norm(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x * x;
    return std::sqrt(s);
}

double relative_l2(const std::vector<double>& got, const std::vector<double>& want) {
    double d = 0;
    for (size_t i = 0; i < want.size(); ++i) d += (got[i] - want[i]) * (got[i] - want[i]);
    return std::sqrt(d) / norm(want);
}

void expect_matches_torch(const std::string& model, const std::string& output, int batch, int hw) {
    if (!torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch, torchvision and numpy";
    TempDir dir;
    const std::string script = std::string(MEGANEURA_SOURCE_DIR) + "/tests/torch/conv_reference.py";
    const std::string make = "/usr/bin/python3 '" + script + "' " + model + " tiny '" + dir.file("") + "' --batch " +
                             std::to_string(batch) + " --hw " + std::to_string(hw);
    ASSERT_EQ(std::system(make.c_str()), 0) << make;
    const std::string run = std::string("'") + MEGANEURA_BINARY + "' forward --model " + model +
                            " --size tiny --backward --weights '" + dir.file("weights.safetensors") + "' --inputs '" +
                            dir.file("inputs.safetensors") + "' --out '" + dir.file("got.safetensors") + "'";
    ASSERT_EQ(std::system(run.c_str()), 0) << run;
    const io::TensorMap want = io::read_safetensors(dir.file("expected.safetensors"));
    const io::TensorMap got = io::read_safetensors(dir.file("got.safetensors"));

    ASSERT_TRUE(got.count(output)) << output;
    ASSERT_EQ(got.at(output).shape, want.at(output).shape);
    EXPECT_LE(relative_l2(values(got.at(output)), values(want.at(output))), 1e-4) << output;
    EXPECT_NEAR(values(got.at("loss"))[0], values(want.at("loss"))[0], 1e-4 * std::fabs(values(want.at("loss"))[0]));

    double got_sq = 0, want_sq = 0, worst = -1;
    std::string worst_name;
    size_t grads = 0;
    for (const auto& [name, w] : want) {
        if (name.rfind("grad.", 0) != 0) continue;
        ++grads;
        ASSERT_TRUE(got.count(name)) << "meganeura wrote no " << name;
        ASSERT_EQ(got.at(name).shape, w.shape) << name;
        const double g = norm(values(got.at(name))), e = norm(values(w));
        got_sq += g * g;
        want_sq += e * e;
        const double err = std::fabs(g - e) / e;
        if (!(err <= worst)) worst = err, worst_name = name;
    }
    EXPECT_GT(grads, 10u);
    const double total = std::fabs(std::sqrt(got_sq) - std::sqrt(want_sq)) / std::sqrt(want_sq);
    EXPECT_LE(total, 1e-3) << "total gradient norm";
    EXPECT_LE(worst, 1e-3) << "worst parameter: " << worst_name;
    std::printf("%s: worst gradient-norm error %.3g (%s), total %.3g\n", model.c_str(), worst, worst_name.c_str(), total);
}

// torchvision's resnet50 in eval mode at batch 2, 64 x 64: BN folded into the convolutions.
TEST(ConvModels, ResNet50MatchesTorchvision) { expect_matches_torch("resnet50", "logits", 2, 64); }

// base 16 (GroupNorm(16) still divides every width), 16 x 16 latents.
TEST(ConvModels, UNetMatchesTorch) { expect_matches_torch("sd_unet", "output", 2, 16); }

// Training-mode batch norm (batch statistics) through a two-stage ResNet, one bottleneck each:
// logits, loss and every gradient on the GPU against the float64 reference. (Two stages keep
// 32 values per channel in the last BN: with a handful, the BN gradient cancels almost to zero
// and float32 rounding dominates what is left.)
using ConvModelsGpu = GpuTest;
TEST_F(ConvModelsGpu, ResNetWithTrainingModeBatchNormMatchesReference) {
    Graph g;
    const models::ResNetConfig config{.blocks = {1, 1}, .num_classes = 10, .train_bn = true};
    Tensor logits = models::resnet_logits(g, g.input("images", {2, 3, 32, 32}), config);
    Tensor loss = g.cross_entropy(logits, g.input("labels", {2}, DType::I32));
    g.output("logits", logits);
    g.output("loss", loss);
    std::vector<Tensor> params;
    for (int32_t id = 0; id < static_cast<int32_t>(g.nodes().size()); ++id) {
        if (g.node(id).op == Op::Parameter) params.push_back(g.handle(id));
    }
    const std::vector<Tensor> grads = grad(loss, params);
    for (size_t i = 0; i < params.size(); ++i) g.output("grad." + g.node(params[i]).name, grads[i]);
    ref::Feeds feeds = random_feeds(g, 3, {-1, 1});
    for (auto& x : feeds["labels"].data) x = std::fabs(x) * 9;  // classes 0..9
    for (const Node& n : g.nodes()) {
        if (n.op == Op::State) feeds[n.name] = {n.shape, std::vector<double>(static_cast<size_t>(numel(n.shape)), 0.5)};
    }
    expect_matches_reference(g, feeds, 1e-4);
}

}  // namespace
}  // namespace mn::test
