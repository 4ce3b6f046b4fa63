#!/usr/bin/env bash
# Session 42 call 4: g42 = f42 + the flag counted in the tile's shared memory (a tile that fills it sums in a
# dispatch): the fast tests under MEGANEURA_SPLIT_SUM=product, then the default.
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
xz -dc build-lead/g42/meganeura_tests.xz > /tmp/g && chmod +x /tmp/g
mkdir -p build && xz -dc build-lead/g42/meganeura.xz > build/meganeura && chmod +x build/meganeura
export MEGANEURA_TEST_PYTHON=$(which python3)
F='MatmulTest.*:ConvOpsTest.*:FusionTest.EpiloguesInFastPrecision:*Fast*:CoopSharedOrder.*:DiagTest.*'
start=$(date +%s)
MEGANEURA_SPLIT_SUM=product MEGANEURA_CACHE_DIR=/tmp/cp timeout 200 /tmp/g --gtest_brief=1 --gtest_filter="$F" > $OUT/r/tests-product.txt 2>&1
echo "tests product rc $? in $(( $(date +%s) - start )) s"; grep -E "^\[  (PASSED|FAILED) |tests? ran|differ" $OUT/r/tests-product.txt | head -20
start=$(date +%s)
MEGANEURA_CACHE_DIR=/tmp/cd timeout 200 /tmp/g --gtest_brief=1 --gtest_filter="$F" > $OUT/r/tests-default.txt 2>&1
echo "tests default rc $? in $(( $(date +%s) - start )) s"; grep -E "^\[  (PASSED|FAILED) |tests? ran" $OUT/r/tests-default.txt | head -20
cd $OUT && tar czf r.tgz r && rm -rf r
