#!/usr/bin/env bash
# Session 40, call 6: generate's start with an adapter, x43 (bea404a: merged, weights read and set one at a time) against
# x44 (cb7b92a: one transfer each way); the session, checkpoint, fine-tune and generate tests on the H100.
set -u
export MEGANEURA_VALIDATE=0
for f in build-lead/x4[34]/*.xz; do xz -dkf -T0 $f; chmod +x ${f%.xz}; done
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
W=/tmp/ft6
mkdir -p $W
python3 bench/finetune_bench.py prepare $W --size full --text-kb 300 > $W/prepare.log 2>&1
build-lead/x44/meganeura finetune -m $W/model --data $W/data.txt --out $W/lora --steps 3 --batch 8 --seq 256 --precision fast \
  --lora-rank 8 --lora-targets q_proj,k_proj,v_proj,o_proj > $W/lora.log 2>&1
PROMPT=$(cat $W/prompt.txt)
for r in 1 2 3 4; do for b in x43 x44; do for a in base adapter; do
  extra=(); [ $a = adapter ] && extra=(--adapter $W/lora)
  start=$(date +%s.%N)
  line=$(build-lead/$b/meganeura generate -m $W/model --prompt "$PROMPT" --max-new 128 --ignore-eos --precision fast "${extra[@]}" 2>&1 | grep "prompt eval")
  end=$(date +%s.%N)
  echo "$r fast $b $a wall $(awk "BEGIN{print $end - $start}") s | $line" >> $OUT/generate-ab.txt
done; done; done
mkdir -p build && cp build-lead/x44/meganeura build/meganeura
MEGANEURA_TEST_PYTHON=$(which python3) scripts/h200_tests.sh build-lead/x44/meganeura_tests \
  'SessionErrorsTest.*:FrozenTest.*:*Finetune*:*Generate*:*Checkpoint*:TrainTest.*:JobQueue.*:CompileTest.*' $OUT > $OUT/verdict.txt 2>&1
