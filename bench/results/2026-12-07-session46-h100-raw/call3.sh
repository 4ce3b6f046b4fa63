#!/usr/bin/env bash
# Session 46 call 3: q47 = p47 (the updates add the pieces of the sums they alone read) with the batch's members by
# quads (four elements a thread, 16-byte loads and stores; uncommitted), against n47 (the head, fbcd621).
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
for d in n47 q47; do xz -dkf -T0 build-lead/$d/*.xz && chmod +x build-lead/$d/meganeura build-lead/$d/meganeura_tests; done
timeout 60 build-lead/q47/meganeura_tests --gtest_brief=1 \
  --gtest_filter="FusionTest.*:TrainTest.*" > $OUT/r/tests-q47.txt 2>&1
echo "tests q47 rc $?"; grep -E 'FAILED|tests ran|PASSED' $OUT/r/tests-q47.txt | head -20
KERNELS=6 MODELS="smollm2 whisper resnet50" PRECISIONS="fast" ROUNDS=1 REPEAT=15 timeout 150 scripts/h200_ab.sh $OUT/r/ab4 \
  n47=build-lead/n47 q47=build-lead/q47 > $OUT/r/ab4.log 2>&1
echo "ab4 rc $?"; grep -E "training|step" $OUT/r/ab4/ab.md | cut -c1-250
KERNELS=6 MODELS="smollm2" PRECISIONS="strict" ROUNDS=1 REPEAT=15 timeout 80 scripts/h200_ab.sh $OUT/r/ab5 \
  n47=build-lead/n47 q47=build-lead/q47 > $OUT/r/ab5.log 2>&1
echo "ab5 rc $?"; grep -E "training|step" $OUT/r/ab5/ab.md | cut -c1-250
