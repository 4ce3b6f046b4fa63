#!/usr/bin/env bash
# Not run (session 45: no device time left to start a machine). For the next device session: n46 = the head's
# Release build (`meganeura` and `meganeura_tests`, stripped, xz'd into build-lead/n46/), l43 = session 43's binary
# (ad7f34c). The cooperative tests of what landed (the stores by quads as q1c, never run as the head's own code), then
# ResNet-50, Whisper and the U-Net (3f312c8: its upsampling read by the concatenation) fast, n46 against l43.
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r build && xz -dkf build-lead/n46/*.xz && chmod +x build-lead/n46/meganeura build-lead/n46/meganeura_tests
timeout 100 build-lead/n46/meganeura_tests --gtest_brief=1 \
  --gtest_filter="MatmulTest.*:FusionTest.*:ConvOpsTest.*:OpsTest.*:CoopShared*" > $OUT/r/tests.txt 2>&1
echo "tests rc $?"; grep -E 'FAILED|tests ran|PASSED' $OUT/r/tests.txt | head -20
KERNELS=6 MODELS="resnet50 whisper sd_unet" PRECISIONS="fast" ROUNDS=1 REPEAT=15 timeout 200 scripts/h200_ab.sh $OUT/r/abe \
  base=build-lead/l43 n46=build-lead/n46 > $OUT/r/abe.log 2>&1
echo "abe rc $?"; cut -c1-300 $OUT/r/abe/ab.md
