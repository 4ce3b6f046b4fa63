#!/usr/bin/env bash
# The evaluation protocol on the GPU machine (../shared/DEVICE.md): the five workloads at both
# precisions, meganeura and PyTorch (eager and torch.compile) side by side, in one call.
#
#   bench/run_gpu.sh MEGANEURA_BINARY [--out DIR] [--repeat 20] [--warmup 3] [--budget 570]
#                    [--models "smollm2 smolvla sd_unet resnet50 whisper"] [--size full] [--no-gpu-env]
#                    [--compile-jobs 3] [--reserve 150]
#
# Run from anywhere; it works in the repository root, sources scripts/gpu-env.sh (the Vulkan loader
# carried in .gl/), and keeps the cells (weights, inputs, outputs: gigabytes) in a scratch folder
# ($BENCH_WORK, else a new folder under /tmp). --no-gpu-env skips scripts/gpu-env.sh, to try the
# script on a development machine (lavapipe; PYTHON=/usr/bin/python3 there). It prints the comparison table and writes
# DIR/YYYY-MM-DD-h200.md (commit, command, table, raw JSON; DIR defaults to bench/results).
#
# Order, so that running out of --budget seconds loses the least: meganeura for every cell, then
# PyTorch eager for every cell (which also writes the reference outputs the gates need), then the
# torch.compile first compiles (--compile-jobs processes at once, into one fresh inductor cache;
# their times are reported as cold), then torch.compile timing for every cell (warm compiles), strict
# before fast. Every step gets only the time that is left (the first compiles leave --reserve
# seconds); what did not run shows as "—" and is listed in the notes.
set -u -o pipefail

usage() { sed -n '4,6p' "$0" | sed 's/^# *//'; exit 2; }
[ $# -ge 1 ] || usage
BINARY=$(realpath "$1"); shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/bench/results" REPEAT=20 WARMUP=3 BUDGET=570 SIZE=full COMPILE_JOBS=3 RESERVE=150
MODELS="smollm2 smolvla sd_unet resnet50 whisper" GPU_ENV=1
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$(realpath -m "$2"); shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --compile-jobs) COMPILE_JOBS=$2; shift 2 ;;
    --reserve) RESERVE=$2; shift 2 ;;
    --no-gpu-env) GPU_ENV=0; shift ;;
    *) usage ;;
  esac
done
[ -x "$BINARY" ] || { echo "run_gpu.sh: $BINARY is not an executable" >&2; exit 2; }
COMMAND="bench/run_gpu.sh $(basename "$BINARY") --repeat $REPEAT --warmup $WARMUP --budget $BUDGET --size $SIZE --models \"$MODELS\" --compile-jobs $COMPILE_JOBS --reserve $RESERVE"
PYTHON=${PYTHON:-python3}
START=$(date +%s)
DEADLINE=$((START + BUDGET))
left() { echo $((DEADLINE - $(date +%s))); }

cd "$ROOT"
if [ "$GPU_ENV" = 1 ]; then
  # shellcheck source=../scripts/gpu-env.sh
  source scripts/gpu-env.sh
fi
WORK=${BENCH_WORK:-$(mktemp -d /tmp/meganeura-bench-XXXXXX)}
mkdir -p "$WORK" "$OUT"
export TORCHINDUCTOR_CACHE_DIR="$WORK/inductor-cache" TRITON_CACHE_DIR="$WORK/triton-cache"
NOTES="$WORK/notes.txt"
: > "$NOTES"

CELLS=()
for precision in strict fast; do
  for model in $MODELS; do
    CELLS+=("$WORK/$model-$precision")
  done
done

echo "== meganeura ($(left) s left)"
for cell in "${CELLS[@]}"; do
  name=$(basename "$cell") model=${name%-*} precision=${name##*-}
  t=$(left)
  if [ "$t" -le 10 ]; then echo "- $name meganeura: not run, out of time" >> "$NOTES"; continue; fi
  mkdir -p "$cell"
  rm -f "$cell"/torch-*.json "$cell"/*.safetensors  # nothing from an earlier run in $BENCH_WORK
  if ! timeout "$t" "$BINARY" bench --model "$model" --precision "$precision" --size "$SIZE" \
      --repeat "$REPEAT" --warmup "$WARMUP" --out-dir "$cell" --json "$cell/meganeura.json" > "$cell/meganeura.log" 2>&1; then
    echo "- $name meganeura failed: $(tail -n 1 "$cell/meganeura.log")" >> "$NOTES"
    [ -s "$cell/meganeura.json" ] || rm -f "$cell/meganeura.json"
  fi
  cat "$cell/meganeura.log"
done

READY=()
for cell in "${CELLS[@]}"; do [ -s "$cell/meganeura.json" ] && READY+=("$cell"); done

torch_pass() {  # torch_pass MODE [EXTRA ARGS]: one torch_bench.py process over every ready cell
  local mode=$1 t; shift
  t=$(left)
  echo "== PyTorch $mode $* ($t s left)"
  if [ "${#READY[@]}" -eq 0 ] || [ "$t" -le 10 ]; then echo "- PyTorch $mode: not run" >> "$NOTES"; return; fi
  timeout "$t" "$PYTHON" bench/torch_bench.py --mode "$mode" --repeat "$REPEAT" --warmup "$WARMUP" \
    --deadline "$DEADLINE" "$@" "${READY[@]}" || echo "- PyTorch $mode: exit status $? (see the cells' reports)" >> "$NOTES"
}

# torch.compile is the slow part (minutes per model, cold). Its graphs are compiled first by
# COMPILE_JOBS processes at once, one model's strict and fast cells in the same process (the second
# reuses the first's kernels), filling the shared inductor cache; then the timing pass compiles warm.
# No timing runs while they compile. Compiling stops starting new cells RESERVE seconds before the
# deadline, so the timing pass keeps time to run.
compile_warmup() {
  local t=$(( $(left) - RESERVE )) jobs=() i=0 model cells
  echo "== torch.compile, first compiles, $COMPILE_JOBS at once ($(left) s left)"
  [ "$t" -gt 30 ] || { echo "- torch.compile first compiles: not run, out of time" >> "$NOTES"; return; }
  "$PYTHON" -c 'import sys, torch; sys.exit(not hasattr(torch, "compile"))' || return 0  # the timing pass says why
  for model in $MODELS; do
    cells=()
    for precision in strict fast; do
      [ -s "$WORK/$model-$precision/meganeura.json" ] && cells+=("$WORK/$model-$precision")
    done
    [ "${#cells[@]}" -gt 0 ] && jobs[i % COMPILE_JOBS]+=" ${cells[*]}" && i=$((i + 1))
  done
  for group in "${jobs[@]}"; do
    # shellcheck disable=SC2086  # the group is a space-separated list of cell folders (no spaces inside)
    timeout "$t" "$PYTHON" bench/torch_bench.py --mode compile --compile-only --concurrent "${#jobs[@]}" \
      --deadline $(( DEADLINE - RESERVE )) $group &
  done
  wait
}

torch_pass eager
compile_warmup
torch_pass compile

STAMP=$(date -u +%Y-%m-%d)
REPORT="$OUT/$STAMP-h200.md"
TABLE=$("$PYTHON" bench/compare.py "$WORK" --json "$WORK/gates.json")
COMMIT=${MEGANEURA_COMMIT:-$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)}
{
  echo "# meganeura vs PyTorch on the H200, $STAMP"
  echo
  echo "- commit: \`$COMMIT\`"
  echo "- command: \`$COMMAND\`"
  echo "- device: $(grep -h -m1 '"device"' "$WORK"/*/meganeura.json 2>/dev/null | head -n1 | sed 's/.*: "\(.*\)".*/\1/')"
  echo "- PyTorch: $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null); inductor cache fresh at the start of the run"
  echo "- wall time of the whole run: $(( $(date +%s) - START )) s"
  echo
  echo "$TABLE"
  if [ -s "$NOTES" ]; then echo; echo "### Run notes"; echo; cat "$NOTES"; fi
  echo
  echo "<details><summary>raw JSON</summary>"
  echo
  for cell in "${CELLS[@]}"; do
    for f in meganeura.json torch-eager.json torch-compile.json; do
      [ -s "$cell/$f" ] || continue
      echo "#### $(basename "$cell")/$f"; echo; echo '```json'; cat "$cell/$f"; echo '```'; echo
    done
  done
  echo "#### gates.json"; echo; echo '```json'; cat "$WORK/gates.json" 2>/dev/null; echo '```'
  echo
  echo "</details>"
} > "$REPORT"
echo "$TABLE"
[ -s "$NOTES" ] && cat "$NOTES"
echo "written: $REPORT (cells in $WORK)"
