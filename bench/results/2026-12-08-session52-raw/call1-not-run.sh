#!/usr/bin/env bash
# Session 52, call 1: build-lead/fw (head + accumulators-in-registers.patch) and fw2 (that, with every S and dP
# product of the three kernels interleaved over column blocks) against the head (h51):
# its driver code (cache), the fast attention GPU tests, Whisper fast A/B by kernel; then the 4096^3 coop matmul's code.
set -u
source scripts/gpu-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
B=build-lead/h51 F=build-lead/fw N=build-lead/fw2 M=build-lead/mm
for f in $B/*.xz $F/*.xz $N/*.xz $M/*.xz; do xz -dkf -T0 $f && chmod +x ${f%.xz}; done
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
rm -rf /tmp/mncache; mkdir -p /tmp/mncache
MEGANEURA_CACHE_DIR=/tmp/mncache timeout 60 $N/meganeura bench --model whisper --precision fast --size full \
  --repeat 2 --warmup 1 > /dev/null 2>&1
tar czf $OUT/cache-fw.tgz -C /tmp/mncache $(cd /tmp/mncache && ls *.bin); ls -la $OUT/cache-fw.tgz
timeout 90 $N/meganeura_tests --gtest_filter='*AttentionFast*:*AttentionGpu.Fast*:*AttentionCoop*' > $OUT/tests.txt 2>&1
echo "tests rc $?"; grep -E "^\[  (PASSED|FAILED)|tests ran" $OUT/tests.txt | head -20
MODELS=whisper PRECISIONS=fast ROUNDS=1 KERNELS=6 GPU_ENV=0 timeout 300 scripts/h200_ab.sh $OUT/ab head=$B fw=$F fw2=$N > /dev/null 2>&1
cut -c1-900 $OUT/ab/ab.md
rm -rf /tmp/mmcache; mkdir -p /tmp/mmcache
MEGANEURA_CACHE_DIR=/tmp/mmcache LD_LIBRARY_PATH=$M timeout 100 $M/matmul_bench --runs 10 --f16 --only "square 4096" > $OUT/mm.txt 2>&1
echo "mm rc $?"; tail -8 $OUT/mm.txt
tar czf $OUT/cache-mm.tgz -C /tmp/mmcache $(cd /tmp/mmcache && ls *.bin); ls -la $OUT/cache-mm.tgz
LD_LIBRARY_PATH=$M timeout 150 $M/matmul_bench --runs 8 --f16 --only "square 4096,Whisper mlp" \
  --coop-tiles "128,128,64,32,64,1;128,128,64,64,32,2;128,128,64,64,64,1;128,256,64,64,32,1;256,128,64,64,32,1;128,128,32,64,32,2" \
  > $OUT/mm-tiles.txt 2>&1; echo "tiles rc $?"; tail -12 $OUT/mm-tiles.txt | cut -c1-400
