#!/usr/bin/env bash
# The cooperative attention backward (src/codegen/attention_coop_backward.cpp) on the H200, in one call:
# its tests (the validation layer is not installed there), then Whisper-tiny's fast training with the
# cooperative backward and with the f32 one (MEGANEURA_FAST_GRADIENTS=f32 keeps the backward f32, and the
# convolutions' input gradients too; the forward stays cooperative), each printing its top kernels
# (attention_grad_q_coop and attention_grad_kv_coop against attention_grad_q and attention_grad_kv),
# and the choices and registers per thread of the attention kernels.
#
#   scripts/h200_attention_backward.sh [DIR]     from the repository root; DIR defaults to $OUT, else /tmp/attn
#
# Passing: every test OK (on the H200 AttentionFastBackward runs the cooperative kernels, within 2e-3 of
# float64; an f16 emulation of its cases gives <= 5.6e-4), and the cooperative dQ + dK/dV of a training
# step well under the f32 kernels' 1.52 + 1.98 ms (issue 14 asks for the backward <= 2.5x the forward's
# 0.47 ms, so <= ~1.2 ms).
set -u -o pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-env.sh
DIR=${1:-${OUT:-/tmp/attn}}
mkdir -p "$DIR"
MEGANEURA_VALIDATE=0 build/meganeura_tests --gtest_brief=1 \
    --gtest_filter='*AttentionFast*:AttentionGpu.Fast*:AttentionCoopSource.*:CapsProfiles.FastAttention*:*AttentionBackward*' \
    2>&1 | tee "$DIR/tests.txt" | tail -40
for gradients in auto f32; do
    echo "== whisper fast training, MEGANEURA_FAST_GRADIENTS=$gradients"
    MEGANEURA_VALIDATE=0 MEGANEURA_FAST_GRADIENTS=$gradients timeout 200 build/meganeura bench --model whisper \
        --precision fast --repeat 10 --warmup 3 --out-dir "$DIR/whisper-$gradients" 2>&1 | tee "$DIR/whisper-$gradients.txt"
done
echo "== choices and registers (MEGANEURA_DEBUG=1 MEGANEURA_PIPELINE_STATISTICS=1)"
MEGANEURA_VALIDATE=0 MEGANEURA_DEBUG=1 MEGANEURA_PIPELINE_STATISTICS=1 timeout 120 build/meganeura bench --model whisper \
    --precision fast --repeat 1 --warmup 1 --out-dir "$DIR/whisper-debug" > "$DIR/debug.txt" 2>&1
grep -A1 -E '^  attention' "$DIR/debug.txt" | grep -E '^  attention|^    driver' | head -60
