#include "models/registry.hpp"

#include <random>

#include "models/classifier.hpp"
#include "models/smollm2.hpp"
#include "models/smolvla.hpp"
#include "models/whisper.hpp"
#include "models/resnet.hpp"
#include "models/unet.hpp"

namespace mn::models {

const std::vector<ModelEntry>& model_table() {
    static const std::vector<ModelEntry> table = {
        {"mlp", "Fashion-MNIST MLP 784-256-128-10; inputs images [N,784], labels [N]", build_fashion_mlp,
         fashion_mlp_inputs},
        {"smollm2", "SmolLM2 (Llama, Qwen2) causal LM; inputs input_ids [B,T], labels [B,T] (i32, shifted inside, "
                    "-100 ignored) or shifted_labels [B,T]",
         build_smollm2, smollm2_inputs},
        {"smolvla", "SmolVLA action expert; inputs actions [B,50,32], timestep [B,1,1440], vlm_kv [B,16,320]",
         build_smolvla, smolvla_inputs},
        {"whisper", "Whisper-tiny encoder; input input_features [B,80,3000]", build_whisper, whisper_inputs},
        {"resnet50", "torchvision ResNet-50, eval-mode BN; inputs images [N,3,H,W], labels [N]", build_resnet50,
         resnet50_inputs},
        {"sd_unet", "simplified diffusion U-Net; inputs noisy_latent [N,4,H,W], target [N,4,H,W]", build_sd_unet,
         sd_unet_inputs},
    };
    return table;
}

const ModelEntry& find_model(std::string_view name) {
    std::string known;
    for (const auto& e : model_table()) {
        if (e.name == name) return e;
        known += (known.empty() ? "" : ", ") + e.name;
    }
    throw Error("unknown model '" + std::string(name) + "'; known: " + known);
}

Shape input_shape(const ModelRequest& r, const std::string& name, Shape fallback) {
    auto it = r.input_shapes.find(name);
    return it == r.input_shapes.end() ? fallback : it->second;
}

io::TensorData random_floats(Shape shape, double lo, double hi, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    std::vector<float> values(static_cast<size_t>(numel(shape)));
    for (float& x : values) x = static_cast<float>(dist(rng));
    return io::TensorData::from_f32(std::move(shape), values);
}

io::TensorData random_ids(Shape shape, int64_t count, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> dist(0, count - 1);
    std::vector<int32_t> values(static_cast<size_t>(numel(shape)));
    for (int32_t& x : values) x = static_cast<int32_t>(dist(rng));
    return io::TensorData::from_i32(std::move(shape), values);
}

}  // namespace mn::models
