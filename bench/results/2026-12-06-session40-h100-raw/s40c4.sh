#!/usr/bin/env bash
# Session 40, call 4: generate with and without a LoRA adapter, before (x40 = 09348f9) and after (x43 = bea404a) the
# adapter's merge into the weights; precision fast and strict, SmolLM2-135M (random weights), 427-token prompt.
set -u
export MEGANEURA_VALIDATE=0
for f in build-lead/x4[03]/*.xz; do xz -dkf -T0 $f; chmod +x ${f%.xz}; done
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
W=/tmp/ft4
mkdir -p $W
python3 bench/finetune_bench.py prepare $W --size full --text-kb 300 > $W/prepare.log 2>&1
build-lead/x43/meganeura finetune -m $W/model --data $W/data.txt --out $W/lora --steps 5 --batch 8 --seq 256 --precision fast \
  --lora-rank 8 --lora-targets q_proj,k_proj,v_proj,o_proj > $W/lora.log 2>&1
PROMPT=$(cat $W/prompt.txt)
for r in 1 2 3; do for p in fast strict; do for b in x40 x43; do for a in base adapter; do
  extra=(); [ $a = adapter ] && extra=(--adapter $W/lora)
  start=$(date +%s.%N)
  line=$(build-lead/$b/meganeura generate -m $W/model --prompt "$PROMPT" --max-new 128 --ignore-eos --precision $p "${extra[@]}" 2>&1 | grep "prompt eval")
  end=$(date +%s.%N)
  echo "$r $p $b $a wall $(awk "BEGIN{print $end - $start}") s | $line" >> $OUT/generate-ab.txt
done; done; done; done
