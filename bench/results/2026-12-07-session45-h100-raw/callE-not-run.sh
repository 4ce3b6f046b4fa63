#!/usr/bin/env bash
# Session 45 call E: n46 (16cafef: quads landed, the batch of BN-scaled weights, reductions' own sums): cooperative tests,
# then ResNet-50 and Whisper fast, n46 vs l43.
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r build && xz -dkf build-lead/n46/*.xz && chmod +x build-lead/n46/meganeura build-lead/n46/meganeura_tests && cp build-lead/n46/meganeura build/
timeout 100 build-lead/n46/meganeura_tests --gtest_brief=1 \
  --gtest_filter="MatmulTest.*:FusionTest.*:ConvOpsTest.*:OpsTest.*:CoopShared*" > $OUT/r/tests.txt 2>&1
echo "tests rc $?"; grep -E 'FAILED|tests ran|PASSED' $OUT/r/tests.txt | head -20
KERNELS=6 MODELS="resnet50 whisper" PRECISIONS="fast" ROUNDS=1 REPEAT=15 timeout 110 scripts/h200_ab.sh $OUT/r/abe \
  base=build-lead/l43 n46=build-lead/n46 > $OUT/r/abe.log 2>&1
echo "abe rc $?"; cut -c1-300 $OUT/r/abe/ab.md
