#!/usr/bin/env bash
# The KHR cooperative-matrix path (issue 19, item 1: NV SPIR-V rewritten to SPV_KHR_cooperative_matrix,
# src/codegen/spirv_khr.cpp) on the H200, beside the NV path, in one call (~5 minutes; keep the call's
# limit at 500 s or more):
#   1. the cooperative kernels' tests (matmul, convolution, attention forward and backward against
#      float64; the start-up check; the rewrite's own tests) under MEGANEURA_COOP=nv, then =khr;
#   2. meganeura bench of each model in precision fast under each path (the same seed: the same weights
#      and inputs), and PyTorch eager's float64 reference of the NV cells (torch_bench.py --mode eager);
#   3. each path's gates against that reference (bench/compare.py's: forward < 1%, gradients < 5%), the
#      two paths' outputs against each other, and their GPU times side by side.
#
#   scripts/h200_coop_khr.sh [DIR]     from the repository root; the reports go to DIR ($OUT, else
#                                      /tmp/coop-khr), the cells (gigabytes) to a scratch folder; BIN
#                                      (default build-lead) is the build folder with meganeura and
#                                      meganeura_tests
#   GPU_ENV=0 SIZE=tiny MODELS=whisper BIN=build PYTHON=/usr/bin/python3 scripts/h200_coop_khr.sh DIR
#                                      tries it on a development machine (lavapipe: no cooperative
#                                      matrices, so both paths run the f32 kernels)
#
# Passing: every test OK under both paths; `cooperative matrices: KHR (MEGANEURA_COOP=khr)` in the
# debug line; every cell's gates pass under both; the KHR path's GPU times near the NV path's (the same
# instructions with other names: a gap means the driver compiles them differently). Not passing: a
# start-up check warning ("the KHR cooperative matrices of ... failed") sends the KHR path to the f32
# kernels: its times are then the f32 kernels'.
set -u -o pipefail
cd "$(dirname "$0")/.."
[ "${GPU_ENV:-1}" = 1 ] && source scripts/gpu-env.sh
DIR=${1:-${OUT:-/tmp/coop-khr}}
BIN=${BIN:-build-lead} SIZE=${SIZE:-full}
MODELS=${MODELS:-smollm2 smolvla sd_unet resnet50 whisper} PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d /tmp/coop-khr-cells-XXXXXX)
mkdir -p "$DIR"
export MEGANEURA_VALIDATE=0  # the validation layer is not installed there
TESTS='MatmulTest.Fast*:MatmulTest.Cooperative*:ConvOpsTest.*Fast*:FusionTest.EpiloguesInFastPrecision:F16WeightsTest.*'
TESTS+=':*AttentionFast*:AttentionGpu.Fast*:SpirvKhr.*:CapsProfiles.TheCooperativePath*:*SplitForward*:MatmulPrecisionPolicy.*'
for path in nv khr; do
    echo "== tests, MEGANEURA_COOP=$path"
    MEGANEURA_COOP=$path timeout 150 "$BIN/meganeura_tests" --gtest_brief=1 --gtest_filter="$TESTS" \
        > "$DIR/tests-$path.txt" 2>&1
    echo "exit status $?"
    grep -E '^\[ *(FAILED|PASSED|SKIPPED) *\]|tests? ran|Failure' "$DIR/tests-$path.txt" | head -40
done
echo "== the path a session takes (MEGANEURA_DEBUG=1)"
for path in nv khr; do
    MEGANEURA_COOP=$path MEGANEURA_DEBUG=1 timeout 60 "$BIN/meganeura" bench --model whisper --precision fast \
        --size tiny --repeat 1 --warmup 0 --out-dir "$WORK/debug-$path" 2>&1 | grep -m1 'cooperative matrices'
done
for model in $MODELS; do
    for path in nv khr; do
        cell="$WORK/$path/$model-fast"
        mkdir -p "$cell"
        echo "== $model fast, MEGANEURA_COOP=$path"
        MEGANEURA_COOP=$path timeout 60 "$BIN/meganeura" bench --model "$model" --precision fast --size "$SIZE" \
            --repeat 10 --warmup 3 --out-dir "$cell" --json "$cell/meganeura.json" > "$cell/meganeura.log" 2>&1 || echo "exit status $?"
        cp "$cell/meganeura.log" "$DIR/$model-$path.log"
        cp "$cell/meganeura.json" "$DIR/$model-$path.json" 2>/dev/null
        grep -E '^(compile|inference|latency|training|step) |warning|rror' "$cell/meganeura.log"
    done
done
echo "== PyTorch eager's float64 reference"
timeout 120 "$PYTHON" bench/torch_bench.py --mode eager --repeat 1 --warmup 1 "$WORK"/nv/*-fast > "$DIR/torch.txt" 2>&1 ||
    { echo "exit status $?"; tail -5 "$DIR/torch.txt"; }
echo "== gates and GPU times (ms, median)"
timeout 120 "$PYTHON" - "$WORK" $MODELS <<'EOF'
import json, os, sys
sys.path.insert(0, "bench")
from compare import evaluate_gates, read_safetensors, rel_l2

work, models = sys.argv[1], sys.argv[2:]
def cell(path, model):
    return os.path.join(work, path, model + "-fast")
for model in models:
    try:
        reference = read_safetensors(os.path.join(cell("nv", model), "reference.safetensors"))
        outputs = {p: read_safetensors(os.path.join(cell(p, model), "outputs.safetensors")) for p in ("nv", "khr")}
        reports = {p: json.load(open(os.path.join(cell(p, model), "meganeura.json"))) for p in ("nv", "khr")}
    except Exception as e:  # a cell that did not run
        print(f"{model}: {e}")
        continue
    for p in ("nv", "khr"):
        g = evaluate_gates(outputs[p], reference)
        v = g["values"]
        print(f"{model:8} {p:3} gates {'pass' if g['pass'] else 'FAIL'}: forward {v['forward']:.2e}, gradients "
              f"{v['grad']:.2e}, worst {g['worst_parameter']} {v['worst']:.2e} {' '.join(g['problems'])}")
    both = [k for k in outputs["nv"] if k in outputs["khr"]]
    worst = max(both, key=lambda k: rel_l2(outputs["khr"][k], outputs["nv"][k]))
    print(f"{model:8} KHR against NV: worst {worst} {rel_l2(outputs['khr'][worst], outputs['nv'][worst]):.2e}")
    for w in ("inference", "latency", "training", "step"):
        t = {p: (reports[p]["workloads"][w].get("gpu_ms") or {}).get("median") for p in ("nv", "khr")}
        if t["nv"] and t["khr"]:
            print(f"{model:8} {w:10} NV {t['nv']:8.3f}  KHR {t['khr']:8.3f}  KHR/NV {t['khr'] / t['nv']:.3f}")
EOF
rm -rf "$WORK"
