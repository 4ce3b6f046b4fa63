"""Plain-torch twin of meganeura's "mlp" registry model (src/models/classifier.cpp), with the interface
every model twin offers bench/torch_bench.py:

  NAMES                      the registry names this module builds
  build(name, size)          an nn.Module whose state_dict names are meganeura's parameter names
  run(name, module, inputs)  (output, loss) for a dict of input tensors named as meganeura names them
"""
import torch
import torch.nn.functional as F
from torch import nn

NAMES = ["mlp"]


class FashionMLP(nn.Module):
    """784-256-128-10 with ReLU, as fashion_classifier("mlp")."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, images):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(images)))))


def build(name, size):
    if name not in NAMES:
        raise ValueError(f"unknown model {name!r}; this module builds {NAMES}")
    return FashionMLP()  # one configuration: the sizes do not differ


def run(name, module, inputs):
    logits = module(inputs["images"])
    return logits, F.cross_entropy(logits, inputs["labels"].long())
