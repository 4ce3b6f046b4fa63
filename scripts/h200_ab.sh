#!/usr/bin/env bash
# A/B of meganeura binaries on the GPU machine, in one call: `meganeura bench` of each model at each
# precision with each binary, the binaries taking turns, ROUNDS times; then one table of the wall
# times, the GPU times (the sum of the dispatches' timestamps) and the top kernels' GPU ms, binary
# beside binary. Before that, with TESTS (a gtest filter), the first binary's meganeura_tests.
#
#   scripts/h200_ab.sh DIR NAME=BINDIR[@VAR=VALUE] [NAME=BINDIR[@VAR=VALUE] ...]
#       from the repository root; DIR gets the table (ab.md) and the tests' log; each BINDIR holds
#       a Release `meganeura` (and, for TESTS, `meganeura_tests`), or `meganeura.xz` (unpacked
#       there: carried binaries stay under the device call's size limit); @VAR=VALUE runs that
#       variant with VAR set (e.g. new-8=build-lead/new@MEGANEURA_ATTENTION_SPLITS=8).
#   env: MODELS ("whisper"), PRECISIONS ("strict fast"), ROUNDS (1), REPEAT (20), SIZE (full),
#        TESTS (none), KERNELS (top kernels shown per run: 6), GPU_ENV (1; 0 on a development machine)
#   GPU_ENV=0 SIZE=tiny MODELS=whisper scripts/h200_ab.sh /tmp/ab new=build   tries it here
set -u -o pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '7,11p' "$0" | sed 's/^# *//'; exit 2; }
[ "${GPU_ENV:-1}" = 1 ] && source scripts/gpu-env.sh
DIR=$1; shift
MODELS=${MODELS:-whisper} PRECISIONS=${PRECISIONS:-strict fast} ROUNDS=${ROUNDS:-1} REPEAT=${REPEAT:-20}
SIZE=${SIZE:-full} PYTHON=${PYTHON:-python3}
WORK=/tmp/h200-ab-work  # the reports' JSON and logs: too many files to send back
rm -rf "$WORK"
mkdir -p "$DIR" "$WORK"
export MEGANEURA_VALIDATE=0  # the validation layer is not installed there

NAMES=()
declare -A BIN ENVS
for spec in "$@"; do
    name=${spec%%=*} dir=${spec#*=} env=
    [[ $dir == *@* ]] && env=${dir#*@} dir=${dir%%@*}
    for f in "$dir"/*.xz; do [ -e "$f" ] && xz -dkf -T0 "$f" && chmod +x "${f%.xz}"; done
    NAMES+=("$name")
    BIN[$name]=$dir ENVS[$name]=$env
done

if [ -n "${TESTS:-}" ]; then
    echo "== tests (${NAMES[0]}): $TESTS"
    scripts/h200_tests.sh "${BIN[${NAMES[0]}]}/meganeura_tests" "$TESTS" "$DIR"
fi

for round in $(seq "$ROUNDS"); do
    for model in $MODELS; do
        for precision in $PRECISIONS; do
            for name in "${NAMES[@]}"; do
                run="$model~$precision~$name~$round"
                echo "== $run"
                env ${ENVS[$name]} timeout 150 "${BIN[$name]}/meganeura" bench --model "$model" --precision "$precision" --size "$SIZE" \
                    --repeat "$REPEAT" --warmup 3 --out-dir "/tmp/h200-ab-cells/$model-$precision" \
                    --json "$WORK/$run.json" > "$WORK/$run.log" 2>&1 || echo "failed: $(tail -n 1 "$WORK/$run.log")"
            done
        done
    done
done

"$PYTHON" - "$WORK" "${KERNELS:-6}" "${NAMES[@]}" > "$DIR/ab.md" <<'PY'
import glob, json, os, sys
work, shown, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows = {}
for path in sorted(glob.glob(os.path.join(work, "*.json"))):
    model, precision, name, _ = os.path.basename(path)[:-5].split("~")
    report = json.load(open(path))
    for workload, w in report.get("workloads", {}).items():
        kernels = ", ".join(f"{k['label']} {k['ms']:.3f}" for k in (w.get("top_kernels") or [])[:shown])
        gpu = (w.get("gpu_ms") or {}).get("median", float("nan"))
        cell = f"{w['wall_ms']['median']:.3f} (GPU {gpu:.3f}; {kernels or '-'})"
        if report.get("non_finite_outputs"):  # the run's gradients or output hold NaN or inf: its times mean nothing
            cell += f" NaN/inf in {len(report['non_finite_outputs'])} outputs"
        rows.setdefault((model, precision, workload), {}).setdefault(name, []).append(cell)
print("| model | precision | workload | " + " | ".join(names) + " |")
print("| --- | --- | --- | " + " | ".join("---" for _ in names) + " |")
for (model, precision, workload), by_name in sorted(rows.items()):
    cells = [" / ".join(by_name.get(n, ["-"])) for n in names]
    print(f"| {model} | {precision} | {workload} | " + " | ".join(cells) + " |")
PY
{  # which code each column ran (`meganeura --version`; binaries built before it named its commit say so)
    echo
    for name in "${NAMES[@]}"; do
        commit=$("${BIN[$name]}/meganeura" --version 2>/dev/null | sed -n 's/^commit //p')
        echo "- $name: ${BIN[$name]}/meganeura, built from ${commit:-an unnamed commit}${ENVS[$name]:+, with ${ENVS[$name]}}"
    done
} >> "$DIR/ab.md"
cat "$DIR/ab.md"
