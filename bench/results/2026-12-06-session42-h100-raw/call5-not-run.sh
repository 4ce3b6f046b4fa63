#!/usr/bin/env bash
# Session 42 call 5: the f32 product's operands read along K (row-major A, B^T) transposed in registers by subgroup
# shuffles before one vec4 shared store (MN_X_SHUF=32, experiment build s42), against the 4 scalar stores.
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0
mkdir -p /tmp/s42 $OUT/r && tar xJf build-lead/s42/s42.tar.xz -C /tmp/s42
for v in "" 32; do
  echo "== MN_X_SHUF=$v"
  MN_X_SHUF=$v LD_LIBRARY_PATH=/tmp/s42 timeout 40 /tmp/s42/matmul_bench --runs 8 --only "layout probe,Whisper,square 4096,SmolLM2 mlp" > $OUT/r/mb-shuf$v.md 2>&1
  echo "rc $?"; grep -E "probe|Whisper|4096|SmolLM2" $OUT/r/mb-shuf$v.md | cut -d'|' -f2-7
done
MODELS=whisper PRECISIONS=strict ROUNDS=1 REPEAT=15 timeout 90 scripts/h200_ab.sh $OUT/r/ab base=/tmp/s42 shuf=/tmp/s42@MN_X_SHUF=32 > /dev/null 2>&1
echo "ab rc $?"; cut -c1-160 $OUT/r/ab/ab.md | head -8
cd $OUT && tar czf r.tgz r && rm -rf r
