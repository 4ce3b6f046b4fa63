#!/usr/bin/env bash
# Attention whose keys are split across workgroups where the workgroups would leave the device idle
# (issue 14): a prefill of few heads, Whisper-tiny's 6 heads of 1500 rows, is 144 workgroups of 64
# rows for the H200's 132 compute units. On the H200, in one call (~5 minutes; keep the call's limit
# at 450 s or more):
#   1. the attention tests (forward, decode, backward, cooperative, the caps profiles' choices), the
#      split forward products' precision tests and the start-up self-test of the cooperative path;
#   2. `meganeura bench` of Whisper-tiny and SmolVLA in both precisions, split as chosen and with each
#      of SPLITS forced (MEGANEURA_ATTENTION_SPLITS; default 1: unsplit), alternating, ROUNDS times (1);
#      then the wall times and the attention kernels' GPU time side by side;
#   3. with TILES="64 128", Whisper strict with its matmuls' tile heights forced; with MATMUL_ONLY
#      (matmul_bench's --only) and $BIN/matmul_bench, the matmul shapes at every forced tile (--tiles).
#
#   scripts/h200_attention_split.sh [DIR]   from the repository root; reports to DIR ($OUT, else
#                                           /tmp/attention-split); BIN (default build-lead) holds
#                                           meganeura and meganeura_tests
#   GPU_ENV=0 BIN=build SIZE=tiny MODELS=whisper scripts/h200_attention_split.sh DIR
#                                           tries it on a development machine
set -u -o pipefail
cd "$(dirname "$0")/.."
[ "${GPU_ENV:-1}" = 1 ] && source scripts/gpu-env.sh
DIR=${1:-${OUT:-/tmp/attention-split}}
BIN=${BIN:-build-lead} SIZE=${SIZE:-full} MODELS=${MODELS:-whisper smolvla} PYTHON=${PYTHON:-python3}
WORK=/tmp/attention-split-work  # the reports' JSON and logs: too many files to send back
mkdir -p "$DIR" "$WORK"
export MEGANEURA_VALIDATE=0  # the validation layer is not installed there

TESTS='Attention*:*Attention*:CapsProfiles.*:MatmulTest.CooperativeSelfTest:*SplitForward*:MatmulPrecisionPolicy.*'
TESTS+=':-CausalLmVsTorch.*'  # they run the source tree's Python scripts by their path here
echo "== tests"
scripts/h200_tests.sh "$BIN/meganeura_tests" "$TESTS" "$DIR"

for round in $(seq "${ROUNDS:-1}"); do
    for model in $MODELS; do
        for precision in ${PRECISIONS:-fast strict}; do
            for splits in auto ${SPLITS:-1}; do
                name="$model-$precision-$splits-$round"
                echo "== $name"
                env $([ "$splits" = auto ] || echo MEGANEURA_ATTENTION_SPLITS=$splits) timeout 120 "$BIN/meganeura" bench \
                    --model "$model" --precision "$precision" --size "$SIZE" --repeat 20 --warmup 3 \
                    --out-dir "/tmp/attention-split-cells/$model-$precision" --json "$WORK/$name.json" > "$WORK/$name.log" 2>&1 \
                    || { echo "failed: $(tail -n 1 "$WORK/$name.log")"; continue; }
            done
        done
    done
done

# The strict matmuls' tile heights forced (MEGANEURA_MATMUL_TILE), for the tile choice's cost model:
# Whisper's 1500-row products take 32-row tiles by it today.
for tile in ${TILES:-}; do
    name="whisper-strict-tile$tile-1"
    echo "== $name"
    MEGANEURA_MATMUL_TILE=$tile timeout 120 "$BIN/meganeura" bench --model whisper --precision strict --size "$SIZE" \
        --repeat 20 --warmup 3 --out-dir /tmp/attention-split-cells/whisper-strict --json "$WORK/$name.json" \
        > "$WORK/$name.log" 2>&1 || echo "failed: $(tail -n 1 "$WORK/$name.log")"
done
if [ -n "${MATMUL_ONLY:-}" ]; then
    echo "== matmul_bench --tiles --only $MATMUL_ONLY"
    timeout 300 "$BIN/matmul_bench" --runs 10 --tiles --only "$MATMUL_ONLY" > "$DIR/matmul.txt" 2>&1
    echo "exit status $?"
fi

# Wall ms per workload, GPU ms, and the top kernels' GPU ms (attention's and the first four).
"$PYTHON" - "$WORK" <<'PY'
import glob, json, os, sys
rows = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    model, precision, splits, _ = os.path.basename(path)[:-5].split("-")
    report = json.load(open(path))
    for name, w in report.get("workloads", {}).items():
        kernels = {k["label"]: k["ms"] for k in w.get("top_kernels") or []}
        shown = [label for label in kernels if label.startswith("attention")]
        shown += [label for label in list(kernels)[:4] if label not in shown]
        attention = ", ".join(f"{label} {kernels[label]:.3f}" for label in shown)
        key = (model, precision, name, splits)
        gpu = (w.get("gpu_ms") or {}).get("median", float("nan"))
        rows.setdefault(key, []).append(f"{w['wall_ms']['median']:.3f} (GPU {gpu:.3f}; {attention or '-'})")
print("| model | precision | workload | variant | wall ms (GPU ms; the attention kernels and the top four), per run |")
print("| --- | --- | --- | --- | --- |")
for (model, precision, workload, splits), runs in sorted(rows.items()):
    print(f"| {model} | {precision} | {workload} | {splits} | {' / '.join(runs)} |")
PY
