#!/usr/bin/env bash
# Session 47, call 2. k48 = the working tree: the blocked f32 attention forward reading its keys as quads of
# neighbours (KEY_QUADS; MN_X_KEYQUADS=0: the floats of the head), its attention tests on the GPU, then Whisper's and
# SmolLM2's strict cells with and without, and with 128-key tiles; then the ready batches again (x48: head vs W=10), 3 rounds.
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
for d in k48 x48; do xz -dkf -T0 build-lead/$d/*.xz && chmod +x build-lead/$d/meganeura build-lead/$d/meganeura_tests; done
timeout 150 build-lead/k48/meganeura_tests --gtest_brief=1 --gtest_filter="Attention*:*/Attention*" > $OUT/r/tests.txt 2>&1
echo "tests rc $?"; grep -E 'FAILED|tests ran|PASSED|Failure' $OUT/r/tests.txt | head -30
KERNELS=8 MODELS="whisper smollm2" PRECISIONS="strict" ROUNDS=2 REPEAT=15 timeout 200 scripts/h200_ab.sh $OUT/r/abkq \
  floats=build-lead/k48@MN_X_KEYQUADS=0 quads=build-lead/k48 quads128=build-lead/k48@MEGANEURA_ATTENTION_TILES=64,16,128 > $OUT/r/abkq.log 2>&1
echo "abkq rc $?"; grep -E "whisper|smollm2" $OUT/r/abkq/ab.md | cut -c1-200
KERNELS=6 MODELS="smollm2" PRECISIONS="fast strict" ROUNDS=3 REPEAT=15 timeout 200 scripts/h200_ab.sh $OUT/r/abready \
  head=build-lead/x48 w10=build-lead/x48@MN_X_READY=10 > $OUT/r/abready.log 2>&1
echo "abready rc $?"; grep -E "training|step" $OUT/r/abready/ab.md | cut -c1-200
