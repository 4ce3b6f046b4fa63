"""Issue 11's recipe over several seeds: torchvision's ResNet-50 at batch 2, 64 x 64, random BN running
statistics, through `meganeura forward --backward` (strict) and through PyTorch in float32, each against
PyTorch in float64 on the same float32 values. Prints, per seed, the worst per-parameter error
(max |error| / max |gradient|) of each side, and MEGANEURA_CHECK's report of the ReLU decisions the
device took on the other side of zero from float64.

  python3 scripts/resnet50_float32_kinks.py BINARY WORKDIR SEED [SEED ...]

A seed where either side is off by ~1% has a ReLU input within float32's rounding of zero: float32
arithmetic decides it either way, and the gradients downstream follow (issue 11's closing note).
"""
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "torch"))
from safetensors_io import read_safetensors, write_safetensors  # noqa: E402


def model_and_inputs(seed):
    torch.manual_seed(seed)
    torch.set_default_dtype(torch.float64)  # the recipe draws the initial values in float64
    m = torchvision.models.resnet50(weights=None)
    with torch.no_grad():
        for k, b in m.named_buffers():
            if k.endswith("running_mean"):
                b.normal_(0, 0.1)
            if k.endswith("running_var"):
                b.uniform_(0.5, 1.5)
        for t in list(m.parameters()) + list(m.buffers()):
            if t.is_floating_point():
                t.copy_(t.float().double())  # values float32 holds exactly
    x = torch.randn(2, 3, 64, 64).float().double()
    y = torch.randint(0, 1000, (2,))
    return m.eval(), x, y


def gradients(m, x, y, dtype):
    m = m.to(dtype)
    m.zero_grad()
    F.cross_entropy(m(x.to(dtype)), y).backward()
    return {k: p.grad.double().numpy() for k, p in m.named_parameters()}


def worst(got, want):
    return max((np.abs(got[k] - want[k]).max() / np.abs(want[k]).max(), k) for k in want)


def main():
    binary, workdir, seeds = sys.argv[1], sys.argv[2], [int(s) for s in sys.argv[3:]]
    os.makedirs(workdir, exist_ok=True)
    for seed in seeds:
        m, x, y = model_and_inputs(seed)
        weights, inputs, out = (os.path.join(workdir, f"{n}-{seed}.safetensors") for n in ("weights", "inputs", "out"))
        write_safetensors(weights, {k: v.float().numpy() for k, v in m.state_dict().items()
                                    if not k.endswith("num_batches_tracked")})
        write_safetensors(inputs, {"images": x.float().numpy(), "labels": y.numpy().astype(np.int32)})
        run = subprocess.run([binary, "forward", "--model", "resnet50", "--weights", weights, "--inputs", inputs,
                              "--out", out, "--backward"], env=dict(os.environ, MEGANEURA_CHECK="1"),
                             capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"seed {seed}: meganeura failed:\n{run.stderr}")
        want = gradients(m, x, y, torch.float64)
        mine = {k[len("grad."):]: v.astype(np.float64) for k, v in read_safetensors(out).items() if k.startswith("grad.")}
        theirs = gradients(m, x, y, torch.float32)
        print("seed %d: meganeura %.2e (%s), PyTorch float32 %.2e (%s)" % ((seed,) + worst(mine, want) + worst(theirs, want)))
        for line in run.stderr.splitlines():
            if line.startswith("MEGANEURA_CHECK"):
                print("  " + line.split(". No kernel")[0])
        sys.stdout.flush()


if __name__ == "__main__":
    main()
