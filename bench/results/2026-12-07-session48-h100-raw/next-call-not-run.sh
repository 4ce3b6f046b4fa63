#!/usr/bin/env bash
# Not run (session 48: the failed starts of most asks spent the device time; call3.sh ran a part of the tests). For the next
# session's first call, from the repository root with build-lead/t48/ holding the head's stripped Release `meganeura` and
# `meganeura_tests` (xz'd), carried with .gl: the GPU tests but the attention and model ones (the vec4 trees of c4e32f8
# have run only FusionTest's batch tests on a GPU), Whisper's strict training trace, and its forward's key chunks forced
# to 2, 3 and 6 (the rule's 4).
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r/t1 && xz -dkf -T0 build-lead/t48/*.xz && chmod +x build-lead/t48/meganeura*
scripts/h200_tests.sh build-lead/t48/meganeura_tests '-Attention*:*/Attention*:Models/*:Optimizers/*' $OUT/r/t1
grep -h -B2 -A12 "Failure" $OUT/r/t1/tests.txt | head -60
timeout 60 build-lead/t48/meganeura bench --model whisper --precision strict --repeat 15 --warmup 3 --out-dir /tmp/wb \
  --json $OUT/r/whisper-strict.json > $OUT/r/whisper-strict.log 2>&1; echo "bench rc $?"
cp /tmp/wb/trace-training.json $OUT/r/ 2>/dev/null; ls $OUT/r
KERNELS=4 MODELS=whisper PRECISIONS=strict ROUNDS=1 REPEAT=15 timeout 100 scripts/h200_ab.sh $OUT/r/splits head=build-lead/t48 \
  s2=build-lead/t48@MEGANEURA_ATTENTION_SPLITS=2 s3=build-lead/t48@MEGANEURA_ATTENTION_SPLITS=3 \
  s6=build-lead/t48@MEGANEURA_ATTENTION_SPLITS=6 > $OUT/r/splits.log 2>&1
echo "splits rc $?"; grep -E "inference|training" $OUT/r/splits/ab.md | tr '|' '\n' | cut -c1-160
