#!/usr/bin/env python3
"""Per-token decode time of SmolLM2-135M at long positions: meganeura beside PyTorch with a static KV cache.

  decode_bench.py MEGANEURA_BINARY [--positions 4096,8192] [--size full|tiny] [--repeat 3] [--new 9,265]
                  [--precision strict|fast] [--steps 100] [--warmup 10] [--torch-attention sdpa|manual]
                  [--device auto|cuda|cpu] [--json FILE]

On the H200: bench/decode_bench.sh build/meganeura   (sources scripts/gpu-env.sh, then runs this).

Random weights and random prompt ids; f32 everywhere (strict: TF32 off in PyTorch). --precision fast runs
`meganeura generate --precision fast` (f16 copies of the weights in the decode step's GEMVs where the device has
cooperative matrices) beside the same f32 PyTorch.

meganeura: `meganeura generate` (the decode program, one submit per token, the logits read back and
the next token picked on the host, as a user runs it) with a cache of exactly L positions, twice:
--max-new 9 and --max-new 265 (--new), the prompt L - 9 and L - 265 tokens long. Its closing line times the
generation alone (after the compiles, an untimed warm-up run of both programs and the prefill); the
difference of the two times over the 256 extra decoding runs is the time per token of decode steps
at positions L - 265 .. L - 10, with what every generation pays once (a GPU clocking up, the last
prints) cancelled: the issue's 10.5 ms at 3K positions was measured so. Median of --repeat pairs of
processes, and their spread (the JSON also has the longer run's own time per decoding run).

PyTorch: the twin of tests/torch/transformer_models.py (the module the model tests check meganeura
against) decoding through a static cache of L positions, written in place at a position tensor
(gpt-fast's pattern, what transformers' StaticCache does), attention over the whole cache under a
mask of the positions seen, grouped-query without repeating K/V (--torch-attention: SDPA with
enable_gqa where this torch has it, else softmax(q k^T) v by hand). A greedy loop as generate's:
each step's logits -> argmax -> the next step's token, fed back on the device, read by the host.
Modes: eager, and on CUDA torch.compile(mode="reduce-overhead") of the step (CUDA graphs; each call
begins with torch.compiler.cudagraph_mark_step_begin()). --warmup steps (the compile happens in
them), then --steps timed ones, each ended by the host reading the token; they run at positions
L - steps .. L - 1, over a cache whose earlier positions hold random keys and values. Median and
mean per step.

Before timing, a self-check: the static-cache step, decoding a sequence token by token in float64
at the tiny size, reproduces the twin's full causal forward at every position (to 1e-10).
"""
import argparse
import inspect
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "torch"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import transformer_models  # noqa: E402

GENERATION = re.compile(r"generation: (\d+) tokens, (\d+) decoding runs in ([0-9.]+) ms")


# ---- meganeura ----

def generate_ms(binary, size, prompt_len, new, vocab, seed, precision):
    """The generation time and decoding runs `meganeura generate` reports for a random prompt of prompt_len ids."""
    rng = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (prompt_len,), generator=rng).tolist()
    cmd = [binary, "generate", "--model", "smollm2", "--size", size, "--tokens", ",".join(map(str, ids)),
           "--max-new", str(new), "--ignore-eos", "--precision", precision]
    done = subprocess.run(cmd, capture_output=True, text=True)
    match = GENERATION.search(done.stderr)
    if done.returncode != 0 or not match:
        raise RuntimeError(f"meganeura generate failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    if int(match.group(1)) != new:
        raise RuntimeError(f"meganeura generate made {match.group(1)} tokens, not {new}")
    return float(match.group(3)), int(match.group(2))


def meganeura_per_token(binary, size, length, repeat, vocab, new, precision):
    small_new, big_new = new
    pairs = []
    for r in range(repeat):
        small, small_runs = generate_ms(binary, size, length - small_new, small_new, vocab, 2 * r, precision)
        big, big_runs = generate_ms(binary, size, length - big_new, big_new, vocab, 2 * r + 1, precision)
        pairs.append({"small_ms": small, "big_ms": big, "per_token_ms": (big - small) / (big_runs - small_runs),
                      "big_ms_per_run": big / big_runs})
    estimates = [p["per_token_ms"] for p in pairs]
    return {"per_token_ms": statistics.median(estimates), "spread_ms": [min(estimates), max(estimates)], "runs": pairs,
            "positions": [length - big_new, length - small_new - 1]}


# ---- PyTorch: the twin through a static cache ----

def has_gqa_sdpa():
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is None:
        return False
    try:
        return "enable_gqa" in inspect.signature(sdpa).parameters
    except (TypeError, ValueError):  # a builtin without a Python signature
        return torch.__version__ >= "2.5"


class StaticCacheDecoder(torch.nn.Module):
    """One decode step of the twin `model` (transformer_models.SmolLM2) over a static cache."""

    def __init__(self, model, length, attention):
        super().__init__()
        c = model.c
        self.model, self.c, self.length, self.attention = model, c, length, attention
        p = next(model.parameters())
        shape = (1, c["kv_heads"], length, c["head_dim"])
        for i in range(c["layers"]):  # a buffer per layer and side, as gpt-fast's KVCache modules
            self.register_buffer(f"k_cache{i}", torch.zeros(shape, dtype=p.dtype, device=p.device))
            self.register_buffer(f"v_cache{i}", torch.zeros(shape, dtype=p.dtype, device=p.device))
        steps = torch.arange(0, c["head_dim"], 2, dtype=torch.int64, device=p.device).float()
        self.register_buffer("inv_freq", 1.0 / (c["rope_theta"] ** (steps / c["head_dim"])))  # f32, as the twin's
        self.register_buffer("keys", torch.arange(length, device=p.device))

    def rope(self, x, position):
        angles = position.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((angles, angles), dim=-1)
        return x * emb.cos().to(x.dtype) + transformer_models.rotate_half(x) * emb.sin().to(x.dtype)

    def attend(self, q, k, v, seen):
        """q [1, Hq, 1, D], k and v [1, Hkv, L, D], seen [L] bool."""
        c = self.c
        if self.attention == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=seen[None, None, None, :], enable_gqa=True)
        groups = c["heads"] // c["kv_heads"]
        qg = q.reshape(1, c["kv_heads"], groups, c["head_dim"])  # the query heads of a kv head as rows
        scores = (qg @ k.transpose(-1, -2)) / math.sqrt(c["head_dim"])
        scores = scores.masked_fill(~seen, float("-inf"))
        return (scores.softmax(-1) @ v).reshape(1, c["heads"], 1, c["head_dim"])

    def forward(self, token, position):
        """token [1, 1] int64, position [1] int64: the logits [1, vocab] after the token at position."""
        c, m = self.c, self.model.model
        x = m.embed_tokens(token)
        seen = self.keys <= position
        for i, layer in enumerate(m.layers):
            a = layer.self_attn
            h = layer.input_layernorm(x)
            q = self.rope(transformer_models.split_heads(a.q_proj(h), c["heads"], c["head_dim"]), position)
            k = self.rope(transformer_models.split_heads(a.k_proj(h), c["kv_heads"], c["head_dim"]), position)
            v = transformer_models.split_heads(a.v_proj(h), c["kv_heads"], c["head_dim"])
            k_cache, v_cache = getattr(self, f"k_cache{i}"), getattr(self, f"v_cache{i}")
            k_cache.index_copy_(2, position, k)
            v_cache.index_copy_(2, position, v)
            attended = self.attend(q, k_cache, v_cache, seen)
            x = x + a.o_proj(transformer_models.merge_heads(attended))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return (m.norm(x) @ m.embed_tokens.weight.t())[:, -1]


def self_check(attention):
    """The static-cache step against the twin's full forward, float64, tiny, at every position."""
    torch.manual_seed(0)
    model = transformer_models.build("smollm2", "tiny").double()
    tokens = torch.randint(0, model.c["vocab"], (1, 12))
    with torch.no_grad():
        want = model(tokens)[0]
        step = StaticCacheDecoder(model, 16, attention)
        worst = 0.0
        for t in range(tokens.shape[1]):
            got = step(tokens[:, t:t + 1], torch.tensor([t]))[0]
            worst = max(worst, ((got - want[t]).norm() / want[t].norm()).item())
    if worst > 1e-10:
        raise RuntimeError(f"the static-cache decode step is off the full forward by {worst:.3g}")
    return worst


def torch_per_step(size, length, mode, attention, device, warmup, steps):
    torch.manual_seed(1)
    model = transformer_models.build("smollm2", size).to(device).eval()
    decoder = StaticCacheDecoder(model, length, attention)
    with torch.no_grad():  # earlier positions: random keys and values, as a filled cache
        for name, buffer in decoder.named_buffers():
            if "_cache" in name:
                buffer.normal_()
    fn = decoder
    if mode == "cudagraphs":
        fn = torch.compile(decoder, mode="reduce-overhead", fullgraph=True)
    token = torch.zeros(1, 1, dtype=torch.int64, device=device)
    position = torch.zeros(1, dtype=torch.int64, device=device)
    first = length - warmup - steps
    times = []
    with torch.no_grad():
        for i in range(warmup + steps):
            start = time.perf_counter()
            if mode == "cudagraphs":
                torch.compiler.cudagraph_mark_step_begin()
            position.fill_(first + i)
            logits = fn(token, position)
            token.copy_(logits.argmax(-1, keepdim=True))
            token.item()  # the host reads the token, as generate's loop does: the step is over
            if i >= warmup:
                times.append((time.perf_counter() - start) * 1e3)
    return {"median_ms": statistics.median(times), "mean_ms": statistics.fmean(times), "min_ms": min(times),
            "positions": [first + warmup, length - 1]}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--positions", default="4096,8192", help="cache lengths L (comma-separated)")
    ap.add_argument("--size", default="full", choices=["full", "tiny"])
    ap.add_argument("--repeat", type=int, default=3, help="meganeura: pairs of generate runs")
    ap.add_argument("--new", default="9,265", help="meganeura: --max-new of the pair's two runs")
    ap.add_argument("--precision", default="strict", choices=["strict", "fast"], help="meganeura generate's")
    ap.add_argument("--steps", type=int, default=100, help="PyTorch: timed decode steps")
    ap.add_argument("--warmup", type=int, default=10, help="PyTorch: untimed steps first (the compile)")
    ap.add_argument("--torch-attention", default="sdpa" if has_gqa_sdpa() else "manual", choices=["sdpa", "manual"])
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if args.torch_attention == "sdpa" and not has_gqa_sdpa():
        ap.error(f"torch {torch.__version__} has no scaled_dot_product_attention(enable_gqa=True): use --torch-attention manual")
    torch.backends.cuda.matmul.allow_tf32 = False  # strict: f32 products
    torch.backends.cudnn.allow_tf32 = False
    vocab = transformer_models.CONFIGS["smollm2"][args.size]["vocab"]
    lengths = [int(x) for x in args.positions.split(",")]
    new = [int(x) for x in args.new.split(",")]
    if len(new) != 2 or not 1 <= new[0] < new[1]:
        ap.error("--new must be two counts, the smaller first, e.g. 9,265")
    if min(lengths) < new[1] + 2 or min(lengths) < args.warmup + args.steps:
        ap.error(f"positions must be at least {max(new[1] + 2, args.warmup + args.steps)}")

    # What a record needs to be read later (bench/README.md): when, which binary, on what, by which command.
    version = subprocess.run([args.binary, "--version"], capture_output=True, text=True).stdout
    commit = re.search(r"commit (\S+)", version)
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "meganeura_commit": commit.group(1) if commit else None,
              "gpu": torch.cuda.get_device_name() if device == "cuda" else None, "command": " ".join(sys.argv),
              "precision": args.precision,
              "size": args.size, "device": device, "torch": torch.__version__, "torch_attention": args.torch_attention,
              "self_check": self_check(args.torch_attention), "notes": [], "lengths": {}}
    modes = ["eager"]
    if device == "cuda" and hasattr(torch, "compile"):
        modes.append("cudagraphs")
    else:
        report["notes"].append(f"PyTorch torch.compile(mode=\"reduce-overhead\") with CUDA graphs: skipped, it needs "
                               f"CUDA and torch.compile (here {device}, torch {torch.__version__})")
    for length in lengths:
        row = {"meganeura": meganeura_per_token(os.path.abspath(args.binary), args.size, length, args.repeat, vocab, new,
                                                args.precision)}
        for mode in modes:
            row["torch_" + mode] = torch_per_step(args.size, length, mode, args.torch_attention, device,
                                                  args.warmup, args.steps)
        report["lengths"][str(length)] = row

    print(f"SmolLM2-135M ({args.size}) decode, meganeura {args.precision}, PyTorch f32, ms per token; PyTorch {torch.__version__} on {device}, "
          f"attention {args.torch_attention}")
    print("| positions | meganeura (median, spread of pairs) | " +
          " | ".join(f"PyTorch {m} (median / mean)" for m in modes) + " |")
    print("| ---: | ---: | " + " | ".join("---:" for _ in modes) + " |")
    for length, row in report["lengths"].items():
        mn = row["meganeura"]
        cells = [f"{row['torch_' + m]['median_ms']:.3f} / {row['torch_' + m]['mean_ms']:.3f}" for m in modes]
        print(f"| {length} | {mn['per_token_ms']:.3f} ({mn['spread_ms'][0]:.3f} .. {mn['spread_ms'][1]:.3f}) | " +
              " | ".join(cells) + " |")
    for note in report["notes"]:
        print(f"- {note}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1:])
