#!/usr/bin/env python3
"""Expected results of meganeura's transformer models at their tiny configs, for
tests/transformer_models_test.cpp.

  transformer_reference.py NAME OUT_DIR [--seed S] [--qwen2] [--llama3-rope] [--shifted-labels]

writes OUT_DIR/weights.safetensors (float32, Hugging Face names), OUT_DIR/inputs.safetensors and
OUT_DIR/expected.safetensors: the output ("logits" or "output"), "loss" and "grad.<parameter>"
for every parameter. SmolLM2's labels are Hugging Face-style (shifted inside, some -100); with
--shifted-labels they are given aligned with the logits as "shifted_labels"; with --qwen2 the model
has Qwen2's q/k/v biases, with --llama3-rope Llama 3.1's rope_scaling (a short original context, so
every band of frequencies is exercised), and OUT_DIR/config.json says so. The weights are rounded to float32 first and the model then runs in float64,
so the expected values are those of the stored weights, not of PyTorch's float32 rounding.
"""
import argparse
import json
import os

import numpy as np
import torch

import transformer_models as tm
from safetensors_io import write_safetensors


def random_weights(module, gen):
    """Nonzero everywhere (norm weights off 1, biases off 0), so every gradient path is tested."""
    state = {}
    for name, p in module.state_dict().items():
        if name.endswith("norm.weight") or name.endswith("layernorm.weight") or name.endswith("layer_norm.weight"):
            value = 1 + 0.2 * torch.randn(p.shape, generator=gen)
        elif p.dim() == 1:
            value = 0.1 * torch.randn(p.shape, generator=gen)
        else:
            fan_in = p[0].numel()
            value = torch.randn(p.shape, generator=gen) / fan_in ** 0.5
        state[name] = value.float()
    return state


def random_inputs(name, c, gen, shifted_labels=False):
    if name == "smollm2":
        ids = lambda: torch.randint(0, c["vocab"], (2, 9), generator=gen, dtype=torch.int32)
        labels = ids()
        labels[0, 3] = labels[1, 6] = labels[1, 7] = -100  # ignored, as a padded or prompt position
        return {"input_ids": ids(), "shifted_labels" if shifted_labels else "labels": labels}
    if name == "smolvla":
        return {"actions": torch.randn(2, c["chunk"], c["action_dim"], generator=gen),
                "timestep": torch.randn(2, 1, c["time_dim"], generator=gen),
                "vlm_kv": torch.randn(2, c["context"], c["context_dim"], generator=gen)}
    return {"input_features": torch.randn(2, c["mels"], c["frames"], generator=gen)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name", choices=tm.NAMES)
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--qwen2", action="store_true")
    ap.add_argument("--shifted-labels", action="store_true")
    ap.add_argument("--llama3-rope", action="store_true")
    a = ap.parse_args()
    gen = torch.Generator().manual_seed(a.seed)
    c = dict(tm.CONFIGS[a.name]["tiny"], qkv_bias=a.qwen2)
    if a.llama3_rope:
        c["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 16}
    module = tm.build_from(a.name, c)
    weights = random_weights(module, gen)
    inputs = random_inputs(a.name, c, gen, a.shifted_labels)
    os.makedirs(a.out_dir, exist_ok=True)
    if a.qwen2 or a.llama3_rope:
        with open(os.path.join(a.out_dir, "config.json"), "w") as f:
            json.dump(tm.hf_config(c, "qwen2" if a.qwen2 else "llama"), f)
    module.load_state_dict(weights)
    module.double()
    run_inputs = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    output, loss = tm.run(a.name, module, run_inputs)
    loss.backward()
    expected = {"logits" if a.name == "smollm2" else "output": output.detach().float().numpy(),
                "loss": loss.detach().float().numpy()}
    for n, p in module.named_parameters():
        expected["grad." + n] = p.grad.float().numpy()
    write_safetensors(os.path.join(a.out_dir, "weights.safetensors"), {k: v.numpy() for k, v in weights.items()})
    write_safetensors(os.path.join(a.out_dir, "inputs.safetensors"), {k: v.numpy() for k, v in inputs.items()})
    write_safetensors(os.path.join(a.out_dir, "expected.safetensors"), expected)


if __name__ == "__main__":
    main()
