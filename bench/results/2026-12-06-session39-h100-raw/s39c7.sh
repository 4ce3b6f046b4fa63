#!/usr/bin/env bash
# Session 39, call 7: generate's host work a token (logits read without allocations, branch-free greedy) against the
# GEMV's subgroup sums alone; decode beside PyTorch for the faster.
set -u
for d in build-lead/n39 build-lead/g39; do for f in $d/*.xz; do xz -dkf -T0 $f; chmod +x ${f%.xz}; done; done
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0
python3 scratch/decode_ab.py sg=build-lead/n39/meganeura host=build-lead/g39/meganeura sgfast=build-lead/n39/meganeura%fast hostfast=build-lead/g39/meganeura%fast > $OUT/decode-ab.txt 2>&1
sg=$(awk '/^sg:/{print $3}' $OUT/decode-ab.txt); host=$(awk '/^host:/{print $3}' $OUT/decode-ab.txt)
if python3 -c "import sys; sys.exit(0 if float('$host') < float('$sg') else 1)"; then
  mkdir -p build && cp build-lead/g39/meganeura build/meganeura
  timeout 200 bench/decode_bench.sh build-lead/g39/meganeura --no-gpu-env --json $OUT/decode-strict.json > $OUT/decode-strict.txt 2>&1
fi
