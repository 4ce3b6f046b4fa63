#!/usr/bin/env bash
# Session 40, call 3: where a SmolLM2 fine-tuning step's time goes in precision fast (LoRA and full, MEGANEURA_TRACE),
# and the kernels pass (x42: pipelines by priority as their shaders compile) against x40 (shaders, then pipelines).
set -u
export MEGANEURA_VALIDATE=0
for f in build-lead/x4[02]/*.xz; do xz -dkf -T0 $f; chmod +x ${f%.xz}; done
B=build-lead/x42/meganeura
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
for r in 1 2 3; do for m in "resnet50 fast" "resnet50 strict" "smollm2 fast" "smollm2 strict" "whisper strict" "sd_unet fast"; do set -- $m; for b in x40 x42; do
  echo "$r $1 $2 $b $(timeout 60 build-lead/$b/meganeura bench --model $1 --precision $2 --compile-only --out-dir /tmp/ab-$1-$2 2>&1 | grep -E '^compile|cold passes' | tr '\n' ' ')" >> $OUT/compile-ab.txt
done; done; done
W=/tmp/ft3
mkdir -p $W
python3 bench/finetune_bench.py prepare $W --size full --text-kb 300 > $W/prepare.log 2>&1
for kind in lora full; do
  extra=(); [ $kind = lora ] && extra=(--lora-rank 8 --lora-targets q_proj,k_proj,v_proj,o_proj)
  MEGANEURA_TRACE=$W/$kind.json timeout 120 $B finetune -m $W/model --data $W/data.txt --out $W/out-$kind --steps 12 \
    --batch 8 --seq 256 --precision fast "${extra[@]}" > $W/$kind.log 2>&1
  python3 scripts/trace_dispatches.py $W/$kind.json --top 50 > $W/trace-$kind.txt 2>&1
done
cd $W && tar czf $OUT/results.tgz *.log trace-*.txt
