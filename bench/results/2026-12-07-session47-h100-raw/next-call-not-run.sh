#!/usr/bin/env bash
# Not run (session 47: no device time left). For the next session's first call, from the repository root with
# build-lead/h48/ holding the head's stripped Release `meganeura` and `meganeura_tests` (xz'd), carried with .gl.
# 1. The GPU test suite, which scripts/h200_tests.sh can now run whole there (tests find their scripts and the CLI
#    through MEGANEURA_TEST_SOURCE / MEGANEURA_TEST_BINARY), in two parts under its 300 s limit: the vec4 trees of
#    the batched updates (c4e32f8) have run only FusionTest's batch tests on a GPU.
# 2. The attention gradients' chunks added by their last chunk (MEGANEURA_SPLIT_SUM=attention) in training, never
#    timed: one level a layer fewer (H200 profile: SmolLM2's step 608 -> 548 levels, under issue 15's 574; Whisper
#    83 -> 79; SmolVLA 322 -> 314). Decode was slower that way (session 38); training is the question.
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r/t1 $OUT/r/t2 && xz -dkf -T0 build-lead/h48/*.xz && chmod +x build-lead/h48/meganeura*
if [ "${1:-}" = tests ]; then
  scripts/h200_tests.sh build-lead/h48/meganeura_tests '-Attention*:*/Attention*:Models/*:Optimizers/*' $OUT/r/t1
  scripts/h200_tests.sh build-lead/h48/meganeura_tests 'Attention*:*/Attention*:Models/*' $OUT/r/t2
else
  MODELS="smollm2 whisper smolvla" PRECISIONS="strict fast" ROUNDS=2 REPEAT=15 timeout 480 scripts/h200_ab.sh $OUT/r/ab \
    head=build-lead/h48 asum=build-lead/h48@MEGANEURA_SPLIT_SUM=attention > $OUT/r/ab.log 2>&1
  echo "ab rc $?"; grep -E "training|step" $OUT/r/ab/ab.md | cut -c1-250
fi
