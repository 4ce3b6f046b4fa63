#!/usr/bin/env bash
# Session 48, call 1 (H100 or H200). h48 = 752efd8 (the head at the session's start), g48 = the f32 attention
# gradients' group barrier in subgroups (dS stored in the next tile's window). (a) head, the attention gradients'
# chunks added by their last chunk (MEGANEURA_SPLIT_SUM=attention), and g48: training and step of SmolLM2 and Whisper;
# (b) Whisper's strict dK/dV kernel (g48) under other attention tiles (the backward shrinks to fit 48 KiB).
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r && xz -dkf -T0 build-lead/*/*.xz && chmod +x build-lead/*/meganeura*
MODELS="whisper smollm2" PRECISIONS="strict fast" ROUNDS=2 REPEAT=15 timeout 380 scripts/h200_ab.sh $OUT/r/ab \
  head=build-lead/h48 asum=build-lead/h48@MEGANEURA_SPLIT_SUM=attention gb=build-lead/g48 > $OUT/r/ab.log 2>&1
echo "ab rc $?"; grep -E "training|step" $OUT/r/ab/ab.md | cut -c1-400
KERNELS=4 MODELS=whisper PRECISIONS=strict ROUNDS=1 REPEAT=10 timeout 120 scripts/h200_ab.sh $OUT/r/tiles gb=build-lead/g48 \
  t32_8_32=build-lead/g48@MEGANEURA_ATTENTION_TILES=32,8,32 t16_16_32=build-lead/g48@MEGANEURA_ATTENTION_TILES=16,16,32 \
  t64_4_32=build-lead/g48@MEGANEURA_ATTENTION_TILES=64,4,32 > $OUT/r/tiles.log 2>&1
echo "tiles rc $?"; grep -E "training" $OUT/r/tiles/ab.md | tr '|' '\n' | cut -c1-200
