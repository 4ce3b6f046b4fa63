#!/usr/bin/env bash
# Session 43 call 1: the f32 product's operands read along K: transposed by subgroup shuffles (MN_X_SHUF=32) or A kept
# in rows (MN_X_AROWS=1, 4 k's a vec4, no transpose; B^T too, swizzled: MN_X_BROWS=1); Whisper's dS stored keys-major (MN_X_DST=1).
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p /tmp/s43 $OUT/r && tar xJf build-lead/s43/s43.tar.xz -C /tmp/s43
for v in MN_X_NONE=1 "MN_X_SHUF=32" "MN_X_AROWS=1" "MN_X_AROWS=1 MN_X_BROWS=1" "MN_X_AROWS=1 MN_X_SHUF=32"; do
  echo "== $v"
  env $v LD_LIBRARY_PATH=/tmp/s43 timeout 60 /tmp/s43/matmul_bench --runs 8 --only "layout probe,Whisper,square 4096,SmolLM2" > "$OUT/r/mb-${v// /_}.md" 2>&1
  echo "rc $?"; grep -E "probe|Whisper|4096|SmolLM2" "$OUT/r/mb-${v// /_}.md" | cut -d'|' -f2-7
done
MODELS=whisper PRECISIONS=strict ROUNDS=1 REPEAT=15 timeout 200 scripts/h200_ab.sh $OUT/r/ab base=/tmp/s43 shuf=/tmp/s43@MN_X_SHUF=32 \
  "rows=/tmp/s43@MN_X_AROWS=1 MN_X_BROWS=1" dst=/tmp/s43@MN_X_DST=1 "rowsdst=/tmp/s43@MN_X_AROWS=1 MN_X_BROWS=1 MN_X_DST=1" > /dev/null 2>&1
echo "ab rc $?"; cut -c1-220 $OUT/r/ab/ab.md | head -30
MODELS="smollm2 resnet50" PRECISIONS=strict ROUNDS=1 REPEAT=15 timeout 150 scripts/h200_ab.sh $OUT/r/ab2 base=/tmp/s43 shuf=/tmp/s43@MN_X_SHUF=32 \
  "rows=/tmp/s43@MN_X_AROWS=1 MN_X_BROWS=1" > /dev/null 2>&1
echo "ab2 rc $?"; cut -c1-220 $OUT/r/ab2/ab.md | head -30
cd $OUT && tar czf r.tgz r && rm -rf r
