"""The PyTorch side of the ONNX import tests: exports a model with torch.onnx.export (Debian's
python3-torch) and writes, next to it, the input and PyTorch's float64 results on the same weights:
the output, and the gradient of the output's sum with respect to every parameter, by its
state_dict name (which the exported file's initializers keep, save where the exporter folded one
away, as BatchNorm into a convolution).

    onnx_models.py {mlp,resnet50,transformer} DIR [--opset N]

DIR/model.onnx, DIR/inputs.safetensors ("x"), DIR/expected.safetensors ("output", "grad.<name>").
"""
import argparse
import inspect
import os
import sys

import numpy as np
import torch
import torchvision

sys.path.insert(0, os.path.dirname(__file__))
from safetensors_io import write_safetensors  # noqa: E402


class TransformerBlock(torch.nn.Module):
    """A pre-norm encoder block: multi-head self-attention and a tanh-GELU MLP, each residual."""

    def __init__(self, dim=32, heads=4, hidden=64):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(dim)
        self.q, self.k, self.v, self.proj = (torch.nn.Linear(dim, dim) for _ in range(4))
        self.norm2 = torch.nn.LayerNorm(dim)
        self.fc1 = torch.nn.Linear(dim, hidden)
        self.fc2 = torch.nn.Linear(hidden, dim)

    def forward(self, x):
        b, t, c = x.shape
        h = self.norm1(x)
        q, k, v = (f(h).reshape(b, t, self.heads, c // self.heads).transpose(1, 2) for f in (self.q, self.k, self.v))
        attention = torch.softmax(q @ k.transpose(-2, -1) / (c // self.heads) ** 0.5, dim=-1)
        x = x + self.proj((attention @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm2(x)), approximate="tanh"))


def build(name):
    torch.manual_seed(0)
    if name == "mlp":
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
        return model, torch.rand(3, 1, 28, 28)
    if name == "resnet50":
        model = torchvision.models.resnet50()
        with torch.no_grad():  # running statistics other than 0 and 1, so that BatchNorm matters
            for m in model.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.1, 0.1)
                    m.running_var.uniform_(0.5, 1.5)
                    m.weight.uniform_(0.5, 1.5)
        return model, torch.rand(1, 3, 64, 64)
    if name == "transformer":
        model = TransformerBlock()
        with torch.no_grad():  # distinct norms: the exporter merges initializers of equal values
            for norm in (model.norm1, model.norm2):
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.uniform_(-0.1, 0.1)
        return model, torch.randn(2, 5, 32)
    raise SystemExit(f"unknown model {name}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["mlp", "resnet50", "transformer"])
    ap.add_argument("dir")
    ap.add_argument("--opset", type=int, default=13)
    args = ap.parse_args()
    model, x = build(args.model)
    model.eval()
    path = os.path.join(args.dir, "model.onnx")
    # PyTorch 2.9 and later export through torch.export by default (dynamo=True), whose graph optimizer folds a
    # transposed weight into an initializer of its own name: the TorchScript exporter keeps the state_dict names
    # these tests compare gradients by. (Its default of external data, m.onnx.data, OnnxImport.ExternalData covers.)
    legacy = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["output"], opset_version=args.opset,
                      do_constant_folding=False, **legacy)
    reference = model.double()
    x64 = x.double()
    out = reference(x64)
    out.sum().backward()
    tensors = {"output": out.detach().numpy().astype(np.float32)}
    for name, p in reference.named_parameters():
        tensors["grad." + name] = p.grad.numpy().astype(np.float32)
    write_safetensors(os.path.join(args.dir, "inputs.safetensors"), {"x": x.numpy()})
    write_safetensors(os.path.join(args.dir, "expected.safetensors"), tensors)


if __name__ == "__main__":
    main()
