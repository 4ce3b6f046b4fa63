#!/usr/bin/env bash
# On the H200 (one device call, ~400 s): split forward products (Tuning::split_forward) in precision fast.
#   scripts/h200_split_forward.sh BUILD_DIR OUT_DIR
# 1. the cooperative kernels' tests (split, f16 and scaled products against float64);
# 2. fast training and step of ResNet-50, Whisper and SmolLM2-135M with split forward products and with f16
#    ones (MEGANEURA_FAST_FORWARD=split|f16), side by side;
# 3. the protocol for ResNet-50 (bench/run_gpu.sh): its fast gate with split products, beside PyTorch.
set -u
cd "$(dirname "$0")/.."
B=$1 OUT=$2
source scripts/gpu-env.sh
echo "== tests"; date
MEGANEURA_VALIDATE=0 timeout 60 "$B"/meganeura_tests --gtest_filter='*SplitForward*:MatmulTest.CooperativeSelfTest' 2>&1 | tail -25
MEGANEURA_VALIDATE=0 timeout 150 "$B"/meganeura_tests --gtest_brief=1 \
  --gtest_filter='Matmul*:ConvOps*:ConvCoop*:F16Weights*:AttentionFast*' 2>&1 | tail -25
for m in resnet50 whisper smollm2; do
  for forward in split f16; do
    echo "== $m fast, MEGANEURA_FAST_FORWARD=$forward"; date
    MEGANEURA_FAST_FORWARD=$forward timeout 120 "$B"/meganeura bench --model "$m" --precision fast --repeat 10 --warmup 3 \
      --out-dir "/tmp/$m-$forward" > "$OUT/$m-$forward.txt" 2>&1
    grep -E "^(training|step)|top kernels \(training" "$OUT/$m-$forward.txt" | cut -c1-500
  done
done
echo "== resnet50 fast, split forward, MEGANEURA_FAST_GRADIENTS=f16"; date
MEGANEURA_FAST_GRADIENTS=f16 timeout 120 "$B"/meganeura bench --model resnet50 --precision fast --repeat 10 --warmup 3 \
  --out-dir /tmp/r-g16 > "$OUT/resnet50-split-g16.txt" 2>&1
grep -E "^(training|step)|top kernels \(training" "$OUT/resnet50-split-g16.txt" | cut -c1-500
for p in strict fast; do
  echo "== smolvla $p (its bench failed on the H200 before fc8fede)"; date
  timeout 120 "$B"/meganeura bench --model smolvla --precision $p --repeat 10 --warmup 3 --out-dir /tmp/vla-$p 2>&1 |
    grep -E "^(inference|latency|training|step)|error" | cut -c1-300
done
echo "== the ResNet-50 protocol"; date
MEGANEURA_COMMIT=$(cat "$B"/COMMIT) BENCH_WORK=/tmp/bw bench/run_gpu.sh "$B"/meganeura --out "$OUT" --budget 170 \
  --models resnet50 2>&1 | tail -40
date
