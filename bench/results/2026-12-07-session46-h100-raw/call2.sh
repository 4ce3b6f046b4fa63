#!/usr/bin/env bash
# Session 46 call 2: p47 = the head with the updates adding the pieces of the sums they alone read (uncommitted),
# against n47 (the head, fbcd621): the tests of fusion, training and models, then the training steps.
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
for d in n47 p47; do xz -dkf -T0 build-lead/$d/*.xz && chmod +x build-lead/$d/meganeura build-lead/$d/meganeura_tests; done
timeout 120 build-lead/p47/meganeura_tests --gtest_brief=1 \
  --gtest_filter="FusionTest.*:TrainTest.*:ConvModels*:Transformer*:F16Weights*" > $OUT/r/tests-p47.txt 2>&1
echo "tests p47 rc $?"; grep -E 'FAILED|tests ran|PASSED' $OUT/r/tests-p47.txt | head -20
KERNELS=8 MODELS="whisper smollm2 sd_unet" PRECISIONS="fast strict" ROUNDS=2 REPEAT=15 timeout 420 scripts/h200_ab.sh $OUT/r/ab3 \
  n47=build-lead/n47 p47=build-lead/p47 > $OUT/r/ab3.log 2>&1
echo "ab3 rc $?"; grep -E "training|step" $OUT/r/ab3/ab.md | cut -c1-300
