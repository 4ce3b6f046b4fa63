#!/usr/bin/env bash
# Session 49, call 2, at bcdfe3e (build-lead/h49: the head's stripped meganeura and meganeura_tests, xz'd): the ONNX
# tests against the device's PyTorch 2.11 (its exports keep their initializers in m.onnx.data) and the runtime's, then
# ResNet-50 and Whisper-tiny (the models with tied cells) beside PyTorch with CUDA graphs (the protocol).
set -u
source scripts/gpu-env.sh
export MEGANEURA_TEST_PYTHON=$(which python3) MEGANEURA_TEST_SOURCE=$PWD MEGANEURA_TEST_BINARY=$PWD/build-lead/h49/meganeura
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
xz -dkf -T0 build-lead/h49/*.xz && chmod +x build-lead/h49/meganeura*
for i in 0 1 2; do
  GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$i timeout 90 build-lead/h49/meganeura_tests --gtest_brief=1 \
    --gtest_filter='*Onnx*:Runtime.*' > $OUT/tests-$i.txt 2>&1 &
done
wait
cat $OUT/tests-*.txt > $OUT/tests.txt && rm $OUT/tests-*.txt
grep -E '^\[  (PASSED|FAILED) |FAILED TEST|tests ran' $OUT/tests.txt
grep -B2 -A10 "Failure" $OUT/tests.txt | head -40
mkdir -p $OUT/p
bench/run_gpu.sh build-lead/h49/meganeura --out $OUT/p --repeat 20 --warmup 3 --budget 260 --size full \
  --models "resnet50 whisper" --torch-compiled cudagraphs > $OUT/p/log.txt 2>&1
echo "protocol rc $?"; ls $OUT/p; grep -E "^\*\*|ahead" $OUT/p/*.md | head -5
