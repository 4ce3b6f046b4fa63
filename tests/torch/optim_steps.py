#!/usr/bin/env python3
"""Reference optimizer steps with torch.optim, for tests/train_test.cpp.

Reads a safetensors file holding the initial parameter "p" and the per-step gradients
"G0", "G1", ... (float32, all of p's shape), takes one step per G with loss = sum(p * G) (so the
gradient is G exactly), and writes the final "p" (float32) to the output safetensors file.


  optim_steps.py IN OUT --optimizer {sgd,adam,adamw} --lr LR [--momentum M] [--weight-decay WD]
                 [--beta1 B1] [--beta2 B2] [--eps EPS] [--clip-grad-norm C]
                 [--warmup-steps W] [--decay {constant,cosine}] [--total-steps T] [--min-lr-ratio R]
"""
import argparse
import math
import sys

import numpy as np
import torch

from safetensors_io import read_safetensors, write_safetensors

def lr_factor(step, warmup_steps, decay, total_steps, min_lr_ratio):
    """LrSchedule::factor in src/compiler/training.cpp."""
    if warmup_steps > 0 and step <= warmup_steps:
        return step / warmup_steps
    if decay == "constant" or total_steps <= warmup_steps:
        return 1.0
    # transformers' cosine: step s takes the value after s - 1 steps (s - 1 - warmup of the decay's)
    progress = min(1.0, (step - 1 - warmup_steps) / (total_steps - warmup_steps))
    return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--optimizer", choices=["sgd", "adam", "adamw"], required=True)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--clip-grad-norm", type=float, default=0.0)
    ap.add_argument("--warmup-steps", type=int, default=0)
    ap.add_argument("--decay", choices=["constant", "cosine"], default="constant")
    ap.add_argument("--total-steps", type=int, default=0)
    ap.add_argument("--min-lr-ratio", type=float, default=0.0)
    args = ap.parse_args(argv)

    torch.set_num_threads(1)
    tensors = read_safetensors(args.input)
    p = torch.tensor(tensors["p"], dtype=torch.float32, requires_grad=True)
    grads = []
    while f"G{len(grads)}" in tensors:
        grads.append(torch.tensor(tensors[f"G{len(grads)}"], dtype=torch.float32))

    if args.optimizer == "sgd":
        opt = torch.optim.SGD([p], lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    elif args.optimizer == "adam":
        opt = torch.optim.Adam([p], lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps,
                               weight_decay=args.weight_decay)
    else:
        opt = torch.optim.AdamW([p], lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps,
                                weight_decay=args.weight_decay)

    for t, g in enumerate(grads, start=1):
        for group in opt.param_groups:
            group["lr"] = args.lr * lr_factor(t, args.warmup_steps, args.decay, args.total_steps,
                                              args.min_lr_ratio)
        opt.zero_grad()
        loss = (p * g).sum()
        loss.backward()
        if args.clip_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_([p], args.clip_grad_norm)
        opt.step()

    write_safetensors(args.output, {"p": p.detach().numpy().astype(np.float32)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
