#!/usr/bin/env bash
# Session 51, call 2: build-lead/fw against the head (h51): the cooperative attention gradients' accumulators at
# module scope (the head's, local arrays, sit in local memory: STL/LDL every tile) and the forward's S and P V
# products as independent accumulators (the head's reuse one: a serial chain of HMMAs). The driver's code (pipeline
# cache, read back here with nvdisasm), the fast attention GPU tests, Whisper fast by kernel.
set -u
source scripts/gpu-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
B=build-lead/h51 N=build-lead/fw
for f in $B/*.xz $N/*.xz; do xz -dkf -T0 $f && chmod +x ${f%.xz}; done
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
rm -rf /tmp/mncache; mkdir -p /tmp/mncache
MEGANEURA_CACHE_DIR=/tmp/mncache timeout 60 $N/meganeura bench --model whisper --precision fast --size full \
  --repeat 2 --warmup 1 > /dev/null 2>&1
tar czf $OUT/cache-fw.tgz -C /tmp/mncache $(cd /tmp/mncache && ls *.bin); ls -la $OUT/cache-fw.tgz
MODELS=whisper PRECISIONS=fast ROUNDS=1 KERNELS=6 GPU_ENV=0 scripts/h200_ab.sh $OUT/ab head=$B fw=$N > /dev/null 2>&1
cut -c1-900 $OUT/ab/ab.md
timeout 90 $N/meganeura_tests --gtest_filter='*AttentionFast*:*AttentionGpu.Fast*' > $OUT/tests.txt 2>&1
echo "tests rc $?"; grep -E "^\[  (PASSED|FAILED)|tests ran" $OUT/tests.txt | head -20
