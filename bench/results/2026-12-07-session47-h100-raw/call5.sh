#!/usr/bin/env bash
# Session 47, call 5. n47 = the working tree: batched updates by quads evaluate their tree once on vec4s, and a member
# by quads weighs 4 against a batch's 64 (Whisper's AdamW in 3 dispatches, not 1 of 43 members). h47 = 510e162.
# Cold compiles (--compile-only), then the GPU tests of the batches, then a short A/B.
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
for d in h47 n47; do xz -dkf -T0 build-lead/$d/*.xz && chmod +x build-lead/$d/meganeura*; done
for m in "whisper strict" "smollm2 fast" "resnet50 fast"; do set -- $m
  for d in h47 n47; do
    timeout 60 build-lead/$d/meganeura bench --model $1 --precision $2 --compile-only --json $OUT/r/compile-$d-$1-$2.json > $OUT/r/compile-$d-$1-$2.txt 2>&1
    echo "$d $1 $2 rc $? $(python3 -c "import json,sys; c=json.load(open('$OUT/r/compile-$d-$1-$2.json'))['compile']; print({w: round(c[w]['cold_ms']) for w in c})" 2>&1 | tail -1)"
  done
done
timeout 80 build-lead/n47/meganeura_tests --gtest_brief=1 --gtest_filter="FusionTest.Batched*:FusionTest.Updates*:FusionTest.ColumnSums*:TrainTest.AdamW*:TrainTest.Sgd*" > $OUT/r/tests.txt 2>&1
echo "tests rc $?"; grep -E 'FAILED|tests ran|PASSED|Failure' $OUT/r/tests.txt | head -10
MODELS="smollm2" PRECISIONS="fast" ROUNDS=1 REPEAT=15 timeout 60 scripts/h200_ab.sh $OUT/r/ab head=build-lead/h47 new=build-lead/n47 > $OUT/r/ab.log 2>&1
echo "ab rc $?"; grep -E "step|training" $OUT/r/ab/ab.md | cut -c1-250
