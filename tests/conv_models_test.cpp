// ResNet-50 and the diffusion U-Net against PyTorch (tests/torch/conv_reference.py): the script
// writes random weights, inputs and float64 expectations; `meganeura forward --backward` runs the
// model on them; the gates (model_gates.hpp) are forward relative L2 <= 1e-4, loss within 1e-5 and
// gradient errors <= 1e-3, in total and for every parameter (the worst one is named).
#include <cmath>
#include <cstdlib>

#include "gpu_check.hpp"
#include "host_tools.hpp"
#include "model_gates.hpp"
#include "temp_dir.hpp"
#include "io/safetensors.hpp"
#include "meganeura/autodiff.hpp"
#include "models/resnet.hpp"

namespace mn::test {
namespace {

void expect_matches_torch(const std::string& model, const std::string& output, int batch, int hw) {
    MN_REQUIRE_TORCH();
    TempDir dir("conv-" + model);
    const std::string script = source_dir() + "/tests/torch/conv_reference.py";
    const std::string make = reference_python() + " '" + script + "' " + model + " tiny '" + dir.path("") + "' --batch " +
                             std::to_string(batch) + " --hw " + std::to_string(hw);
    ASSERT_EQ(std::system(make.c_str()), 0) << make;
    const std::string run = std::string("'") + cli_binary() + "' forward --model " + model +
                            " --size tiny --backward --weights '" + dir.path("weights.safetensors") + "' --inputs '" +
                            dir.path("inputs.safetensors") + "' --out '" + dir.path("got.safetensors") + "'";
    ASSERT_EQ(std::system(run.c_str()), 0) << run;
    const io::TensorMap want = io::read_safetensors(dir.path("expected.safetensors"));
    const io::TensorMap got = io::read_safetensors(dir.path("got.safetensors"));

    expect_passes_gates(got, want, model, output);
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
