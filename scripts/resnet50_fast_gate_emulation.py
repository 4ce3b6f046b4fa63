#!/usr/bin/python3
"""Where ResNet-50's fast-precision gradient error comes from: an emulation in float64.

    /usr/bin/python3 scripts/resnet50_fast_gate_emulation.py [--size 224] [--batch 4] [--threads N]

The protocol's ResNet-50 fast training fails its per-parameter gate on conv1.weight (relative L2 ~8e-2
against float64, limit 5e-2; PyTorch's TF32 fails it the same way). This runs torchvision's ResNet-50 as
meganeura's bench builds it (kaiming fan-out weights, eval-mode batch norm at mean 0 / variance 1, images
uniform in [-2, 2), cross-entropy over 1000 classes) in float64, once exactly and once with the roundings of
meganeura's fast kernels, and prints every parameter gradient's relative L2 error, worst first:

  - forward products (convolutions, the classifier): both operands rounded to f16 (11 significant bits),
    accumulation exact, as the cooperative kernels stage them;
  - the input gradients of convolutions that are not 1x1 (Tuning::FastGradients::ConvInput): dY and W rounded
    to 11 significant bits (scaled into f16's range, so no underflow);
  - every other gradient product exact (f32 in meganeura, far below these errors).

Variants (--variants, ';'-separated) keep named products exact: a module's name covers the modules under it,
"all-forward" every forward product, "all-backward" every input gradient. To find which roundings the gate
error comes from. At 112^2 x 2 (2026-12-02), worst parameter, always conv1.weight:

  every rounding 1.08e-1; the backward's alone 8.0e-4; the forward's alone 1.08e-1;
  conv1 and layer1 exact 1.02e-1; layer3, layer4 and fc exact 9.4e-2; conv1 to layer2 exact 7.5e-2;
  forward operands of 13 significant bits 5.8e-2, 16 bits 2.0e-2, 22 bits 7.8e-4.

So the error is the forward's, spread over every layer (ReLU and max-pool decisions that f16's rounding
flips), not the f16 gradient products: the forward needs ~16 bits or more, which split products give
(sched::Tuning::split_forward).
"""
import argparse

import torch
import torch.nn.functional as F
import torchvision


def round11(x):
    """x with 11 significant bits (f16's), without f16's exponent limits (the scaled kernels' operands)."""
    m, e = torch.frexp(x)
    return torch.ldexp(torch.round(m * 2048.0) / 2048.0, e)


def round_f16(x):
    return x.to(torch.float16).to(torch.float64)


class FastConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, stride, padding, round_forward, round_input_grad):
        ctx.save_for_backward(x, w)
        ctx.conf = (stride, padding, round_input_grad)
        if round_forward:
            x, w = round_f16(x), round_f16(w)
        return F.conv2d(x, w, None, stride, padding)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        stride, padding, round_input_grad = ctx.conf
        dy_in, w_in = (round11(dy), round11(w)) if round_input_grad else (dy, w)
        dx = torch.nn.grad.conv2d_input(x.shape, w_in, dy_in, stride, padding)
        dw = torch.nn.grad.conv2d_weight(x, w.shape, dy, stride, padding)
        return dx, dw, None, None, None, None


def patch(model, exact):
    """Every convolution through FastConv; the names in `exact` keep their products exact."""
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Conv2d):
            pointwise = m.kernel_size == (1, 1)
            named = any(name == e or name.startswith(e + ".") for e in exact)

            def fwd(x, m=m, named=named, pointwise=pointwise):
                rf = not (named or "all-forward" in exact)
                rg = not pointwise and not (named or "all-backward" in exact)
                return FastConv.apply(x, m.weight, m.stride, m.padding, rf, rg)

            m.forward = fwd
        elif isinstance(m, torch.nn.Linear) and not ("fc" in exact or "all-forward" in exact):
            m.forward = lambda x, m=m: F.linear(round_f16(x), round_f16(m.weight), m.bias)


def gradients(state, images, labels, exact=None):
    model = torchvision.models.resnet50().double().eval()
    model.load_state_dict(state)
    if exact is not None:
        patch(model, exact)
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--variants", default="none;all-backward;all-forward;conv1,layer1;layer3,layer4,fc")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    state = torchvision.models.resnet50().double().state_dict()  # kaiming fan-out, BN 1/0, mean 0, var 1
    images = torch.rand(args.batch, 3, args.size, args.size, dtype=torch.float64) * 4 - 2
    labels = torch.randint(0, 1000, (args.batch,))
    exact = gradients(state, images, labels)
    for variant in args.variants.split(";"):
        names = set() if variant == "none" else set(variant.split(","))
        got = gradients(state, images, labels, names)
        errors = {n: float((got[n] - exact[n]).norm() / exact[n].norm()) for n in exact}
        total = float(torch.cat([(got[n] - exact[n]).flatten() for n in exact]).norm() /
                      torch.cat([exact[n].flatten() for n in exact]).norm())
        worst = sorted(errors.items(), key=lambda kv: -kv[1])[:5]
        print(f"exact: {variant:<14} total {total:.2e}  worst " + ", ".join(f"{n} {e:.2e}" for n, e in worst),
              flush=True)


if __name__ == "__main__":
    main()
