#!/usr/bin/env bash
# Session 45 call D: x44 (2a71b29 + quads patch): landed (MN_X_EPI4=0) vs q1c (epilogue/edge stores by quads + conv quads)
# vs q2c (every coop store by quads + conv quads), fast precision, ResNet-50, SmolLM2, Whisper, U-Net.
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r build && tar xJf build-lead/x44/x44.tar.xz -C build-lead/x44
KERNELS=8 MODELS="smollm2 whisper sd_unet resnet50" PRECISIONS="fast" ROUNDS=1 REPEAT=15 timeout 400 scripts/h200_ab.sh $OUT/r/abq \
  landed=build-lead/x44@MN_X_EPI4=0 q1c="build-lead/x44@MN_X_QUAD=1 MN_X_CQUAD=1" q2c="build-lead/x44@MN_X_QUAD=2 MN_X_CQUAD=1" > $OUT/r/abq.log 2>&1
echo "abq rc $?"; cat $OUT/r/abq/ab.md | cut -c1-400
