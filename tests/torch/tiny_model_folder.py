#!/usr/bin/env python3
"""A tiny random SmolLM2-shaped Hugging Face model folder, for the tests and the README's example.

  tiny_model_folder.py OUT_DIR [--text FILE] [--shards N] [--qwen2] [--seed S]

writes OUT_DIR/config.json (model_type llama, or qwen2 with q/k/v biases), the weights as
model.safetensors (or N shards and model.safetensors.index.json), generation_config.json and a
byte-level BPE tokenizer.json whose merges are learned from FILE's text (a built-in paragraph by
default): 256 byte tokens, merges up to 317 tokens, then <|endoftext|>, <|im_start|>, <|im_end|>.
"""
import argparse
import collections
import json
import os
import re

import torch

import transformer_models as tm
from safetensors_io import write_safetensors
from transformer_reference import random_weights

VOCAB = 320
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SAMPLE = ("The quick brown fox jumps over the lazy dog. A tokenizer learns its merges from text like "
          "this one, and the model reads the tokens it makes. The fox and the dog are friends.\n") * 4


def byte_chars():
    """GPT-2's byte-to-unicode table (the byte-level alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def learn_merges(text, count):
    """The `count` most frequent pair merges, greedily, over words split roughly as GPT-2 does."""
    chars = byte_chars()
    words = collections.Counter(
        tuple(chars[b] for b in w.encode("utf-8")) for w in re.findall(r" ?\w+| ?[^\s\w]+|\s+", text))
    merges = []
    while len(merges) < count:
        pairs = collections.Counter()
        for w, n in words.items():
            for a, b in zip(w, w[1:]):
                pairs[a, b] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append((a, b))
        merged = collections.Counter()
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == (a, b):
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += n
        words = merged
    return merges


def tokenizer_json(text, size=VOCAB):
    """Merges up to VOCAB tokens; `size` tokens in all (bench/finetune_bench.py: a real model's 49,152)."""
    chars = byte_chars()
    vocab = {chars[b]: b for b in range(256)}
    merges = learn_merges(text, VOCAB - 256 - len(SPECIALS))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    # Pad to the model's size when the text had fewer pairs than wanted, or the model has more rows
    # (ids stay dense, and every id the model can produce decodes).
    while len(vocab) < size - len(SPECIALS):
        vocab[f"<|unused{len(vocab)}|>"] = len(vocab)
    added = []
    for s in SPECIALS:
        added.append({"id": len(vocab), "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True})
        vocab[s] = len(vocab)
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": byte_level, "post_processor": byte_level, "decoder": byte_level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                      "merges": [f"{a} {b}" for a, b in merges]}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--text")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--qwen2", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    text = open(a.text, encoding="utf-8").read() if a.text else SAMPLE
    c = dict(tm.CONFIGS["smollm2"]["tiny"], vocab=VOCAB, qkv_bias=a.qwen2)
    gen = torch.Generator().manual_seed(a.seed)
    weights = {k: v.numpy() for k, v in random_weights(tm.build_from("smollm2", c), gen).items()}
    os.makedirs(a.out_dir, exist_ok=True)
    config = dict(tm.hf_config(c, "qwen2" if a.qwen2 else "llama"), bos_token_id=VOCAB - 3, eos_token_id=VOCAB - 3,
                  architectures=["Qwen2ForCausalLM" if a.qwen2 else "LlamaForCausalLM"], torch_dtype="float32")
    with open(os.path.join(a.out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(a.out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": VOCAB - 3, "eos_token_id": VOCAB - 3}, f)
    with open(os.path.join(a.out_dir, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(text), f, ensure_ascii=False)
    if a.shards == 1:
        write_safetensors(os.path.join(a.out_dir, "model.safetensors"), weights)
        return
    names = sorted(weights)
    weight_map = {}
    for s in range(a.shards):
        shard = f"model-{s + 1:05d}-of-{a.shards:05d}.safetensors"
        part = names[s::a.shards]
        write_safetensors(os.path.join(a.out_dir, shard), {n: weights[n] for n in part})
        weight_map.update({n: shard for n in part})
    with open(os.path.join(a.out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=2)


if __name__ == "__main__":
    main()
