#!/usr/bin/env bash
# Session 42 call 1: (a) the f32 tiled product with a subgroup's threads laid out 8x4 or 4x8 over the tile (MN_X_WARP,
# experiment build x42) against the rule's 16x2 rows, matmul_bench; (b) the head's tests on a cooperative device
# (26ba56f's guard first run there); (c) session 41's call 7 (last_piece's flag declared first, the guard lifted).
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r /tmp/x42
tar xJf build-lead/x42/x42.tar.xz -C /tmp/x42
export LD_LIBRARY_PATH=/tmp/x42
for w in 0 8 4; do
  start=$(date +%s)
  MN_X_WARP=$([ $w = 0 ] && echo "" || echo $w) timeout 150 /tmp/x42/matmul_bench --runs 10 --only "Whisper,square 4096,SmolLM2 mlp,SmolLM2 attn proj,SmolVLA expert" > $OUT/r/mb-w$w.md 2>&1
  echo "matmul_bench w$w rc $? in $(( $(date +%s) - start )) s"
done
unset LD_LIBRARY_PATH
xz -dc build-lead/h42/meganeura_tests.xz > /tmp/h && chmod +x /tmp/h
mkdir -p build && xz -dc build-lead/h42/meganeura.xz > build/meganeura && chmod +x build/meganeura
export MEGANEURA_TEST_PYTHON=$(which python3)
start=$(date +%s)
MEGANEURA_CACHE_DIR=/tmp/hc timeout 200 /tmp/h --gtest_brief=1 --gtest_filter='*Fast*:*Coop*:*Cooperative*:MatmulTest.*:ConvOpsTest.*:AttentionGpu.*:FusionTest.*:Attention/*' > $OUT/r/tests-head.txt 2>&1
echo "head tests rc $? in $(( $(date +%s) - start )) s"; grep -E "^\[  (PASSED|FAILED) |tests? ran" $OUT/r/tests-head.txt | head -30
xz -dc build-lead/e42/meganeura_tests.xz > /tmp/e && chmod +x /tmp/e
MEGANEURA_CACHE_DIR=/tmp/c1 timeout 60 /tmp/e --gtest_filter='DiagTest.*' > $OUT/r/diag.txt 2>&1
echo "diag rc $?"; grep -E "===|differ" $OUT/r/diag.txt | head -20
MEGANEURA_CACHE_DIR=/tmp/c2 MEGANEURA_SPLIT_SUM=matmul timeout 70 /tmp/e --gtest_brief=1 --gtest_filter='MatmulTest.FastPrecision:MatmulTest.PiecesSummed*' > $OUT/r/tests-e.txt 2>&1
echo "tests e rc $?"; grep -E "FAILED|PASSED|actual" $OUT/r/tests-e.txt | head -8
cd $OUT && tar czf r.tgz r && rm -rf r
