#!/usr/bin/env bash
# Session 48, last try: the GPU tests at t48 but the attention and model ones, cut to fit the device time left.
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
export MEGANEURA_TEST_SOURCE=$PWD MEGANEURA_TEST_BINARY=$PWD/build-lead/t48/meganeura
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r && xz -dkf -T0 build-lead/t48/*.xz && chmod +x build-lead/t48/meganeura*
timeout 200 build-lead/t48/meganeura_tests --gtest_brief=1 --gtest_filter='-Attention*:*/Attention*:Models/*:Optimizers/*' > $OUT/r/tests.txt 2>&1
echo "tests rc $?"; grep -E '^\[  (PASSED|FAILED) |FAILED TEST|tests ran' $OUT/r/tests.txt | head -20
grep -h -B2 -A12 "Failure" $OUT/r/tests.txt | head -60
