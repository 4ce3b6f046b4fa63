#!/usr/bin/env bash
# On the H200 (one device call, ~220 s): which gradient products precision fast should put on the cooperative
# kernels (MEGANEURA_FAST_GRADIENTS=auto, the default, against f16: every gradient product scaled f16), with the
# split forward products of before_piecewise_gradients.
#   scripts/h200_fast_gradients.sh BUILD_DIR OUT_DIR
# 1. the split and self-test tests; 2. fast training and step of the five models under both settings;
# 3. the gates of ResNet-50, Whisper and SmolLM2-135M under f16 against PyTorch eager's float64 reference.
set -u
cd "$(dirname "$0")/.."
B=$1 OUT=$2 CELLS=/tmp/cells
source scripts/gpu-env.sh
echo "== tests"; date
MEGANEURA_VALIDATE=0 timeout 60 "$B"/meganeura_tests --gtest_brief=1 \
  --gtest_filter='*SplitForward*:MatmulTest.CooperativeSelfTest:MatmulPrecisionPolicy.*' 2>&1 | tail -8
for m in resnet50 whisper smollm2 sd_unet smolvla; do
  for g in auto f16; do
    echo "== $m fast, MEGANEURA_FAST_GRADIENTS=$g"; date
    mkdir -p "$CELLS/$m-$g"
    MEGANEURA_FAST_GRADIENTS=$g timeout 100 "$B"/meganeura bench --model "$m" --precision fast --repeat 5 --warmup 2 \
      --out-dir "$CELLS/$m-$g" --json "$CELLS/$m-$g/meganeura.json" > "$OUT/$m-$g.txt" 2>&1
    grep -E "^(training|step)|top kernels \(training|error" "$OUT/$m-$g.txt" | cut -c1-400
  done
done
echo "== gates under MEGANEURA_FAST_GRADIENTS=f16"; date
timeout 120 python3 bench/torch_bench.py --mode eager --repeat 3 --warmup 1 "$CELLS"/resnet50-f16 "$CELLS"/whisper-f16 \
  "$CELLS"/smollm2-f16 > "$OUT/eager.txt" 2>&1 || tail -5 "$OUT/eager.txt"
timeout 90 python3 bench/compare.py "$CELLS"/resnet50-f16 "$CELLS"/whisper-f16 "$CELLS"/smollm2-f16 --json "$OUT/gates.json" 2>&1 |
  grep -E "gates|pass|FAIL" | cut -c1-300 | head -20
date
