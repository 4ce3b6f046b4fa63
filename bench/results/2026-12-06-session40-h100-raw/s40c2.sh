#!/usr/bin/env bash
# Session 40, call 2: the compile passes' times on the device, a trace of Whisper's strict workloads, fine-tuning in
# precision fast beside PyTorch (binary x40 = 09348f9 with an unset experiment switch).
set -u
export MEGANEURA_VALIDATE=0
for f in build-lead/x4[01]/*.xz; do xz -dkf -T0 $f; chmod +x ${f%.xz}; done
B=build-lead/x40/meganeura
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
for m in resnet50 whisper smollm2; do for p in strict fast; do
  MEGANEURA_DEBUG=1 timeout 60 $B bench --model $m --precision $p --compile-only --out-dir /tmp/cc-$m-$p > /tmp/cc-$m-$p.log 2>&1
  grep -E "^compile|passes|shaders compiled" /tmp/cc-$m-$p.log > $OUT/compile-$m-$p.txt
  grep "(pipeline [0-9.]* ms)" /tmp/cc-$m-$p.log | sed -E 's/^ +([^ ]+) .*\(pipeline ([0-9.]+) ms\).*/\2 \1/' | sort -g -r > $OUT/pipelines-$m-$p.txt
done; done
# Cold compiles: x40 (shaders, then pipelines) against x41 (each pipeline queued as its shader is compiled), in turns
for r in 1 2 3; do for m in "resnet50 fast" "resnet50 strict" "smollm2 fast" "whisper strict"; do set -- $m; for b in x40 x41; do
  echo "$r $1 $2 $b $(MEGANEURA_DEBUG=1 timeout 60 build-lead/$b/meganeura bench --model $1 --precision $2 --compile-only --out-dir /tmp/ab-$1-$2 2>&1 | grep -E '^compile|cold passes' | tr '\n' ' ')" >> $OUT/compile-ab.txt
done; done; done
MEGANEURA_TRACE=/tmp/w.json timeout 120 $B bench --model whisper --precision strict --repeat 10 --warmup 2 --out-dir /tmp/wt > $OUT/whisper-strict-bench.txt 2>&1
python3 scripts/trace_dispatches.py /tmp/w.json --top 80 > $OUT/trace-whisper-strict.txt 2>&1
mkdir -p build && cp $B build/meganeura
BENCH_WORK=/tmp/ft timeout 290 bench/finetune_bench.sh $B --out $OUT/ft-fast --budget 275 --precision fast --no-gpu-env > $OUT/ft-fast.log 2>&1
