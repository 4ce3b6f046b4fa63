#!/usr/bin/env bash
# Session 46 call 1: session 45's callE and callF in one. n47 = the head (fbcd621) Release build, x47 = the head with
# row4-experiment-not-run.patch (behind MN_X_ROW4=1), l43 = session 43's binary (ad7f34c).
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
for d in n47 x47; do xz -dkf -T0 build-lead/$d/*.xz && chmod +x build-lead/$d/meganeura build-lead/$d/meganeura_tests; done
timeout 110 build-lead/n47/meganeura_tests --gtest_brief=1 \
  --gtest_filter="MatmulTest.*:FusionTest.*:ConvOpsTest.*:OpsTest.*:CoopShared*" > $OUT/r/tests-n47.txt 2>&1
echo "tests n47 rc $?"; grep -E 'FAILED|tests ran|PASSED' $OUT/r/tests-n47.txt | head -20
MN_X_ROW4=1 timeout 90 build-lead/x47/meganeura_tests --gtest_brief=1 --gtest_filter="OpsTest.*:FusionTest.*:ConvModels.*" \
  > $OUT/r/tests-row4.txt 2>&1
echo "tests row4 rc $?"; grep -E 'FAILED|tests ran|PASSED' $OUT/r/tests-row4.txt | head -20
KERNELS=8 MODELS="resnet50 sd_unet whisper" PRECISIONS="fast" ROUNDS=1 REPEAT=15 timeout 200 scripts/h200_ab.sh $OUT/r/ab1 \
  base=build-lead/l43 n47=build-lead/n47 row4=build-lead/x47@MN_X_ROW4=1 > $OUT/r/ab1.log 2>&1
echo "ab1 rc $?"; cut -c1-400 $OUT/r/ab1/ab.md
KERNELS=8 MODELS="resnet50 sd_unet" PRECISIONS="strict" ROUNDS=1 REPEAT=15 timeout 150 scripts/h200_ab.sh $OUT/r/ab2 \
  n47=build-lead/n47 row4=build-lead/x47@MN_X_ROW4=1 > $OUT/r/ab2.log 2>&1
echo "ab2 rc $?"; cut -c1-400 $OUT/r/ab2/ab.md
