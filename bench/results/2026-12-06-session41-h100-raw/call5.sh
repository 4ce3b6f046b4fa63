#!/usr/bin/env bash
# Session 41, call 5 (session 40's call 7, which found no device time left): ResNet-50's cold compiles as the protocol meets them (meganeura bench, its first compiles in the
# process), h39 (53409e4: shaders, then pipelines) against x44 (cb7b92a: the kernels pass), two rounds.
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0
for f in build-lead/h39/*.xz build-lead/x44/meganeura.xz; do xz -dkf -T0 $f; chmod +x ${f%.xz}; done
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
for r in 1 2; do for p in strict fast; do for b in h39 x44; do
  echo "$r $p $b $(timeout 90 build-lead/$b/meganeura bench --model resnet50 --precision $p --repeat 3 --warmup 1 --out-dir /tmp/rb-$p 2>&1 | grep -E '^compile' | tr '\n' ' ')" >> $OUT/resnet50-compile.txt
done; done; done
cat $OUT/resnet50-compile.txt
