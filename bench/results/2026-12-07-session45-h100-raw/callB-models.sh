#!/usr/bin/env bash
# Session 45 call B: l43 (ad7f34c) vs n45 (2d83dfe) vs n45d (MEGANEURA_SPLIT_SUM=dispatch) on Whisper, SmolLM2, the U-Net, ResNet-50 strict.
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
KERNELS=8 MODELS="whisper smollm2 sd_unet" PRECISIONS="fast strict" ROUNDS=1 REPEAT=15 timeout 480 scripts/h200_ab.sh $OUT/r/abm \
  base=build-lead/l43 n45=build-lead/n45 n45d=build-lead/n45@MEGANEURA_SPLIT_SUM=dispatch > $OUT/r/abm.log 2>&1
echo "abm rc $?"; cat $OUT/r/abm/ab.md
