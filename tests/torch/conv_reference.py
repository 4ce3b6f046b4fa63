"""Expected values for meganeura's convolution models (tests/conv_models_test.cpp).

  conv_reference.py NAME SIZE DIR --batch B --hw H [--seed S] [--dtype float64|float32]

writes DIR/weights.safetensors (every state_dict tensor, f32; torchvision's num_batches_tracked is
left out), DIR/inputs.safetensors, and DIR/expected.safetensors: the output, "loss" and
"grad.<name>" for every parameter, computed in --dtype from the same f32 values.

ResNet-50 runs in eval mode (meganeura folds BN into the convolutions): its BN running stats are
first set to the statistics of a calibration batch and its BN weights and biases randomized, so
that the folding is exercised and the activations stay normalized through 50 layers.
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conv_models  # noqa: E402
from safetensors_io import write_safetensors  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name", choices=conv_models.NAMES)
    ap.add_argument("size", choices=("tiny", "full"))
    ap.add_argument("dir")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--hw", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    module = conv_models.build(a.name, a.size)

    if a.name == "resnet50":
        inputs = {"images": torch.randn(a.batch, 3, a.hw, a.hw),
                  "labels": torch.randint(0, 1000, (a.batch,), dtype=torch.int32)}
        bns = [m for m in module.modules() if isinstance(m, torch.nn.BatchNorm2d)]
        with torch.no_grad():
            for m in bns:
                m.momentum = 1.0  # running stats := one calibration batch's statistics
            module.train()
            module(torch.randn(4, 3, a.hw, a.hw))
            for name, m in module.named_modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    # small gammas on each residual branch's last BN, as in a trained ResNet
                    m.weight.uniform_(0.1, 0.3) if name.endswith("bn3") else m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)
        module.eval()
    else:
        shape = (a.batch, 4, a.hw, a.hw)
        inputs = {"noisy_latent": torch.randn(shape), "target": torch.randn(shape)}
        with torch.no_grad():  # GroupNorm's affine parameters start at 1 and 0: vary them
            for m in module.modules():
                if isinstance(m, torch.nn.GroupNorm):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)

    state = {k: v.detach().float() for k, v in module.state_dict().items() if not k.endswith("num_batches_tracked")}
    write_safetensors(os.path.join(a.dir, "weights.safetensors"), {k: v.numpy() for k, v in state.items()})
    write_safetensors(os.path.join(a.dir, "inputs.safetensors"),
                      {k: v.numpy().astype(np.int32 if v.dtype == torch.int32 else np.float32) for k, v in inputs.items()})

    dtype = getattr(torch, a.dtype)
    module = module.to(dtype)
    inputs = {k: v.to(dtype) if v.is_floating_point() else v for k, v in inputs.items()}
    output, loss = conv_models.run(a.name, module, inputs)
    loss.backward()
    out_name = "logits" if a.name == "resnet50" else "output"
    expected = {out_name: output.detach().numpy(), "loss": loss.detach().reshape(()).numpy()}
    for k, p in module.named_parameters():
        expected["grad." + k] = p.grad.numpy()
    write_safetensors(os.path.join(a.dir, "expected.safetensors"), expected)


if __name__ == "__main__":
    main()
