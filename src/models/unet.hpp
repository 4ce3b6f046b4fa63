#pragma once
// The simplified diffusion U-Net of the benchmark (no time embedding, no attention):
//   conv_in (3x3, in -> base); per level L a ResBlock to base * mults[L], then a stride-2 3x3
//   downsample conv except at the last level; a middle ResBlock; the decoder mirrors it: for
//   J = 0.. a nearest x2 upsample (not at J = 0), channel concat [h, skip of level (last - J)], a
//   ResBlock to that level's channels; then GroupNorm -> SiLU -> conv_out (base -> in).
// ResBlock: GroupNorm -> SiLU -> conv3x3 -> GroupNorm -> SiLU -> conv3x3, plus a 1x1 "skip" conv
// when the channels change. Convs have no bias; GroupNorm(groups) with eps 1e-5.
// Names: conv_in.weight, down.L.res.{norm1,conv1,norm2,conv2,skip}.*, down.L.downsample.weight,
// mid.{norm1,conv1,norm2,conv2}.*, up.J.res.*, norm_out.*, conv_out.weight.
#include "models/registry.hpp"

namespace mn::models {

struct UNetConfig {
    int64_t in_channels = 4;
    int64_t base = 64;
    std::vector<int64_t> mults = {1, 2, 4};
    int64_t groups = 16;
    double eps = 1e-5;
    static UNetConfig tiny() { return {.base = 16}; }
};

// The denoiser's output [N, in_channels, H, W] for x [N, in_channels, H, W] (H, W divisible by
// 2^(levels - 1)).
Tensor unet_forward(Graph& g, Tensor x, const UNetConfig& config);

// Registry entry "sd_unet": noisy_latent and target [2, 4, 32, 32] by default, MSE loss, output
// "output". Size "full" is base 64, "tiny" base 16.
BuiltModel build_sd_unet(const ModelRequest& r);
io::TensorMap sd_unet_inputs(const ModelRequest& r, bool latency, uint64_t seed);

}  // namespace mn::models
