#!/usr/bin/env bash
# Session 41 call 6: the scaled cooperative products with one barrier a slice (two stages) and their maxima noted after
# the product (one stage): the tests that run the scaled kernels at every forced tile, then an A/B against x44 (cb7b92a).
set -u
source scripts/gpu-env.sh
xz -dkf build-lead/s41/meganeura_tests.xz; chmod +x build-lead/s41/meganeura_tests
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 build-lead/s41/meganeura_tests --gtest_brief=1 --gtest_filter='MatmulTest.*:ConvOpsTest.*Fast*:ConvOpsTest.SplitForward*:FinetuneTest.FastPrecisionFollowsStrict:FusionTest.EpiloguesInFastPrecision' > $OUT/r/tests.txt 2>&1
echo "tests rc $?"; grep -E "FAILED|PASSED|tests from" $OUT/r/tests.txt | tail -8
MODELS="smollm2 smolvla resnet50 whisper" PRECISIONS=fast ROUNDS=1 scripts/h200_ab.sh $OUT/r/ab base=build-lead/x44 new=build-lead/s41 > $OUT/r/ab.log 2>&1
cat $OUT/r/ab/ab.md
cd $OUT && tar czf r.tgz r && rm -rf r
