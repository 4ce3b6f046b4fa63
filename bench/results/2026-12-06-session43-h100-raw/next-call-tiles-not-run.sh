#!/usr/bin/env bash
# Not run (session 43 had no device time left): with A and B^T staged as rows the f32 product's registers grew
# (Whisper's mlp, both operands in rows: 0.0718 -> 0.0778 ms beside A's rows alone), and the 128 x 128 tile held
# 155-161 registers a thread before (one workgroup a compute unit). Forced geometries that need fewer: 8-deep slices,
# 8 x 4 a thread (512 threads), 128 x 64; and 32-deep slices (one stage) for the other side. Needs, in
# build-lead/h44/h44.tar.xz, the head's matmul_bench, libmeganeura.so.0.1, libprotobuf.so.32 and meganeura
# (README: examples against an installed prefix, -DCMAKE_BUILD_RPATH='$ORIGIN').
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0
mkdir -p /tmp/h44 $OUT/r && tar xJf build-lead/h44/h44.tar.xz -C /tmp/h44
for tile in "" "128/8:2" "128@8x4" "128x64" "128/32"; do
  echo "== MEGANEURA_MATMUL_TILE=$tile"
  MEGANEURA_MATMUL_TILE=$tile LD_LIBRARY_PATH=/tmp/h44 timeout 60 /tmp/h44/matmul_bench --runs 8 \
    --only "layout probe,Whisper,square 4096,SmolLM2" > "$OUT/r/mb-${tile//\//_}.md" 2>&1
  echo "rc $?"; grep -E "probe|Whisper|4096|SmolLM2" "$OUT/r/mb-${tile//\//_}.md" | cut -d'|' -f2-7
done
# Then the best against the default in the models: scripts/h200_ab.sh DIR base=/tmp/h44 "t=/tmp/h44@MEGANEURA_MATMUL_TILE=..."
cd $OUT && tar czf r.tgz r && rm -rf r
