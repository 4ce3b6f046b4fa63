#!/usr/bin/env bash
# Session 40, call 5: the LoRA adapter's products (rank 8, 2048 tokens, SmolLM2's q projection) at every f32 tile and
# split-K off (matmul_bench --tiles), with the choices (MEGANEURA_DEBUG).
set -u
export MEGANEURA_VALIDATE=0
xz -dkf -T0 build-lead/mb/matmul_bench.xz; chmod +x build-lead/mb/matmul_bench
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
timeout 200 build-lead/mb/matmul_bench --runs 10 --only LoRA --tiles > $OUT/lora-tiles.md 2>&1
MEGANEURA_DEBUG=1 timeout 100 build-lead/mb/matmul_bench --runs 3 --only LoRA 2>&1 | grep -E "^  matmul" | sort | uniq > $OUT/lora-choices.txt
