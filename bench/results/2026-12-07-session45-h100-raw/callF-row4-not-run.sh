#!/usr/bin/env bash
# Not run (session 45: no device time left). The row reductions with four elements in flight a thread
# (row4-experiment-not-run.patch, on 300d715, behind MN_X_ROW4=1): ResNet-50's per-channel sums of the fast step's
# gradients (`sum`, 0.46 ms GPU x39, ~8x off their bandwidth floor) and the U-Net's. x45 = that tree's Release build
# (`meganeura` and `meganeura_tests`, stripped, xz'd into build-lead/x45/). Tests with it on first.
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r && xz -dkf build-lead/x45/*.xz && chmod +x build-lead/x45/meganeura build-lead/x45/meganeura_tests
MN_X_ROW4=1 timeout 100 build-lead/x45/meganeura_tests --gtest_brief=1 --gtest_filter="OpsTest.*:FusionTest.*:ConvModels.*" \
  > $OUT/r/tests-row4.txt 2>&1
echo "tests rc $?"; grep -E 'FAILED|tests ran|PASSED' $OUT/r/tests-row4.txt | head -20
KERNELS=10 MODELS="resnet50 sd_unet" PRECISIONS="fast strict" ROUNDS=2 REPEAT=15 timeout 400 scripts/h200_ab.sh $OUT/r/abrow \
  head=build-lead/x45 row4=build-lead/x45@MN_X_ROW4=1 > $OUT/r/abrow.log 2>&1
echo "abrow rc $?"; cut -c1-300 $OUT/r/abrow/ab.md
