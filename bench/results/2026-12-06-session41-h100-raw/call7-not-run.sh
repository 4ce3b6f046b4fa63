#!/usr/bin/env bash
# Session 41 call 7: the matmul guard lifted, last_piece's shared flag declared before the cooperative code (not after
# it): does the one-element shift of the element-by-element stores go?
set -u
source scripts/gpu-env.sh
xz -dc build-lead/s41/meganeura_tests.xz > /tmp/t; chmod +x /tmp/t
mkdir -p $OUT/r
MEGANEURA_CACHE_DIR=/tmp/c1 /tmp/t --gtest_filter='DiagTest.*' > $OUT/r/diag.txt 2>&1
echo "diag rc $?"; grep -E "===|differ" $OUT/r/diag.txt
MEGANEURA_CACHE_DIR=/tmp/c2 MEGANEURA_SPLIT_SUM=matmul timeout 70 /tmp/t --gtest_brief=1 --gtest_filter='MatmulTest.FastPrecision:MatmulTest.PiecesSummed*' > $OUT/r/tests.txt 2>&1
echo "tests rc $?"; grep -E "FAILED|PASSED|actual" $OUT/r/tests.txt | head -8
cd $OUT && tar czf r.tgz r && rm -rf r
