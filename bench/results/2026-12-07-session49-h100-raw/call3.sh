#!/usr/bin/env bash
# Session 49, call 3 (h49 = bcdfe3e): the ONNX tests with tests/torch/onnx_models.py exporting through the TorchScript
# exporter where PyTorch has dynamo (2.11 here), and ResNet-50 beside PyTorch again (its fast cells moved most).
set -u
source scripts/gpu-env.sh
export MEGANEURA_TEST_PYTHON=$(which python3) MEGANEURA_TEST_SOURCE=$PWD MEGANEURA_TEST_BINARY=$PWD/build-lead/h49/meganeura
xz -dkf -T0 build-lead/h49/*.xz && chmod +x build-lead/h49/meganeura*
for i in 0 1 2; do
  GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$i timeout 90 build-lead/h49/meganeura_tests --gtest_brief=1 \
    --gtest_filter='*Onnx*' > $OUT/tests-$i.txt 2>&1 &
done
wait
cat $OUT/tests-*.txt > $OUT/tests.txt && rm $OUT/tests-*.txt
grep -E '^\[  (PASSED|FAILED) |FAILED TEST|tests ran' $OUT/tests.txt
grep -B2 -A10 "Failure" $OUT/tests.txt | head -30
mkdir -p $OUT/p
bench/run_gpu.sh build-lead/h49/meganeura --out $OUT/p --repeat 20 --warmup 3 --budget 170 --size full \
  --models "resnet50" --torch-compiled cudagraphs > $OUT/p/log.txt 2>&1
echo "protocol rc $?"; grep -E "^\*\*|^\| resnet50 \| fast" $OUT/p/*.md | cut -c1-200
