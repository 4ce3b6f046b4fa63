#!/usr/bin/env bash
# Session 42 call 2: the models in precision strict with the f32 product's subgroup layouts (MN_X_WARP), x42.
set -u
mkdir -p /tmp/x42 && tar xJf build-lead/x42/x42.tar.xz -C /tmp/x42 meganeura
MODELS="${MODELS:-whisper resnet50 smollm2}" PRECISIONS=strict ROUNDS=${ROUNDS:-1} REPEAT=20 scripts/h200_ab.sh $OUT/ab \
  base=/tmp/x42 w8=/tmp/x42@MN_X_WARP=8 w4=/tmp/x42@MN_X_WARP=4
MODELS=whisper PRECISIONS=strict ROUNDS=1 REPEAT=20 scripts/h200_ab.sh $OUT/ab-att \
  base=/tmp/x42 a64-8-32=/tmp/x42@MEGANEURA_ATTENTION_TILES=64,8,32 a32-8-32=/tmp/x42@MEGANEURA_ATTENTION_TILES=32,8,32
