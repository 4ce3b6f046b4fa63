#!/usr/bin/env bash
# Session 42 call 3: the cooperative products summing their own split-K pieces with last_piece's flag declared before
# the cooperative code, matmul and convolution (f42: the guards lifted): the diagnostic, the fast tests under
# MEGANEURA_SPLIT_SUM=product, and ResNet-50 / Whisper fast with the sums in the products against the dispatch.
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
xz -dc build-lead/f42/meganeura_tests.xz > /tmp/f && chmod +x /tmp/f
mkdir -p build && xz -dc build-lead/f42/meganeura.xz > build/meganeura && chmod +x build/meganeura
export MEGANEURA_TEST_PYTHON=$(which python3)
for coop in khr nv; do
  MEGANEURA_COOP=$coop MEGANEURA_CACHE_DIR=/tmp/c-$coop timeout 60 /tmp/f --gtest_filter='DiagTest.*' > $OUT/r/diag-$coop.txt 2>&1
  echo "diag $coop rc $?"; grep -E "===|differ" $OUT/r/diag-$coop.txt | head -10
done
start=$(date +%s)
MEGANEURA_SPLIT_SUM=product MEGANEURA_CACHE_DIR=/tmp/cp timeout 240 /tmp/f --gtest_brief=1 --gtest_filter='MatmulTest.*:ConvOpsTest.*:FusionTest.EpiloguesInFastPrecision:*Fast*:CoopSharedOrder.*' > $OUT/r/tests-product.txt 2>&1
echo "tests product rc $? in $(( $(date +%s) - start )) s"; grep -E "^\[  (PASSED|FAILED) |tests? ran" $OUT/r/tests-product.txt | head -20
mkdir -p /tmp/f42 && cp build/meganeura /tmp/f42/
MODELS="resnet50 whisper" PRECISIONS=fast ROUNDS=1 REPEAT=20 scripts/h200_ab.sh $OUT/r/ab dispatch=/tmp/f42 product=/tmp/f42@MEGANEURA_SPLIT_SUM=matmul > /dev/null 2>&1
echo "ab rc $?"; cut -c1-300 $OUT/r/ab/ab.md | head -12
cd $OUT && tar czf r.tgz r && rm -rf r
