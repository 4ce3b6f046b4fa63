#!/usr/bin/env bash
# Not run: refused, too little device time left to start a machine (session 46).
# Session 46 call 4: the GPU tests of r47 (q47 with BatchedUpdatesMatchTheirOwnKernelsBitForBit also 128 wide, its
# members by quads).
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
xz -dkf -T0 build-lead/r47/*.xz && chmod +x build-lead/r47/meganeura build-lead/r47/meganeura_tests
timeout 200 build-lead/r47/meganeura_tests --gtest_brief=1 --gtest_filter="FusionTest.*:TrainTest.*:HoistTest.*" > $OUT/r/tests-r47.txt 2>&1
echo "tests r47 rc $?"; grep -E 'FAILED|tests ran|PASSED|Failure' $OUT/r/tests-r47.txt | head -30
