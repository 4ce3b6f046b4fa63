#!/usr/bin/env python3
"""Checks what `meganeura finetune --lora-rank R --merge` wrote, as PEFT and transformers read it.

  check_peft_export.py BASE_DIR OUT_DIR

- OUT_DIR/adapter_config.json is a PEFT LoraConfig (peft_type LORA, r, lora_alpha, target_modules);
- OUT_DIR/adapter_model.safetensors has PEFT's keys, base_model.model.<module>.lora_A.weight [r, in]
  and .lora_B.weight [out, r], for modules of the base model that are targets;
- OUT_DIR/merged is a model folder: config.json, model.safetensors with {"format": "pt"} metadata and
  exactly the base model's tensors (no optimizer state, no adapter), each adapted weight equal to
  W + lora_alpha / r * B @ A (in float64), the others unchanged;
- PyTorch's model on the merged weights gives the logits of the base model with the adapters applied
  as PEFT's LoRA layers do (x W^T + scale * (x A^T) B^T), on random ids.
Exits non-zero naming the first thing that differs.
"""
import json
import os
import struct
import sys

import numpy as np
import torch

import transformer_models as tm
from safetensors_io import read_safetensors

PREFIX = "base_model.model."


def metadata(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)).get("__metadata__", {})


def fail(message):
    print("check_peft_export:", message)
    sys.exit(1)


def main():
    base_dir, out_dir = sys.argv[1], sys.argv[2]
    config = json.load(open(os.path.join(out_dir, "adapter_config.json")))
    if config.get("peft_type") != "LORA" or config.get("task_type") != "CAUSAL_LM":
        fail(f"adapter_config.json: {config}")
    r, alpha, targets = config["r"], config["lora_alpha"], set(config["target_modules"])
    scale = alpha / r
    base = read_safetensors(os.path.join(base_dir, "model.safetensors"))
    adapter = read_safetensors(os.path.join(out_dir, "adapter_model.safetensors"))
    modules = set()
    for key, value in adapter.items():
        if not key.startswith(PREFIX) or not (key.endswith(".lora_A.weight") or key.endswith(".lora_B.weight")):
            fail(f"adapter key {key} is not PEFT's")
        module = key[len(PREFIX):].rsplit(".lora_", 1)[0]
        if module.rsplit(".", 1)[1] not in targets or module + ".weight" not in base:
            fail(f"adapter key {key}: {module} is not a target module of the base model")
        out_features, in_features = base[module + ".weight"].shape
        want = (r, in_features) if key.endswith("lora_A.weight") else (out_features, r)
        if value.shape != want:
            fail(f"{key} has shape {value.shape}, expected {want}")
        modules.add(module)
    if not modules:
        fail("the adapter is empty")

    merged_path = os.path.join(out_dir, "merged", "model.safetensors")
    if metadata(merged_path).get("format") != "pt":
        fail(f"{merged_path}: metadata {metadata(merged_path)} lacks format pt")
    if not os.path.exists(os.path.join(out_dir, "merged", "config.json")):
        fail("merged/config.json is missing")
    merged = read_safetensors(merged_path)
    if set(merged) != set(base):
        fail(f"merged tensors differ from the base's: {sorted(set(merged) ^ set(base))[:5]}")
    for name, w in base.items():
        want = w.astype(np.float64)
        module = name[: -len(".weight")]
        if module in modules:
            a = adapter[PREFIX + module + ".lora_A.weight"].astype(np.float64)
            b = adapter[PREFIX + module + ".lora_B.weight"].astype(np.float64)
            want = want + scale * (b @ a)
        err = np.abs(merged[name] - want).max() / max(np.abs(want).max(), 1e-30)
        if err > 1e-6:
            fail(f"merged {name} differs from W + scale * B A by {err:.2e}")

    c = json.load(open(os.path.join(base_dir, "config.json")))
    cfg = dict(hidden=c["hidden_size"], layers=c["num_hidden_layers"], heads=c["num_attention_heads"],
               kv_heads=c["num_key_value_heads"], head_dim=c["head_dim"], ffn=c["intermediate_size"],
               vocab=c["vocab_size"], rope_theta=c["rope_theta"], eps=c["rms_norm_eps"],
               qkv_bias=c["model_type"] == "qwen2")
    ids = torch.randint(0, cfg["vocab"], (2, 7), generator=torch.Generator().manual_seed(0))
    with_adapter = tm.build_from("smollm2", cfg).double()
    with_adapter.load_state_dict({k: torch.from_numpy(v).double() for k, v in base.items()})
    for module in modules:
        layer = with_adapter.get_submodule(module)
        a = torch.from_numpy(adapter[PREFIX + module + ".lora_A.weight"]).double()
        b = torch.from_numpy(adapter[PREFIX + module + ".lora_B.weight"]).double()
        layer.register_forward_hook(lambda mod, inp, out, a=a, b=b: out + scale * (inp[0] @ a.t()) @ b.t())
    on_merged = tm.build_from("smollm2", cfg).double()
    on_merged.load_state_dict({k: torch.from_numpy(v).double() for k, v in merged.items()})
    with torch.no_grad():
        x, y = with_adapter(ids), on_merged(ids)
    err = ((x - y).norm() / x.norm()).item()
    if err > 1e-6:
        fail(f"logits of the merged model differ from base + adapter by {err:.2e}")
    print(f"check_peft_export: {len(modules)} adapted modules, merged weights and logits match (rel {err:.1e})")


if __name__ == "__main__":
    main()
