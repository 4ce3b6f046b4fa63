#!/usr/bin/env bash
# Session 39, call 1: the combine's level (empty combine), decode strict vs fast, finetune strict vs fast, GPU tests.
set -u
for d in build-lead/h39 build-lead/exp; do for f in $d/*.xz; do xz -dkf -T0 $f; chmod +x ${f%.xz}; done; done
mkdir -p build && cp build-lead/h39/meganeura build/meganeura
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
python3 scratch/decode_ab.py head=build-lead/h39/meganeura empty=build-lead/exp/meganeura@MEGANEURA_EXP_EMPTY_COMBINE=1 \
  fast=build-lead/h39/meganeura%fast > $OUT/decode-ab.txt 2>&1
for p in strict fast; do
  BENCH_WORK=/tmp/ft-$p timeout 150 bench/finetune_bench.sh build-lead/h39/meganeura --out $OUT/ft-$p --budget 110 --precision $p --no-gpu-env > $OUT/ft-$p.log 2>&1
  for f in /tmp/ft-$p/mn-*.log; do cp $f $OUT/$p-$(basename $f); done
done
scripts/h200_tests.sh build-lead/h39/meganeura_tests '*KvCache*:*Finetune*:*CliErrors*:*Generat*' $OUT > $OUT/verdict.txt 2>&1
