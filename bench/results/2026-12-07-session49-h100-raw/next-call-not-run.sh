#!/usr/bin/env bash
# Not run (session 49's device time was spent). For the next session's first call, from the repository root with
# build-lead/h49/ holding the head's stripped Release `meganeura` and `meganeura_tests` (xz'd), carried with .gl: the
# three models whose protocol cells were last run in session 37 (SmolLM2-135M, SmolVLA's expert, the U-Net) beside
# PyTorch with CUDA graphs, then every GPU test (scripts/h200_tests.sh: 8 shards, ~3 minutes on the H100).
set -u
source scripts/gpu-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
xz -dkf -T0 build-lead/h49/*.xz && chmod +x build-lead/h49/meganeura*
mkdir -p $OUT/p $OUT/t
bench/run_gpu.sh build-lead/h49/meganeura --out $OUT/p --repeat 20 --warmup 3 --budget 330 --size full \
  --models "smollm2 smolvla sd_unet" --torch-compiled cudagraphs > $OUT/p/log.txt 2>&1
echo "protocol rc $?"; grep -E "^\*\*" $OUT/p/*.md
MEGANEURA_TEST_PYTHON=$(which python3) scripts/h200_tests.sh build-lead/h49/meganeura_tests '*' $OUT/t
