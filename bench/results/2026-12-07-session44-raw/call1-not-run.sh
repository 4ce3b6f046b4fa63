#!/usr/bin/env bash
# Not run: no device could be started this session (see ../2026-12-07-session44.md). x44 = 2a71b29 with
# quads-experiments-not-run.patch applied (a Release build, stripped, matmul_bench beside it as session 43 built it).
# Session 44 call 1 (fast precision, ResNet-50): base = l43 (session 43's kernels, = ad7f34c); x44 =
# 2a71b29 (short rows several to a workgroup; the deeper product adds the shortcut; concat; MSE) with experiments:
# EPI4 quads on unless MN_X_EPI4 is set; MN_X_QUAD=1 the cooperative product's epilogue and edge stores by quads, 2
# every tile's; MN_X_CQUAD=1 the cooperative convolutions' stores by quads. Tests with all of them first.
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r build && tar xJf build-lead/x44/x44.tar.xz -C build-lead/x44 && cp build-lead/x44/meganeura build/
MN_X_QUAD=2 MN_X_CQUAD=1 timeout 60 build-lead/x44/meganeura_tests --gtest_brief=1 \
  --gtest_filter="MatmulTest.FastPrecision*:FusionTest.*:ConvOpsTest.*:OpsTest.Reductions:ConvModels.*" \
  > $OUT/r/tests-q2.txt 2>&1
echo "tests rc $?"; grep -E '^\[  (PASSED|FAILED) |FAILED TEST|tests ran|^\[  FAILED' $OUT/r/tests-q2.txt | head -20
KERNELS=12 MODELS="resnet50" PRECISIONS=fast ROUNDS=1 REPEAT=15 timeout 180 scripts/h200_ab.sh $OUT/r/abr \
  base=build-lead/l43 x44=build-lead/x44 noepi4=build-lead/x44@MN_X_EPI4=0 \
  q1c="build-lead/x44@MN_X_QUAD=1 MN_X_CQUAD=1" > $OUT/r/abr.log 2>&1
echo "abr rc $?"
cat $OUT/r/abr/ab.md
