"""The PyTorch side of meganeura's convolution models, for the tests and the benchmark harness.

NAMES lists the models; build(name, size) returns the torch.nn.Module whose state_dict names are
meganeura's parameter (and running-stat) names; run(name, module, inputs) computes the output and
the loss exactly as meganeura defines them (src/models/resnet.cpp, src/models/unet.cpp).

  resnet50  torchvision.models.resnet50(); inputs images [N,3,H,W] f32, labels [N] int; output
            logits, loss = cross-entropy (mean). Sizes "tiny" and "full" are the same network (the
            tests shrink the input). build() returns it in eval mode, meganeura's BN mode
            (running statistics, folded into the convolutions).
  sd_unet   the simplified diffusion U-Net below; inputs noisy_latent and target [N,4,H,W];
            output "output", loss = MSE (mean). "full": base 64, "tiny": base 16.
"""
import torch
import torch.nn.functional as F
from torch import nn

NAMES = ("resnet50", "sd_unet")


class ResBlock(nn.Module):
    def __init__(self, cin, cout, groups):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin, eps=1e-5)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(groups, cout, eps=1e-5)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.skip = nn.Conv2d(cin, cout, 1, bias=False) if cin != cout else None

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return h + (self.skip(x) if self.skip is not None else x)


class Down(nn.Module):
    def __init__(self, cin, cout, groups, downsample):
        super().__init__()
        self.res = ResBlock(cin, cout, groups)
        self.downsample = nn.Conv2d(cout, cout, 3, stride=2, padding=1, bias=False) if downsample else None


class Up(nn.Module):
    def __init__(self, cin, cout, groups):
        super().__init__()
        self.res = ResBlock(cin, cout, groups)


class UNet(nn.Module):
    """conv_in; per level a ResBlock and (but at the last level) a stride-2 conv; a middle ResBlock;
    the decoder: upsample x2 (not at the first step), cat([h, skip]), ResBlock; norm_out, SiLU, conv_out."""

    def __init__(self, in_channels=4, base=64, mults=(1, 2, 4), groups=16):
        super().__init__()
        self.conv_in = nn.Conv2d(in_channels, base, 3, padding=1, bias=False)
        chans = [base * m for m in mults]
        self.down = nn.ModuleList()
        ch = base
        for level, out in enumerate(chans):
            self.down.append(Down(ch, out, groups, level + 1 < len(chans)))
            ch = out
        self.mid = ResBlock(ch, ch, groups)
        self.up = nn.ModuleList()
        for out in reversed(chans):
            self.up.append(Up(ch + out, out, groups))
            ch = out
        self.norm_out = nn.GroupNorm(groups, ch, eps=1e-5)
        self.conv_out = nn.Conv2d(ch, in_channels, 3, padding=1, bias=False)

    def forward(self, x):
        h = self.conv_in(x)
        skips = []
        for d in self.down:
            h = d.res(h)
            skips.append(h)
            if d.downsample is not None:
                h = d.downsample(h)
        h = self.mid(h)
        for j, u in enumerate(self.up):
            if j > 0:
                h = F.interpolate(h, scale_factor=2, mode="nearest")
            h = u.res(torch.cat([h, skips[len(skips) - 1 - j]], dim=1))
        return self.conv_out(F.silu(self.norm_out(h)))


def build(name, size):
    if name == "resnet50":
        import torchvision
        return torchvision.models.resnet50().eval()
    if name == "sd_unet":
        return UNet(base=64 if size == "full" else 16)
    raise ValueError(f"unknown model {name!r}; known: {', '.join(NAMES)}")


def run(name, module, inputs):
    """(output, loss) of `module` on `inputs` (a dict of tensors named as meganeura's inputs)."""
    if name == "resnet50":
        logits = module(inputs["images"])
        return logits, F.cross_entropy(logits, inputs["labels"].long())
    if name == "sd_unet":
        out = module(inputs["noisy_latent"])
        return out, F.mse_loss(out, inputs["target"])
    raise ValueError(f"unknown model {name!r}; known: {', '.join(NAMES)}")
