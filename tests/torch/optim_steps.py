#!/usr/bin/env python3
"""Reference optimizer steps with torch.optim, for tests/train_test.cpp.

Reads a safetensors file holding the initial parameter "p" and the per-step gradients
"G0", "G1", ... (float32, all of p's shape), takes one step per G with loss = sum(p * G) (so the
gradient is G exactly), and writes the final "p" (float32) to the output safetensors file.

The safetensors format is read and written here by hand (struct + json + numpy), because the
safetensors module is not installed everywhere torch is.

  optim_steps.py IN OUT --optimizer {sgd,adam,adamw} --lr LR [--momentum M] [--weight-decay WD]
                 [--beta1 B1] [--beta2 B2] [--eps EPS] [--clip-grad-norm C]
                 [--warmup-steps W] [--decay {constant,cosine}] [--total-steps T] [--min-lr-ratio R]
"""
import argparse
import json
import math
import struct
import sys

import numpy as np
import torch

_DTYPES = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "I32": np.dtype("<i4"), "I64": np.dtype("<i8")}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        shape = tuple(int(d) for d in info["shape"])
        out[name] = np.frombuffer(body[begin:end], dtype=dtype).reshape(shape).copy()
    return out


def write_safetensors(path, tensors):
    names = {v.str: k for k, v in _DTYPES.items()}  # "<f4" -> "F32"
    header, chunks, offset = {}, [], 0
    for name, array in tensors.items():
        array = np.ascontiguousarray(array)
        little = array.dtype.newbyteorder("<")
        raw = array.astype(little, copy=False).tobytes()
        header[name] = {"dtype": names[little.str], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    blob = json.dumps(header).encode("utf-8")
    blob += b" " * (-len(blob) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for raw in chunks:
            f.write(raw)


def lr_factor(step, warmup_steps, decay, total_steps, min_lr_ratio):
    """LrSchedule::factor in src/train/optimizer.cpp."""
    if warmup_steps > 0 and step <= warmup_steps:
        return step / warmup_steps
    if decay == "constant" or total_steps <= warmup_steps:
        return 1.0
    progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
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
