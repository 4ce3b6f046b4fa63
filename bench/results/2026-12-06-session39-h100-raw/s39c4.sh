#!/usr/bin/env bash
# Session 39, call 4: decode split counts and GEMV loads a thread, at the GEMV's subgroup sums; the decode trace.
set -u
for d in build-lead/n39 build-lead/exp; do for f in $d/*.xz; do xz -dkf -T0 $f; chmod +x ${f%.xz}; done; done
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0
N=build-lead/n39/meganeura E=build-lead/exp/meganeura
python3 scratch/decode_ab.py new=$N s32=$N@MEGANEURA_ATTENTION_SPLITS=32 s16=$N@MEGANEURA_ATTENTION_SPLITS=16 \
  u8=$E@MEGANEURA_EXP_GEMV_UNROLL=8 u2=$E@MEGANEURA_EXP_GEMV_UNROLL=2 > $OUT/decode-ab.txt 2>&1
IDS=$(python3 -c "import random; random.seed(1); print(','.join(str(random.randrange(49152)) for _ in range(4056)))")
MEGANEURA_TRACE=/tmp/dec.json timeout 200 $N generate --model smollm2 --size full --tokens "$IDS" --max-new 40 --ignore-eos > /dev/null 2>&1
python3 scripts/trace_dispatches.py /tmp/dec.json --top 40 > $OUT/decode-trace.txt 2>&1
