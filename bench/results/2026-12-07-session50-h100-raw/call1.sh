#!/usr/bin/env bash
# Session 50, call 1: precision fast's attention kernels with rows in accumulators (attention_coop_quads.cpp), without
# (h50) and with (h50p) the forward's next key tile fetched into registers while one is computed: their registers,
# the attention, cooperative and model tests of h50p, Whisper and SmolLM2 fast beside the shared-memory kernels
# (MEGANEURA_ATTENTION_QUADS=0).
set -u
source scripts/gpu-env.sh
export MEGANEURA_TEST_PYTHON=$(which python3) MEGANEURA_ATTENTION_QUADS=1  # h50p's kernels are asked for; h50's are its default
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for b in h50 h50p; do xz -dkf -T0 build-lead/$b/*.xz && chmod +x build-lead/$b/meganeura*; done
mkdir -p $OUT/t1p $OUT/ab
build-lead/h50/meganeura devices 2>&1 | grep -i "accumul\|shuffle" | head -3
for b in h50p; do
  echo "== $b"
  MEGANEURA_VALIDATE=0 MEGANEURA_DEBUG=1 MEGANEURA_PIPELINE_STATISTICS=1 timeout 120 build-lead/$b/meganeura bench --model whisper \
    --precision fast --size full --repeat 2 --warmup 1 2>&1
done > $OUT/stats.txt
grep -i -A6 "attention.*coop" $OUT/stats.txt | grep -i "==\|regist\|spill\|attention" | head -16
scripts/h200_tests.sh build-lead/h50p/meganeura_tests '*AttentionFast*:*Cooperative*:*Coop*:*AttentionSplit*:Models/TransformerVsTorch*:-*Source*' $OUT/t1p
grep -B3 -A12 "Failure" $OUT/t1p/tests.txt | head -50
MODELS="whisper" PRECISIONS=fast ROUNDS=1 KERNELS=4 scripts/h200_ab.sh $OUT/ab prefetch=build-lead/h50p quads=build-lead/h50 \
  shared=build-lead/h50p@MEGANEURA_ATTENTION_QUADS=0 2>&1 | tail -12
