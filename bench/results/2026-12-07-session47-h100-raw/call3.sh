#!/usr/bin/env bash
# Session 47, call 3. b47 = 510e162 + MN_X_BK=<slice>:<stages> (the f32 64 x 64 tile's K-slice and stages, where the
# cost chose it; default 16:1). The small products of SmolLM2 (M = 128) wait on memory a 16-deep slice at a time:
# deeper slices put more loads in flight. matmul_bench, the GPU matmul/conv tests with 32:2, then the strict cells.
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p /tmp/b47 $OUT/r && tar xJf build-lead/b47/b47.tar.xz -C /tmp/b47
for v in 16:1 32:1 32:2 64:1; do
  MN_X_BK=$v LD_LIBRARY_PATH=/tmp/b47 timeout 60 /tmp/b47/matmul_bench --runs 8 --only "SmolLM2,Whisper,square 4096" > "$OUT/r/mb-$v.md" 2>&1
  echo "== $v rc $?"; grep -E "SmolLM2|Whisper|4096" "$OUT/r/mb-$v.md" | cut -d'|' -f2-5
done
MN_X_BK=32:2 timeout 90 /tmp/b47/meganeura_tests --gtest_brief=1 --gtest_filter="MatmulTest.*:ConvOpsTest.*:FusionTest.*" > $OUT/r/tests.txt 2>&1
echo "tests rc $?"; grep -E 'FAILED|tests ran|PASSED|Failure' $OUT/r/tests.txt | head -10
MODELS="smollm2 whisper resnet50" PRECISIONS=strict ROUNDS=1 REPEAT=15 timeout 240 scripts/h200_ab.sh $OUT/r/ab \
  base=/tmp/b47 s32=/tmp/b47@MN_X_BK=32:1 s32x2=/tmp/b47@MN_X_BK=32:2 s64=/tmp/b47@MN_X_BK=64:1 > $OUT/r/ab.log 2>&1
echo "ab rc $?"; cut -c1-200 $OUT/r/ab/ab.md | grep -E "smollm2|whisper|resnet50"
