#!/usr/bin/env bash
# The evaluation protocol on the GPU machine (../shared/DEVICE.md): the five workloads at both
# precisions, meganeura and PyTorch (eager, torch.compile, torch.compile with CUDA graphs) side by
# side, with the floors and the gates, in one call.
#
#   bench/run_gpu.sh MEGANEURA_BINARY [--out DIR] [--repeat 20] [--warmup 3] [--budget 570]
#                    [--models "smollm2 smolvla sd_unet resnet50 whisper"] [--size full] [--no-gpu-env]
#                    [--torch-warm-compile] [--torch-compiled cudagraphs,compile]
#
# Run from anywhere; it works in the repository root, sources scripts/gpu-env.sh (the Vulkan loader
# carried in .gl/), and keeps the cells (weights, inputs, outputs: gigabytes) in a scratch folder
# ($BENCH_WORK, else a new folder under /tmp). --no-gpu-env skips scripts/gpu-env.sh, to try the
# script on a development machine (lavapipe; PYTHON=/usr/bin/python3 there). It writes
# DIR/YYYY-MM-DD-h200.json (bench/compare.py's records: one per model x precision x workload) and
# DIR/YYYY-MM-DD-h200.md (h100 on an H100: the device's model; commit, command, the table rendered from that JSON, the raw reports; DIR
# defaults to bench/results), and prints the table.
#
# Order, so that running out of --budget seconds loses the least: meganeura for every cell, then
# PyTorch eager for every cell (which also writes the reference outputs the gates need), then the
# compiled configurations: one process per cell, all at once, into one fresh inductor cache, each
# compiling torch.compile(mode="reduce-overhead") (cold) and then default torch.compile (from the
# kernels the first left in the caches), then taking turns timing (see bench/torch_bench.py).
# --torch-warm-compile also compiles both again after the timing (the warm compile times, about
# 10 s more and no timing). --torch-compiled cudagraphs leaves default torch.compile out: the
# fastest PyTorch is torch.compile with CUDA graphs, and SmolLM2-135M's two compiles of a 30-layer
# training step did not fit a 450 s call (2026-12-02).
# Every step gets only the time that is left before the last REPORT_SECONDS of the budget, which are
# the report's; what did not run shows as "—" and is listed in the notes. A step past its time is
# sent SIGTERM, then SIGKILL 5 s later: a run on 2026-12-01 overran its budget by 15 s or more, most
# likely a PyTorch process that did not end on SIGTERM while compiling.
# Leave the device call's own limit a margin, and tee the output into the call's $OUT: a call killed
# at its limit returns nothing else.
set -u -o pipefail

usage() { sed -n '4,6p' "$0" | sed 's/^# *//'; exit 2; }
[ $# -ge 1 ] || usage
BINARY=$(realpath "$1"); shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/bench/results" REPEAT=20 WARMUP=3 BUDGET=570 SIZE=full
REPORT_SECONDS=60  # compare.py reads every cell's outputs (gigabytes for SmolLM2): 41-42 s for ten cells
MODELS="smollm2 smolvla sd_unet resnet50 whisper" GPU_ENV=1 WARM_COMPILE=() COMPILED=cudagraphs,compile
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$(realpath -m "$2"); shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --no-gpu-env) GPU_ENV=0; shift ;;
    --torch-warm-compile) WARM_COMPILE=(--warm-compile); shift ;;
    --torch-compiled) COMPILED=$2; shift 2 ;;
    *) usage ;;
  esac
done
[ -x "$BINARY" ] || { echo "run_gpu.sh: $BINARY is not an executable" >&2; exit 2; }
COMMAND="bench/run_gpu.sh $(basename "$BINARY") --repeat $REPEAT --warmup $WARMUP --budget $BUDGET --size $SIZE --models \"$MODELS\"${WARM_COMPILE:+ --torch-warm-compile} --torch-compiled $COMPILED"
PYTHON=${PYTHON:-python3}
START=$(date +%s)
DEADLINE=$((START + BUDGET - REPORT_SECONDS))
# shellcheck source=budget.sh
source "$ROOT/bench/budget.sh"
STAGES=""  # "stage N s, ...": where the budget went
stage_done() { STAGES+="${STAGES:+, }$1 $(( $(date +%s) - STAGE_START )) s"; STAGE_START=$(date +%s); }

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
STAGE_START=$(date +%s)
for cell in "${CELLS[@]}"; do
  name=$(basename "$cell") model=${name%-*} precision=${name##*-}
  t=$(left)
  if [ "$t" -le 10 ]; then echo "- $name meganeura: not run, out of time" >> "$NOTES"; continue; fi
  mkdir -p "$cell"
  rm -f "$cell"/torch-*.json "$cell"/*.safetensors  # nothing from an earlier run in $BENCH_WORK
  if ! timeout -k 5 "$t" "$BINARY" bench --model "$model" --precision "$precision" --size "$SIZE" \
      --repeat "$REPEAT" --warmup "$WARMUP" --out-dir "$cell" --json "$cell/meganeura.json" > "$cell/meganeura.log" 2>&1; then
    echo "- $name meganeura failed: $(tail -n 1 "$cell/meganeura.log")" >> "$NOTES"
    [ -s "$cell/meganeura.json" ] || rm -f "$cell/meganeura.json"
  fi
  cat "$cell/meganeura.log"
done

stage_done meganeura

READY=()
for cell in "${CELLS[@]}"; do [ -s "$cell/meganeura.json" ] && READY+=("$cell"); done

torch_pass() {  # torch_pass MODE [EXTRA ARGS]: one torch_bench.py process over every ready cell
  local mode=$1 t; shift
  t=$(left)
  echo "== PyTorch $mode $* ($t s left)"
  if [ "${#READY[@]}" -eq 0 ] || [ "$t" -le 10 ]; then echo "- PyTorch $mode: not run" >> "$NOTES"; return; fi
  timeout -k 5 "$t" "$PYTHON" bench/torch_bench.py --mode "$mode" --repeat "$REPEAT" --warmup "$WARMUP" \
    --deadline "$DEADLINE" "$@" "${READY[@]}" || echo "- PyTorch $mode: exit status $? (see the cells' reports)" >> "$NOTES"
}

# The compiled configurations, one process per cell, all at once (torch_bench.py --processes: they
# wait for each other between compiling and timing, and time one at a time).
compile_pass() {
  local t=$(left) rendezvous="$WORK/rendezvous" pids=()
  echo "== PyTorch $COMPILED, ${#READY[@]} processes ($t s left)"
  if [ "${#READY[@]}" -eq 0 ] || [ "$t" -le 10 ]; then echo "- PyTorch $COMPILED: not run" >> "$NOTES"; return; fi
  rm -rf "$rendezvous" && mkdir -p "$rendezvous"
  for cell in "${READY[@]}"; do
    timeout -k 5 "$t" "$PYTHON" bench/torch_bench.py --mode "$COMPILED" --repeat "$REPEAT" --warmup "$WARMUP" \
      --deadline "$DEADLINE" --processes "${#READY[@]}" --rendezvous "$rendezvous" "${WARM_COMPILE[@]}" "$cell" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do
    wait "$pid" || echo "- PyTorch $COMPILED: a process ended with status $? (see the cells' reports)" >> "$NOTES"
  done
}

torch_pass eager
stage_done "PyTorch eager"
compile_pass
stage_done "PyTorch $COMPILED"

STAMP=$(date -u +%Y-%m-%d)
DEVICE=$(grep -h -m1 '"device"' "$WORK"/*/meganeura.json 2>/dev/null | head -n1 | sed 's/.*: "\(.*\)".*/\1/')
# The records are named for the device's model (h200, h100: the machine lent may be either), "gpu" where unknown.
MODEL_TAG=$(echo "$DEVICE" | grep -oE '[A-Z]+[0-9]+' | head -n1 | tr 'A-Z' 'a-z')
REPORT="$OUT/$STAMP-${MODEL_TAG:-gpu}.md" SUMMARY="$OUT/$STAMP-${MODEL_TAG:-gpu}.json"
# The binary's commit: MEGANEURA_COMMIT, else a COMMIT file beside the binary, else the one the binary was built
# from (`meganeura --version`; a binary built elsewhere and carried here: the device copy's git HEAD can be stale,
# and session 36's record named it), else this checkout's HEAD.
BUILT_FROM=$("$BINARY" --version 2>/dev/null | sed -n 's/^commit //p' | grep -v '^unknown$')
COMMIT=${MEGANEURA_COMMIT:-$(cat "$(dirname "$BINARY")/COMMIT" 2>/dev/null || echo "${BUILT_FROM:-$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)}")}
COMMIT=$(echo "$COMMIT" | head -n 1)
TORCH=$(grep -h -m1 '"torch_version"' "$WORK"/*/torch-eager.json 2>/dev/null | head -n1 | sed 's/.*: "\(.*\)".*/\1/')
"$PYTHON" bench/compare.py "$WORK" --json "$SUMMARY" --meta "date=$STAMP" --meta "commit=$COMMIT" \
  --meta "command=$COMMAND" --meta "device=$DEVICE" --meta "torch=$TORCH" --meta "stages=$STAGES" > /dev/null
stage_done report
TABLE=$("$PYTHON" bench/compare.py --render "$SUMMARY")
{
  echo "# meganeura vs PyTorch on the ${DEVICE:-GPU machine}, $STAMP"
  echo
  echo "- commit: \`$COMMIT\`"
  echo "- command: \`$COMMAND\`"
  echo "- device: $DEVICE"
  echo "- PyTorch: $TORCH; inductor cache fresh at the start of the run"
  echo "- wall time of the whole run: $(( $(date +%s) - START )) s ($STAGES)"
  echo "- records: \`$(basename "$SUMMARY")\` (the table below is rendered from it: \`bench/compare.py --render\`)"
  echo
  echo "$TABLE"
  if [ -s "$NOTES" ]; then echo; echo "### Run notes"; echo; cat "$NOTES"; fi
  echo
  echo "<details><summary>raw JSON</summary>"
  echo
  for cell in "${CELLS[@]}"; do
    for f in meganeura.json torch-eager.json torch-compile.json torch-cudagraphs.json; do
      [ -s "$cell/$f" ] || continue
      echo "#### $(basename "$cell")/$f"; echo; echo '```json'; cat "$cell/$f"; echo '```'; echo
    done
  done
  echo "</details>"
} > "$REPORT"
echo "$TABLE"
[ -s "$NOTES" ] && cat "$NOTES"
echo "written: $REPORT and $SUMMARY (cells in $WORK)"
