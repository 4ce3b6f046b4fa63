#!/usr/bin/env python3
"""The PyTorch side and the report of bench/finetune_bench.sh (issue 16, item 8): SmolLM2-135M fine-tuning
and generation, meganeura beside PyTorch on the same folder, data and settings.

  finetune_bench.py prepare WORK [--size full|tiny] [--text-kb 300] [--prompt-chars N]
  finetune_bench.py torch WORK --job lora|full|generate|generate-static --mode eager|compile
                    [--steps 50 --warmup 10 --batch 8 --seq 256 --lora-rank 8 --lora-alpha 16
                    --lora-targets q_proj,k_proj,v_proj,o_proj --max-new 128 --repeat 3]
                    [--deadline UNIX_SECONDS] [--processes N --rendezvous DIR]
  finetune_bench.py report WORK --out DIR [--meta KEY=VALUE ...]

prepare writes WORK/model, a Hugging Face model folder: config.json with SmolLM2-135M's published
values (--size tiny: the tests' tiny SmolLM2, to try the script on lavapipe), random float32 weights
in model.safetensors ({"format": "pt"}, as transformers wants), generation_config.json, and the
byte-level BPE tokenizer.json of the tests (tests/torch/tiny_model_folder.py: 256 bytes, merges
learned from the text, three special tokens), so nothing needs the network. Its vocabulary is padded
to the model's 49,152 rows (random embeddings), so that every id generated decodes; the text encodes
into the first 317; bos and eos are its <|endoftext|>. WORK/data.txt is --text-kb KB of the repository's own text (README and sources,
sorted: the same on every machine with the same commit); WORK/prompt.txt its first --prompt-chars
characters.

torch runs one job in PyTorch on the token ids meganeura's tokenizer gave (WORK/ids.txt and
WORK/prompt_ids.txt, written by `meganeura tokenize`), packed into blocks as `meganeura finetune`
packs them (eos after the text, a tenth of the blocks held out, the last ones), and writes
WORK/torch-<job>-<mode>.json:
- lora / full: AdamW (lr 2e-4, weight decay 0, betas and eps as meganeura's; fused on CUDA) on a
  cosine over --steps, the loss read back every step as meganeura does; --warmup steps first (the
  first one timed alone: with --mode compile it compiles), then --steps - --warmup steps timed;
  LoRA through PEFT when it imports, else a hand-written LoRA (x W^T + alpha / r * (x A^T) B^T, A as
  PEFT initializes it, B zero) on the same modules. Eager also reports the base model's held-out
  loss, to compare with meganeura's at step 0 (the same model on the same blocks).
- generate / generate-static: Hugging Face generate, greedy, exactly --max-new new tokens, base and
  LoRA adapter (unmerged, as `generate --adapter` runs it; B is zero here, the cost is the same);
  prefill = generate(max_new_tokens=1), decoding = the extra time of the other --max-new - 1 tokens;
  after one warm-up call, the median of --repeat. generate: the default dynamic cache, eager;
  generate-static: cache_implementation="static", whose decoding step transformers compiles itself
  (the base model only: compiling takes minutes).
Without transformers (Debian's torch 1.13 on a development machine) the model is the tests' twin
(tests/torch/transformer_models.py, Hugging Face's Llama computation) and generation is not run; the
report says so. strict: TF32 off, as meganeura's finetune computes in float32.

report reads meganeura's logs (WORK/mn-*.log) and the torch JSON, prints a markdown table and writes
DIR/finetune.json (every number and note) and DIR/finetune.md.
"""
import argparse
import copy
import glob
import json
import math
import os
import re
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "torch"))
sys.path.insert(0, HERE)

SCHEMA = "meganeura-finetune-bench/1"
ADAMW = dict(lr=2e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)  # meganeura finetune's defaults
# HuggingFaceTB/SmolLM2-135M's config.json, but bos/eos (set to this tokenizer's <|endoftext|>) and the
# dtype of the weights written here.
SMOLLM2_135M = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "hidden_act": "silu",
    "hidden_size": 576, "initializer_range": 0.041666666666666664, "intermediate_size": 1536, "is_llama_config": True,
    "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 9, "num_hidden_layers": 30,
    "num_key_value_heads": 3, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_interleaved": False,
    "rope_scaling": None, "rope_theta": 100000, "tie_word_embeddings": True, "torch_dtype": "float32",
    "use_cache": True, "vocab_size": 49152}
TEXT_SOURCES = ["README.md", "bench/README.md", "src/**/*.hpp", "src/**/*.cpp"]
MERGE_TEXT_CHARS = 50_000
TIMING_SECONDS = 30  # compiled processes stop waiting for each other this long before --deadline, to time  # the tokenizer's merges are learned from this much of the text (seconds, not minutes)


def twin_config(config):
    """tests/torch/transformer_models.py's SmolLM2 settings for a config.json."""
    return dict(hidden=config["hidden_size"], layers=config["num_hidden_layers"], heads=config["num_attention_heads"],
                kv_heads=config["num_key_value_heads"],
                head_dim=config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"],
                ffn=config["intermediate_size"], vocab=config["vocab_size"], rope_theta=float(config["rope_theta"]),
                eps=config["rms_norm_eps"])


# ---------------------------------------------------------------------------------------------- prepare

def prepare(args):
    import tiny_model_folder as tf
    import transformer_models as tm
    from safetensors_io import write_safetensors
    from transformer_reference import random_weights

    text, budget = [], args.text_kb * 1024
    for pattern in TEXT_SOURCES:
        for path in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
            with open(path, encoding="utf-8", errors="replace") as f:
                text.append(f.read())
            if sum(map(len, text)) >= budget:
                break
    text = "".join(text)[:budget]
    if len(text) < budget:
        sys.exit(f"prepare: the repository has only {len(text)} characters of text for --text-kb {args.text_kb}")
    model_dir = os.path.join(args.work, "model")
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(args.work, "data.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(args.work, "prompt.txt"), "w", encoding="utf-8") as f:
        f.write(text[:args.prompt_chars or (600 if args.size == "full" else 100)].rstrip())  # as the shell's $(cat) passes it to --prompt

    if args.size == "full":
        config = dict(SMOLLM2_135M)
    else:
        config = dict(tm.hf_config(dict(tm.CONFIGS["smollm2"]["tiny"], vocab=tf.VOCAB), "llama"),
                      architectures=["LlamaForCausalLM"], torch_dtype="float32")
        config = {k: v for k, v in config.items() if v is not None}
    tokenizer = tf.tokenizer_json(text[:MERGE_TEXT_CHARS], size=config["vocab_size"])
    eos = next(t["id"] for t in tokenizer["added_tokens"] if t["content"] == "<|endoftext|>")
    config.update(bos_token_id=eos, eos_token_id=eos)
    gen = torch.Generator().manual_seed(0)
    weights = {k: v.numpy() for k, v in random_weights(tm.build_from("smollm2", twin_config(config)), gen).items()}
    write_safetensors(os.path.join(model_dir, "model.safetensors"), weights, metadata={"format": "pt"})
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(model_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": eos, "eos_token_id": eos}, f)
    with open(os.path.join(model_dir, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    print(f"prepare: {model_dir} ({sum(v.size for v in weights.values()) / 1e6:.1f} M parameters), "
          f"{len(text.encode('utf-8')) // 1024} KB of text")


# ---------------------------------------------------------------------------------------------- torch

def read_ids(path):
    with open(path) as f:
        return [int(t) for t in f.read().strip().split(",") if t]


def blocks_of(ids, eos, seq):
    """`meganeura finetune`'s packing (train/lm_data.cpp): eos after the one document, blocks of seq,
    the last tenth (at least one) held out."""
    stream = ids + [eos]
    n = len(stream) // seq
    held = max(1, n // 10)
    blocks = [stream[i * seq:(i + 1) * seq] for i in range(n)]
    return blocks[:n - held], blocks[n - held:]


class Model:
    """The folder's causal LM in PyTorch: transformers' when it imports, else the tests' twin."""

    def __init__(self, folder, device):
        with open(os.path.join(folder, "config.json")) as f:
            self.config = json.load(f)
        self.notes = []
        try:
            import transformers
        except ImportError:
            transformers = None
        if transformers is not None:
            self.module = transformers.AutoModelForCausalLM.from_pretrained(
                folder, dtype=torch.float32, attn_implementation="sdpa").to(device)
            self.hf = True
            self.notes.append(f"transformers {transformers.__version__} LlamaForCausalLM (sdpa attention)")
        else:
            import transformer_models as tm
            from safetensors_io import read_safetensors
            self.module = tm.build_from("smollm2", twin_config(self.config))
            state = {k: torch.from_numpy(v) for k, v in read_safetensors(os.path.join(folder, "model.safetensors")).items()}
            self.module.load_state_dict(state)
            self.module.to(device)
            self.hf = False
            self.notes.append("transformers is not importable: the tests' PyTorch twin of the model "
                              "(tests/torch/transformer_models.py), not Hugging Face's")

    def add_lora(self, rank, alpha, targets):
        """LoRA on the modules named `targets` (the last part of their names), everything else frozen."""
        try:
            import peft
        except ImportError:
            peft = None
        if peft is not None and self.hf:
            self.module = peft.get_peft_model(self.module, peft.LoraConfig(
                r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=targets, bias="none", task_type="CAUSAL_LM"))
            self.notes.append(f"LoRA by PEFT {peft.__version__}")
            return
        for p in self.module.parameters():
            p.requires_grad_(False)
        for m in list(self.module.modules()):
            for child_name, child in list(m.named_children()):
                if child_name in targets and isinstance(child, torch.nn.Linear):
                    setattr(m, child_name, LoraLinear(child, rank, alpha))
        self.notes.append("LoRA hand-written (PEFT is not importable): x W^T + alpha / r * (x A^T) B^T")

    def loss(self, module, ids):
        """Hugging Face's causal-LM loss: labels = ids, shifted inside."""
        if self.hf:
            return module(input_ids=ids, labels=ids, use_cache=False).loss  # no KV cache built to train
        logits = module(ids)
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


class LoraLinear(torch.nn.Module):
    """PEFT's LoRA layer, for when PEFT is not importable."""

    def __init__(self, base, rank, alpha):
        super().__init__()
        self.base, self.scale = base, alpha / rank
        self.lora_A = torch.nn.Linear(base.in_features, rank, bias=False, device=base.weight.device)
        self.lora_B = torch.nn.Linear(rank, base.out_features, bias=False, device=base.weight.device)
        torch.nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))  # PEFT's initialization
        torch.nn.init.zeros_(self.lora_B.weight)

    def forward(self, x):
        return self.base(x) + self.scale * self.lora_B(self.lora_A(x))


def held_out_loss(model, module, blocks, batch, device):
    """The mean loss over every held-out label, as meganeura's evaluation computes it."""
    total, counted = 0.0, 0
    with torch.no_grad():
        for at in range(0, len(blocks), batch):
            ids = torch.tensor(blocks[at:at + batch], device=device)
            n = ids.shape[0] * (ids.shape[1] - 1)
            total += float(model.loss(module, ids)) * n
            counted += n
    return total / counted


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def train_job(args, report, device, work):
    from torch_bench import machine_to_myself, rendezvous
    ids, eos = read_ids(os.path.join(work, "ids.txt")), json.load(open(os.path.join(work, "model", "config.json")))["eos_token_id"]
    train, held = blocks_of(ids, eos, args.seq)
    model = Model(os.path.join(work, "model"), device)
    if args.mode == "eager" and args.job == "lora":
        report["held_out_loss_step0"] = held_out_loss(model, model.module, held, args.batch, device)
    if args.job == "lora":
        model.add_lora(args.lora_rank, args.lora_alpha, args.lora_targets.split(","))
    module = model.module
    module.train()
    params = [p for p in module.parameters() if p.requires_grad]
    report["trainable_parameters"] = sum(p.numel() for p in params)
    report["parameters"] = sum(p.numel() for p in module.parameters())
    opt = torch.optim.AdamW(params, **ADAMW, **({"fused": True} if device.type == "cuda" else {}))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps)))
    forward = torch.compile(module) if args.mode == "compile" else module
    g = torch.Generator().manual_seed(0)
    order = torch.randperm(len(train), generator=g).tolist()

    def step(i):
        rows = [train[order[(i * args.batch + r) % len(order)]] for r in range(args.batch)]
        batch = torch.tensor(rows, device=device)
        opt.zero_grad(set_to_none=True)
        loss = model.loss(forward, batch)
        loss.backward()
        opt.step()
        sched.step()
        return loss.item()  # read back every step, as meganeura's finetune does

    t0 = time.perf_counter()
    report["first_loss"] = step(0)
    sync(device)
    report["first_step_ms"] = (time.perf_counter() - t0) * 1e3
    for i in range(1, args.warmup):
        step(i)
    sync(device)
    if not rendezvous(args, "compiled", args.deadline and args.deadline - TIMING_SECONDS):
        report["notes"].append("timed before every other process had compiled (deadline)")
    with machine_to_myself(args):
        t0 = time.perf_counter()
        for i in range(args.warmup, args.steps):
            report["last_loss"] = step(i)
        sync(device)
        seconds = time.perf_counter() - t0
    timed = args.steps - args.warmup
    report.update(timed_steps=timed, step_ms=seconds * 1e3 / timed,
                  tokens_per_s=timed * args.batch * args.seq / seconds)
    if device.type == "cuda":
        report["peak_mib"] = torch.cuda.max_memory_allocated() / 2 ** 20
    report["notes"] += model.notes


def generate_job(args, report, device, work):
    from torch_bench import machine_to_myself, rendezvous
    base = Model(os.path.join(work, "model"), device)
    report["notes"] += base.notes
    if not base.hf:
        report["error"] = "not run: generation needs transformers' generate"
        return
    adapted = copy.deepcopy(base)  # the base stays as it is: PEFT adds its layers in place
    adapted.add_lora(args.lora_rank, args.lora_alpha, args.lora_targets.split(","))
    report["notes"] += adapted.notes[len(base.notes):]
    prompt = torch.tensor([read_ids(os.path.join(work, "prompt_ids.txt"))], device=device)
    report["prompt_tokens"] = prompt.shape[1]
    static = args.job == "generate-static"
    report["notes"].append("static cache; transformers compiles the decoding step itself (generate's automatic torch.compile)"
                           if static else "dynamic cache (generate's default), eager")

    def timed(module, new):
        sync(device)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = module.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                                  pad_token_id=base.config["eos_token_id"],
                                  **({"cache_implementation": "static"} if static else {}))
        sync(device)
        if out.shape[1] != prompt.shape[1] + new:
            raise RuntimeError(f"generate gave {out.shape[1] - prompt.shape[1]} new tokens, not {new}")
        return (time.perf_counter() - t0) * 1e3

    models = {"base": base.module.eval(), "adapter": adapted.module.eval()}
    if static:  # a second compile of minutes, in a call of about 300 s
        del models["adapter"]
        report["notes"].append("the adapter is not compiled: its row has the dynamic cache only")
    report["first_call_ms"] = {name: timed(m, args.max_new) for name, m in models.items()}  # the static cache compiles here
    if not rendezvous(args, "compiled", args.deadline and args.deadline - TIMING_SECONDS):
        report["notes"].append("timed before every other process had compiled (deadline)")
    with machine_to_myself(args):
        for name, m in models.items():
            report[name] = generation_times(timed, m, args)


def generation_times(timed, module, args):
    prefill = statistics.median(timed(module, 1) for _ in range(args.repeat))
    whole = statistics.median(timed(module, args.max_new) for _ in range(args.repeat))
    decode_ms = whole - prefill
    return {"prefill_ms": prefill, "generate_ms": whole, "decode_ms_per_token": decode_ms / (args.max_new - 1),
            "decode_tokens_per_s": (args.max_new - 1) * 1e3 / decode_ms}


def run_torch(args):
    from torch_bench import rendezvous, set_backends
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    set_backends(args.precision == "fast")  # the protocol's fast cells: TF32 matmuls
    report = {"schema": SCHEMA, "job": args.job, "mode": args.mode, "torch_version": torch.__version__,
              "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "notes": []}
    if args.mode == "compile" and not hasattr(torch, "compile"):
        report["error"] = "not run: this PyTorch has no torch.compile"
    else:
        try:
            (generate_job if args.job.startswith("generate") else train_job)(args, report, device, args.work)
        except Exception as e:  # the report says what failed; the other jobs go on
            traceback.print_exc()
            report["error"] = f"{type(e).__name__}: {e}"
            rendezvous(args, "compiled", time.time())  # arrived, so that the others do not wait for it
    path = os.path.join(args.work, f"torch-{args.job}-{args.mode}.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
    print(f"torch {args.job} {args.mode}: {report.get('error') or 'ok'}", flush=True)
    return 1 if "error" in report else 0


# ---------------------------------------------------------------------------------------------- report

def parse_finetune_log(path, warmup):
    """`meganeura finetune`'s output: the plan, the held-out losses and the progress lines; tokens/s
    after `warmup` steps from two progress lines (each gives the rate since the first step began):
    the first at or past `warmup`, and the last."""
    if not os.path.exists(path):
        return {"error": "not run"}
    text = open(path, errors="replace").read()
    out = {}
    m = re.search(r"finetune .*?: (\d+) parameters, (\d+) trainable .*?memory: ([\d.]+) MiB pinned .*?, ([\d.]+) MiB arena", text)
    if m:
        out.update(parameters=int(m[1]), trainable_parameters=int(m[2]), pinned_mib=float(m[3]), arena_mib=float(m[4]))
    m = re.search(r"held-out loss ([\d.]+) at step 0", text)
    if m:
        out["held_out_loss_step0"] = float(m[1])
    lines = [(int(s), float(r)) for s, r in re.findall(r"finetune: +\d+%\s+(\d+)/\d+\s+[\d.]+ step/s\s+(\d+) tokens/s", text)]
    m = re.search(r"finetuned (\d+) steps: loss ([-\d.]+) -> ([-\d.]+)", text)
    if m:
        out.update(steps=int(m[1]), first_loss=float(m[2]), last_loss=float(m[3]))
    m = re.search(r"data .*?: (\d+) tokens, (\d+) training and (\d+) held-out blocks of (\d+); \d+ steps of (\d+) blocks", text)
    if m:
        out.update(data_tokens=int(m[1]), seq=int(m[4]), batch=int(m[5]))
    after = [(s, r) for s, r in lines if s >= warmup and r > 0]
    if not m or "steps" not in out or len(after) < 2:
        out["error"] = (text.strip().splitlines() or ["no output"])[-1]
        return out
    # A line's rate is step * tokens per step / seconds since the first step began (a fresh run),
    # printed to the nearest token/s: that rounding bounds the error of the seconds derived from it.
    per_step = out["seq"] * out["batch"]
    (s0, r0), (s1, r1) = after[0], after[-1]
    t0, t1 = s0 * per_step / r0, s1 * per_step / r1
    if 0.5 / r0 * t0 + 0.5 / r1 * t1 > 0.01 * (t1 - t0):
        out["error"] = f"too slow to time from the progress lines ({r0:.0f} and {r1:.0f} tokens/s, rounded to 1)"
        return out
    out.update(timed_steps=s1 - s0, step_ms=(t1 - t0) * 1e3 / (s1 - s0), tokens_per_s=(s1 - s0) * per_step / (t1 - t0))
    return out


def parse_generate_logs(pattern):
    """`meganeura generate`'s closing lines, one per run: the median of each number."""
    runs = []
    for path in sorted(glob.glob(pattern)):
        text = open(path, errors="replace").read()
        m = re.search(r"prompt eval: (\d+) tokens in ([\d.]+) ms .*?; generation: (\d+) tokens, (\d+) decoding runs in ([\d.]+) ms", text)
        if not m:
            return {"error": (text.strip().splitlines() or ["no output"])[-1]}
        runs.append(dict(prompt_tokens=int(m[1]), prefill_ms=float(m[2]), generated=int(m[3]), decode_runs=int(m[4]),
                         decode_ms=float(m[5])))
    if not runs:
        return {"error": "not run"}
    med = lambda k: statistics.median(r[k] for r in runs)  # noqa: E731
    return {"runs": len(runs), "prompt_tokens": runs[0]["prompt_tokens"], "generated": runs[0]["generated"],
            "prefill_ms": med("prefill_ms"), "decode_ms_per_token": statistics.median(r["decode_ms"] / r["decode_runs"] for r in runs),
            "prefill_tokens_per_s": runs[0]["prompt_tokens"] * 1e3 / med("prefill_ms"),
            "decode_tokens_per_s": statistics.median(r["decode_runs"] * 1e3 / r["decode_ms"] for r in runs)}


def load_json(path):
    if not os.path.exists(path):
        return {"error": "not run"}
    with open(path) as f:
        return json.load(f)


def fmt(value, digits=0):
    return "—" if value is None else f"{value:,.{digits}f}"


def report(args):
    w = args.work
    mn = {"lora": parse_finetune_log(os.path.join(w, "mn-lora.log"), args.warmup),
          "full": parse_finetune_log(os.path.join(w, "mn-full.log"), args.warmup),
          "generate": {"base": parse_generate_logs(os.path.join(w, "mn-generate-base-*.log")),
                       "adapter": parse_generate_logs(os.path.join(w, "mn-generate-adapter-*.log"))}}
    torch_runs = {f"{job}-{mode}": load_json(os.path.join(w, f"torch-{job}-{mode}.json"))
                  for job in ("lora", "full") for mode in ("eager", "compile")}
    for job in ("generate", "generate-static"):
        torch_runs[job] = load_json(os.path.join(w, f"torch-{job}-eager.json" if job == "generate" else f"torch-{job}-compile.json"))
    meta = dict(kv.split("=", 1) for kv in args.meta)
    result = {"schema": SCHEMA, **meta, "meganeura": mn, "pytorch": torch_runs}

    def best(values):
        got = [(v, k) for v, k in values if v is not None]
        return max(got) if got else (None, None)

    rows = []
    for job, label in (("lora", f"LoRA r{meta.get('lora_rank', '?')} training"), ("full", "full fine-tune training")):
        e, c = torch_runs[f"{job}-eager"].get("tokens_per_s"), torch_runs[f"{job}-compile"].get("tokens_per_s")
        fastest, which = best([(e, "eager"), (c, "compile")])
        rows.append((label + " tokens/s", mn[job].get("tokens_per_s"), e, c, fastest, which))
    for kind in ("base", "adapter"):
        dyn, static = torch_runs["generate"], torch_runs["generate-static"]
        g, s = dyn.get(kind, {}), static.get(kind, {})
        m = mn["generate"][kind]
        pd = lambda run, r: r.get("prefill_ms") and run["prompt_tokens"] * 1e3 / r["prefill_ms"]  # noqa: E731
        name = "base" if kind == "base" else "with adapter"
        fastest, which = best([(pd(dyn, g), "dynamic"), (pd(static, s), "static+compile")])
        rows.append((f"prefill tokens/s ({name})", m.get("prefill_tokens_per_s"), pd(dyn, g), pd(static, s), fastest, which))
        d, ds = g.get("decode_tokens_per_s"), s.get("decode_tokens_per_s")
        fastest, which = best([(d, "dynamic"), (ds, "static+compile")])
        rows.append((f"decode tokens/s ({name})", m.get("decode_tokens_per_s"), d, ds, fastest, which))
    result["table"] = [dict(zip(("workload", "meganeura", "pytorch_a", "pytorch_b", "fastest_pytorch", "fastest_is"), r)) for r in rows]

    lines = ["| workload | meganeura | PyTorch eager / dynamic cache | PyTorch compile / static cache + compile | fastest PyTorch | mn ÷ fastest |",
             "| --- | ---: | ---: | ---: | --- | ---: |"]
    for label, m, a, b, fastest, which in rows:
        ratio = f"{m / fastest:.2f}×" if m and fastest else "—"
        lines.append(f"| {label} | {fmt(m)} | {fmt(a)} | {fmt(b)} | {which or '—'} | {ratio} |")
    notes = []
    for job in ("lora", "full"):
        r = mn[job]
        if "error" in r:
            notes.append(f"meganeura {job}: {r['error']}")
        else:
            notes.append(f"meganeura {job}: {r['trainable_parameters']:,} of {r['parameters']:,} parameters trainable, "
                         f"{r['pinned_mib']} MiB pinned + {r['arena_mib']} MiB arena, {r['timed_steps']} steps timed "
                         f"({fmt(r['step_ms'], 1)} ms each), loss {r['first_loss']:.4f} -> {r['last_loss']:.4f}")
    for kind in ("base", "adapter"):
        r = mn["generate"][kind]
        if "error" in r:
            notes.append(f"meganeura generate ({kind}): {r['error']}")
        else:
            notes.append(f"meganeura generate ({kind}): prompt {r['prompt_tokens']} tokens, {r['generated']} generated, "
                         f"median of {r['runs']} processes ({fmt(r['decode_ms_per_token'], 2)} ms per decoded token)")
    for name, r in torch_runs.items():
        bits = [r["error"]] if "error" in r else []
        if "tokens_per_s" in r:
            bits.append(f"{r['trainable_parameters']:,} trainable, first step {fmt(r['first_step_ms'])} ms, "
                        f"{r['timed_steps']} steps timed ({fmt(r['step_ms'], 1)} ms each), loss {r['first_loss']:.4f} -> "
                        f"{r['last_loss']:.4f}" + (f", peak {fmt(r['peak_mib'])} MiB" if "peak_mib" in r else ""))
        if "first_call_ms" in r:
            bits.append("first calls (warm-up) " + ", ".join(f"{k} {fmt(v)} ms" for k, v in r["first_call_ms"].items()))
        notes.append(f"PyTorch {name}: " + "; ".join(bits + r.get("notes", [])))
    mine, theirs = mn["lora"].get("held_out_loss_step0"), torch_runs["lora-eager"].get("held_out_loss_step0")
    if mine is not None and theirs is not None:
        notes.append(f"same model and data: the base model's held-out loss is {mine:.4f} in meganeura, {theirs:.4f} in PyTorch "
                     f"(relative difference {abs(mine - theirs) / abs(theirs):.1e}; meganeura prints 4 decimals)")
    if args.notes and os.path.exists(args.notes):
        notes += [line[2:].strip() for line in open(args.notes) if line.startswith("- ")]
    table = "\n".join(lines)
    md = [f"# SmolLM2 fine-tuning and generation, meganeura vs PyTorch, {meta.get('date', '')}", ""]
    md += [f"- {k}: {v}" for k, v in meta.items() if k != "date"]
    md += ["", table, "", "Tokens/s, higher is better; mn ÷ fastest above 1× means meganeura is faster. Training: "
           "tokens per optimizer step (batch × seq) × steps / seconds, after the warm-up steps, the loss read back every "
           "step on both sides. Prefill: prompt tokens / (prompt forward + first token). Decode: tokens after the first / "
           "their time. meganeura's generation numbers are the median of separate processes (each one's first "
           "prompt), PyTorch's the median of calls after a warm-up call in one process.", "", "### Notes", ""]
    md += [f"- {n}" for n in notes]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "finetune.json"), "w") as f:
        json.dump(result, f, indent=2)
    with open(os.path.join(args.out, "finetune.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("work")
    p.add_argument("--size", choices=["full", "tiny"], default="full")
    p.add_argument("--text-kb", type=int, default=300)
    p.add_argument("--prompt-chars", type=int, help="default 600, tiny 100 (within its 256 positions)")
    t = sub.add_parser("torch")
    t.add_argument("work")
    t.add_argument("--job", choices=["lora", "full", "generate", "generate-static"], required=True)
    t.add_argument("--mode", choices=["eager", "compile"], required=True)
    for name, default in (("steps", 50), ("warmup", 10), ("batch", 8), ("seq", 256), ("lora-rank", 8), ("max-new", 128), ("repeat", 3)):
        t.add_argument(f"--{name}", type=int, default=default)
    t.add_argument("--lora-alpha", type=float, default=16)
    t.add_argument("--lora-targets", default="q_proj,k_proj,v_proj,o_proj")
    t.add_argument("--deadline", type=float, default=0)
    t.add_argument("--precision", choices=["strict", "fast"], default="strict", help="fast: TF32 matmuls")
    t.add_argument("--processes", type=int, default=1)
    t.add_argument("--rendezvous")
    r = sub.add_parser("report")
    r.add_argument("work")
    r.add_argument("--out", required=True)
    r.add_argument("--warmup", type=int, default=10, help="meganeura's steps before the timed ones")
    r.add_argument("--notes", help="a file of \"- \" lines to add to the notes (the driver's)")
    r.add_argument("--meta", action="append", default=[])
    args = ap.parse_args(argv)
    if args.command == "prepare":
        return prepare(args)
    if args.command == "torch":
        if not 1 <= args.warmup < args.steps or args.max_new < 2:
            ap.error("need 1 <= --warmup < --steps and --max-new >= 2")
        return run_torch(args)
    return report(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]) or 0)
