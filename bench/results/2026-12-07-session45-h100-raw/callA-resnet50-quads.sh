#!/usr/bin/env bash
# Session 45 call A: x44's quads tests; ResNet-50 fast A/B: l43 (ad7f34c), landed (2a71b29 kernels), n45 (2d83dfe:
# BN-scaled weights one batch; reductions sum their own pieces), n45d (n45, MEGANEURA_SPLIT_SUM=dispatch), x44 experiments.
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r build && tar xJf build-lead/x44/x44.tar.xz -C build-lead/x44 && cp build-lead/x44/meganeura build/
MN_X_QUAD=2 MN_X_CQUAD=1 timeout 90 build-lead/x44/meganeura_tests --gtest_brief=1 \
  --gtest_filter="MatmulTest.FastPrecision*:FusionTest.*:ConvOpsTest.*:OpsTest.Reductions:ConvModels.*" \
  > $OUT/r/tests-q2.txt 2>&1
echo "tests rc $?"; grep -E '^\[  (PASSED|FAILED) |FAILED TEST|tests ran|^\[  FAILED' $OUT/r/tests-q2.txt | head -20
KERNELS=12 MODELS="resnet50" PRECISIONS=fast ROUNDS=2 REPEAT=15 timeout 420 scripts/h200_ab.sh $OUT/r/abr \
  base=build-lead/l43 landed=build-lead/x44@MN_X_EPI4=0 n45=build-lead/n45 n45d=build-lead/n45@MEGANEURA_SPLIT_SUM=dispatch \
  epi4=build-lead/x44 q2c="build-lead/x44@MN_X_QUAD=2 MN_X_CQUAD=1" > $OUT/r/abr.log 2>&1
echo "abr rc $?"; cat $OUT/r/abr/ab.md
