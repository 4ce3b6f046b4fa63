"""torchvision's side of tests/image_finetune_test.cpp's round trip.

    torchvision_resnet.py write BASE.safetensors
        a torchvision ResNet (bottlenecks, one per stage, so it is quick on lavapipe) with 1000 classes
        and running statistics as a trained network has them, its whole state_dict (num_batches_tracked,
        int64, included) as BASE.safetensors
    torchvision_resnet.py check BASE.safetensors OUT STEPS
        OUT/model.safetensors, meganeura's fine-tuned weights of a run with --train-bn, loads into the same
        torchvision ResNet with len(OUT/classes.txt) classes under load_state_dict(strict=True); every
        weight trained, every running statistic moved, num_batches_tracked is the base's plus STEPS, and
        the model runs
"""
import os
import sys

import numpy as np
import torch
from torchvision.models.resnet import Bottleneck, ResNet

from safetensors_io import read_safetensors, write_safetensors

BLOCKS = [1, 1, 1, 1]


def write(path):
    torch.manual_seed(3)
    model = ResNet(Bottleneck, BLOCKS, num_classes=1000)
    state = model.state_dict()
    for name, t in state.items():
        if name.endswith("running_mean"):
            t.uniform_(-0.2, 0.2)
        elif name.endswith("running_var"):
            t.uniform_(0.5, 2.0)
        elif name.endswith("num_batches_tracked"):
            t.fill_(1234)
    write_safetensors(path, {name: t.numpy() for name, t in state.items()})


def check(base_path, out, steps):
    base = read_safetensors(base_path)
    tuned = read_safetensors(os.path.join(out, "model.safetensors"))
    classes = open(os.path.join(out, "classes.txt")).read().split()
    model = ResNet(Bottleneck, BLOCKS, num_classes=len(classes))
    model.load_state_dict({name: torch.from_numpy(a) for name, a in tuned.items()}, strict=True)
    for name, a in tuned.items():
        if name.startswith("fc."):
            continue
        if name.endswith("num_batches_tracked"):
            assert a == base[name] + steps, f"{name} is {a}, the base's is {base[name]}, {steps} steps"
        else:
            assert not np.array_equal(a, base[name]), f"{name} did not change"
    with torch.no_grad():
        logits = model.eval()(torch.randn(2, 3, 32, 32))
    assert logits.shape == (2, len(classes)) and torch.isfinite(logits).all(), logits
    print(f"torchvision loads {len(tuned)} tensors strictly, {len(classes)} classes")


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        check(sys.argv[2], sys.argv[3], int(sys.argv[4]))
