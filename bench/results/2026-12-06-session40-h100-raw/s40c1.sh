#!/usr/bin/env bash
# Session 40, call 1: knob sweep on the cells behind PyTorch (ResNet-50 fast, Whisper strict), one binary (x40 = 09348f9
# + the MN_X_DEEP experiment: 64-deep K-slices for cooperative tiles whose grid is under one workgroup a compute unit).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
MODELS=resnet50 PRECISIONS=fast ROUNDS=2 scripts/h200_ab.sh $OUT/resnet50-fast \
  base=build-lead/x40 deep1=build-lead/x40@MN_X_DEEP=1 deep1c=build-lead/x40@MN_X_DEEP=1c \
  deep2c=build-lead/x40@MN_X_DEEP=2c nv=build-lead/x40@MEGANEURA_COOP=nv > $OUT/resnet50-fast.log 2>&1
MODELS=whisper PRECISIONS=strict ROUNDS=2 scripts/h200_ab.sh $OUT/whisper-strict \
  base=build-lead/x40 sum=build-lead/x40@MEGANEURA_SPLIT_SUM=matmul gq=build-lead/x40@MEGANEURA_ATTENTION_GRAD_Q=kernel \
  t128x64=build-lead/x40@MEGANEURA_MATMUL_TILE=128x64 upb=build-lead/x40@MEGANEURA_UPDATES=batched \
  upe=build-lead/x40@MEGANEURA_UPDATES=epilogue att=build-lead/x40@MEGANEURA_SPLIT_SUM=attention > $OUT/whisper-strict.log 2>&1
