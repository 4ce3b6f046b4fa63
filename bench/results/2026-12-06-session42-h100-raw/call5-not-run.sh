#!/usr/bin/env bash
# Session 42 call 5 (not run: no device time left): the f32 product's operands read along K (row-major A, B^T)
# transposed in registers by subgroup shuffles before one vec4 shared store (MN_X_SHUF=32), against the 4 scalar
# stores; and Whisper's dS stored keys-major for dQ's matmul (MN_X_DST=1). Build s42 from the head with both patches
# (call5-shuffle-transpose-not-run.patch, call5-scores-keys-major-not-run.patch), matmul_bench and libmeganeura.so
# beside the meganeura binary in build-lead/s42/s42.tar.xz.
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0
mkdir -p /tmp/s42 $OUT/r && tar xJf build-lead/s42/s42.tar.xz -C /tmp/s42
for v in "" 32; do
  echo "== MN_X_SHUF=$v"
  MN_X_SHUF=$v LD_LIBRARY_PATH=/tmp/s42 timeout 40 /tmp/s42/matmul_bench --runs 8 --only "layout probe,Whisper,square 4096,SmolLM2 mlp" > $OUT/r/mb-shuf$v.md 2>&1
  echo "rc $?"; grep -E "probe|Whisper|4096|SmolLM2" $OUT/r/mb-shuf$v.md | cut -d'|' -f2-7
done
MODELS=whisper PRECISIONS=strict ROUNDS=1 REPEAT=15 timeout 150 scripts/h200_ab.sh $OUT/r/ab base=/tmp/s42 shuf=/tmp/s42@MN_X_SHUF=32 \
  dst=/tmp/s42@MN_X_DST=1 "both=/tmp/s42@MN_X_SHUF=32 MN_X_DST=1" > /dev/null 2>&1
echo "ab rc $?"; cut -c1-160 $OUT/r/ab/ab.md | head -8
cd $OUT && tar czf r.tgz r && rm -rf r
