#!/usr/bin/env bash
# SmolLM2-135M fine-tuning and generation on the GPU machine (issue 16, item 8): `meganeura finetune`
# (LoRA and full) and `meganeura generate` (base and --adapter) beside PyTorch on the same folder, data
# and settings (bench/finetune_bench.py: transformers, PEFT when it imports; training eager and
# torch.compile; generate with the dynamic cache and with a static cache compiled), in one call.
#
#   bench/finetune_bench.sh MEGANEURA_BINARY [--out DIR] [--budget 300] [--steps 50] [--warmup 10]
#                           [--batch 8] [--seq 256] [--max-new 128] [--repeat 3] [--size full|tiny]
#                           [--text-kb 300] [--precision strict|fast] [--no-gpu-env]
#
# --precision fast: meganeura finetune and generate in precision fast (their products on cooperative matrices where the
# device has them), PyTorch with TF32 matmuls, as run_gpu.sh's fast cells; strict (the default): f32 on both sides.
#
# Run from anywhere; it works in the repository root and sources scripts/gpu-env.sh (--no-gpu-env:
# not, to try it on a development machine with --size tiny; PYTHON=/usr/bin/python3 there). The model
# folder, the data and every log go to a scratch folder ($BENCH_WORK, else a new one under /tmp). It
# writes DIR/finetune.json (every number) and DIR/finetune.md (the table, notes, command, commit; DIR
# defaults to bench/results/YYYY-MM-DD-finetune-h200), and prints the table.
#
# Order: the folder (random weights, the tests' tokenizer: no network), meganeura (LoRA, full, then
# generate --repeat processes each for the base and the adapter the LoRA run wrote), PyTorch eager
# (LoRA, full, generate), then the compiled PyTorch jobs in three processes at once (LoRA, full,
# static-cache generate): they compile side by side, wait for each other, and time one at a time.
# Every step is a subprocess with a time limit: its cap or what is left of --budget before the
# report's last REPORT_SECONDS, whichever is less; SIGKILL 5 s after SIGTERM (run_gpu.sh saw PyTorch
# ignore SIGTERM while compiling). What did not run shows as "—" with the reason in the notes.
set -u -o pipefail

usage() { sed -n '7,9p' "$0" | sed 's/^# *//'; exit 2; }
[ $# -ge 1 ] || usage
BINARY=$(realpath "$1"); shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="" BUDGET=300 STEPS=50 WARMUP=10 BATCH=8 SEQ=256 MAX_NEW=128 REPEAT=3 SIZE=full TEXT_KB=300 GPU_ENV=1
PRECISION=strict
RANK=8 TARGETS=q_proj,k_proj,v_proj,o_proj
REPORT_SECONDS=10
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$(realpath -m "$2"); shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --seq) SEQ=$2; shift 2 ;;
    --max-new) MAX_NEW=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --text-kb) TEXT_KB=$2; shift 2 ;;
    --precision) PRECISION=$2; shift 2 ;;
    --no-gpu-env) GPU_ENV=0; shift ;;
    *) usage ;;
  esac
done
case "$PRECISION" in strict|fast) ;; *) echo "finetune_bench.sh: --precision is strict or fast" >&2; exit 2 ;; esac
[ -x "$BINARY" ] || { echo "finetune_bench.sh: $BINARY is not an executable" >&2; exit 2; }
[ "$WARMUP" -ge 1 ] && [ "$WARMUP" -lt "$STEPS" ] || { echo "finetune_bench.sh: need 1 <= --warmup < --steps" >&2; exit 2; }
STAMP=$(date -u +%Y-%m-%d)
OUT=${OUT:-$ROOT/bench/results/$STAMP-finetune-h200}
COMMAND="bench/finetune_bench.sh $(basename "$BINARY") --budget $BUDGET --steps $STEPS --warmup $WARMUP --batch $BATCH --seq $SEQ --max-new $MAX_NEW --repeat $REPEAT --size $SIZE --text-kb $TEXT_KB --precision $PRECISION"
PYTHON=${PYTHON:-python3}
START=$(date +%s)
DEADLINE=$((START + BUDGET - REPORT_SECONDS))
# shellcheck source=budget.sh
source "$ROOT/bench/budget.sh"

cd "$ROOT"
if [ "$GPU_ENV" = 1 ]; then
  # shellcheck source=../scripts/gpu-env.sh
  source scripts/gpu-env.sh
fi
WORK=${BENCH_WORK:-$(mktemp -d /tmp/meganeura-finetune-XXXXXX)}
mkdir -p "$WORK"
rm -rf "$WORK"/mn-* "$WORK"/torch-* "$WORK/rendezvous"  # nothing from an earlier run in $BENCH_WORK
export TORCHINDUCTOR_CACHE_DIR="$WORK/inductor-cache" TRITON_CACHE_DIR="$WORK/triton-cache"
NOTES="$WORK/notes.txt"
: > "$NOTES"

MODEL="$WORK/model"
step "prepare" 90 "$WORK/prepare.log" "$PYTHON" bench/finetune_bench.py prepare "$WORK" --size "$SIZE" --text-kb "$TEXT_KB" || exit 1
step "tokenize" 30 "$WORK/tokenize.log" sh -c "'$BINARY' tokenize -m '$MODEL' --file '$WORK/data.txt' > '$WORK/ids.txt' &&
  '$BINARY' tokenize -m '$MODEL' --file '$WORK/prompt.txt' > '$WORK/prompt_ids.txt'" || exit 1

TRAIN=(--steps "$STEPS" --batch "$BATCH" --seq "$SEQ" --precision "$PRECISION")
LORA=(--lora-rank "$RANK" --lora-targets "$TARGETS")
step "meganeura LoRA" 120 "$WORK/mn-lora.log" "$BINARY" finetune -m "$MODEL" --data "$WORK/data.txt" --out "$WORK/mn-lora" "${TRAIN[@]}" "${LORA[@]}"
step "meganeura full" 120 "$WORK/mn-full.log" "$BINARY" finetune -m "$MODEL" --data "$WORK/data.txt" --out "$WORK/mn-full" "${TRAIN[@]}"
PROMPT=$(cat "$WORK/prompt.txt")
for i in $(seq "$REPEAT"); do
  step "meganeura generate $i" 60 "$WORK/mn-generate-base-$i.log" \
    "$BINARY" generate -m "$MODEL" --prompt "$PROMPT" --max-new "$MAX_NEW" --ignore-eos --precision "$PRECISION"
  if [ -s "$WORK/mn-lora/adapter_model.safetensors" ]; then
    step "meganeura generate --adapter $i" 60 "$WORK/mn-generate-adapter-$i.log" \
      "$BINARY" generate -m "$MODEL" --adapter "$WORK/mn-lora" --prompt "$PROMPT" --max-new "$MAX_NEW" --ignore-eos --precision "$PRECISION"
  fi
done

TORCH=(--steps "$STEPS" --warmup "$WARMUP" --batch "$BATCH" --seq "$SEQ" --lora-rank "$RANK" --lora-targets "$TARGETS"
       --max-new "$MAX_NEW" --repeat "$REPEAT" --deadline "$DEADLINE" --precision "$PRECISION")
for job in lora full generate; do
  step "PyTorch $job eager" 120 "$WORK/torch-$job-eager.log" "$PYTHON" bench/finetune_bench.py torch "$WORK" --job "$job" --mode eager "${TORCH[@]}"
done

# The compiled jobs at once: compiling is minutes of CPU each, timing seconds of GPU.
t=$(left)
if [ "$t" -gt 20 ]; then
  echo "== PyTorch compiled: lora, full, generate-static at once (limit $t s)"
  mkdir -p "$WORK/rendezvous"
  declare -A pids
  for job in lora full generate-static; do
    timeout -k 5 "$t" "$PYTHON" bench/finetune_bench.py torch "$WORK" --job "$job" --mode compile "${TORCH[@]}" \
      --processes 3 --rendezvous "$WORK/rendezvous" > "$WORK/torch-$job-compile.log" 2>&1 &
    pids[$job]=$!
  done
  for job in lora full generate-static; do
    wait "${pids[$job]}"
    status=$?
    tail -n 2 "$WORK/torch-$job-compile.log"
    [ $status -eq 0 ] || echo "- PyTorch $job compile: exit status $status$([ $status -ge 124 ] && echo ', past its time limit'): $(tail -n 1 "$WORK/torch-$job-compile.log")" >> "$NOTES"
  done
else
  echo "- PyTorch compiled: not run, out of time" >> "$NOTES"
fi

COMMIT=${MEGANEURA_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}
DEVICE=$("$BINARY" devices 2>/dev/null | head -n 1)
timeout -k 5 60 "$PYTHON" bench/finetune_bench.py report "$WORK" --out "$OUT" --warmup "$WARMUP" \
  --meta "date=$STAMP" --meta "commit=$COMMIT" --meta "command=$COMMAND" --meta "device=$DEVICE" \
  --meta "precision=$PRECISION" --meta "lora_rank=$RANK" --meta "lora_targets=$TARGETS" --meta "batch=$BATCH" --meta "seq=$SEQ" --meta "steps=$STEPS" \
  --meta "warmup=$WARMUP" --meta "max_new=$MAX_NEW" --meta "wall time=$(( $(date +%s) - START )) s" --notes "$NOTES"
echo "written: $OUT/finetune.md and $OUT/finetune.json (work in $WORK)"
