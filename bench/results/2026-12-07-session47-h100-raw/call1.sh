#!/usr/bin/env bash
# Session 47, call 1. The batched updates cut where their gradients become ready
# (ready-batches-experiment-not-run.patch, on cd82b5c, behind MN_X_READY=W: the members sorted by the level of their
# inputs' last writer, a new dispatch W levels after the first member's). SmolLM2's last `adamw x 64` (level 607 of
# 608) holds ~53M parameters today; with W=10 it holds the embedding's ~28M and 24 more dispatches run beside the
# backward (1040 -> 1060 dispatches, levels unchanged; W=30: 1045, W=60: 1040). x48 = that tree's Release build
# (`meganeura` and `meganeura_tests`, stripped, xz'd into build-lead/x48/); first the GPU tests of the head itself
# (call4-not-run.sh's, never run: the quads at 128 wide, the column sums together).
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r && xz -dkf -T0 build-lead/x48/*.xz && chmod +x build-lead/x48/meganeura build-lead/x48/meganeura_tests
timeout 200 build-lead/x48/meganeura_tests --gtest_brief=1 --gtest_filter="FusionTest.*:TrainTest.*" > $OUT/r/tests.txt 2>&1
echo "tests rc $?"; grep -E 'FAILED|tests ran|PASSED|Failure' $OUT/r/tests.txt | head -30
KERNELS=6 MODELS="smollm2 whisper" PRECISIONS="fast strict" ROUNDS=2 REPEAT=15 timeout 380 scripts/h200_ab.sh $OUT/r/abready \
  head=build-lead/x48 w10=build-lead/x48@MN_X_READY=10 w30=build-lead/x48@MN_X_READY=30 > $OUT/r/abready.log 2>&1
echo "abready rc $?"; grep -E "training|step" $OUT/r/abready/ab.md | cut -c1-300
