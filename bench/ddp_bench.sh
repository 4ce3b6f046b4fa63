#!/usr/bin/env bash
# Data-parallel training on a multi-GPU machine (issue 21, item 4), NOT YET RUN: no machine of more than
# one GPU was lent while it was written, so only its --size tiny form has run (on lavapipe, 1 and 2
# processes of the one CPU device). Step time of SmolLM2-135M (full fine-tune) and ResNet-50 (the image
# fine-tune of torchvision's ResNet-50, batch norms on running statistics) training with `meganeura
# finetune --distributed` under mpirun at each GPU count, the same per-GPU batch, their scaling
# efficiency and the time in the gradients' all-reduce; beside them PyTorch DDP (NCCL) on the same
# machine, models and batches (bench/ddp_bench.py torch, one process per GPU).
#
#   bench/ddp_bench.sh MEGANEURA_BINARY [--gpus "1 2"] [--out DIR] [--budget 540] [--steps 30]
#                      [--lm-batch 8] [--seq 256] [--image-batch 32] [--image-size 224] [--size full|tiny]
#                      [--text-kb 300] [--cap 150] [--no-gpu-env]
#
# Needs Open MPI (mpirun, libmpi: installed, or fetched into .mpi/ by scripts/mpi-debs.sh for a machine
# without packages), libmeganeura_mpi.so next to the binary (the build makes it where CMake finds MPI),
# PyTorch with torchvision. Run from anywhere; it works in the repository
# root, sources scripts/gpu-env.sh unless --no-gpu-env, and keeps its scratch in $BENCH_WORK (else a new
# folder under /tmp). Writes DIR/ddp.json and DIR/ddp.md (DIR defaults to bench/results/DATE-ddp-h200).
# Passing looks like: every row has a step time; meganeura's 1-GPU rows match their single-GPU
# `finetune` step; the efficiency column is what the issue asks for.
set -u -o pipefail

usage() { sed -n '10,12p' "$0" | sed 's/^# *//'; exit 2; }
[ $# -ge 1 ] || usage
BINARY=$(realpath "$1"); shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GPUS="1 2" OUT="" BUDGET=540 CAP=150 STEPS=30 LM_BATCH=8 SEQ=256 IMAGE_BATCH=32 IMAGE_SIZE=224 SIZE=full TEXT_KB=300 GPU_ENV=1
while [ $# -gt 0 ]; do
  case "$1" in
    --gpus) GPUS=$2; shift 2 ;;
    --out) OUT=$(realpath -m "$2"); shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --cap) CAP=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --lm-batch) LM_BATCH=$2; shift 2 ;;
    --seq) SEQ=$2; shift 2 ;;
    --image-batch) IMAGE_BATCH=$2; shift 2 ;;
    --image-size) IMAGE_SIZE=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --text-kb) TEXT_KB=$2; shift 2 ;;
    --no-gpu-env) GPU_ENV=0; shift ;;
    *) usage ;;
  esac
done
[ -x "$BINARY" ] || { echo "ddp_bench.sh: $BINARY is not an executable" >&2; exit 2; }
STAMP=$(date -u +%Y-%m-%d)
OUT=${OUT:-$ROOT/bench/results/$STAMP-ddp-h200}
COMMAND="bench/ddp_bench.sh $(basename "$BINARY") --gpus '$GPUS' --budget $BUDGET --steps $STEPS --lm-batch $LM_BATCH --seq $SEQ --image-batch $IMAGE_BATCH --image-size $IMAGE_SIZE --size $SIZE --text-kb $TEXT_KB"
PYTHON=${PYTHON:-python3}
START=$(date +%s)
DEADLINE=$((START + BUDGET - 10))
# shellcheck source=budget.sh
source "$ROOT/bench/budget.sh"

cd "$ROOT"
if [ "$GPU_ENV" = 1 ]; then
  # shellcheck source=../scripts/gpu-env.sh
  source scripts/gpu-env.sh
fi
# Open MPI where the machine has none (scripts/mpi-debs.sh fetched it into .mpi/).
if ! command -v mpirun > /dev/null && ls .mpi/*.deb > /dev/null 2>&1; then
  for f in .mpi/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
MPIRUN=$(command -v mpirun || command -v mpirun.openmpi) || { echo "ddp_bench.sh: no mpirun (scripts/mpi-debs.sh)" >&2; exit 2; }
WORK=${BENCH_WORK:-$(mktemp -d /tmp/meganeura-ddp-XXXXXX)}
mkdir -p "$WORK"
rm -f "$WORK"/mn-*.log "$WORK"/torch-*.json "$WORK"/torch-*.log
rm -rf "$WORK"/mn-out-*
NOTES="$WORK/notes.txt"
: > "$NOTES"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# The data: the SmolLM2-135M folder (random weights) and text of finetune_bench; ResNet-50 weights and
# enough images for $STEPS steps at the largest GPU count (more steps at fewer GPUs: one epoch each).
MAX_GPUS=$(echo "$GPUS" | tr ' ' '\n' | sort -n | tail -n 1)
IMAGES=$(( (MAX_GPUS * IMAGE_BATCH * STEPS * 10 + 8) / 9 ))
step "prepare SmolLM2" 120 "$WORK/prepare-lm.log" "$PYTHON" bench/finetune_bench.py prepare "$WORK" --size "$SIZE" --text-kb "$TEXT_KB" || exit 1
step "prepare ResNet-50" 120 "$WORK/prepare-images.log" "$PYTHON" bench/ddp_bench.py images "$WORK" --images "$IMAGES" || exit 1

for n in $GPUS; do
  step "meganeura SmolLM2 x$n" "$CAP" "$WORK/mn-smollm2-$n.log" \
    "$MPIRUN" -np "$n" --bind-to none "$BINARY" finetune -m "$WORK/model" --data "$WORK/data.txt" --out "$WORK/mn-out-smollm2-$n" \
      --steps "$STEPS" --batch "$LM_BATCH" --seq "$SEQ" --distributed
  step "meganeura ResNet-50 x$n" "$CAP" "$WORK/mn-resnet50-$n.log" \
    "$MPIRUN" -np "$n" --bind-to none "$BINARY" finetune -m "$WORK/resnet50.safetensors" --data "$WORK/images" \
      --out "$WORK/mn-out-resnet50-$n" --epochs 1 --batch "$IMAGE_BATCH" --image-size "$IMAGE_SIZE" --distributed
done
for n in $GPUS; do
  step "PyTorch DDP SmolLM2 x$n" "$CAP" "$WORK/torch-smollm2-$n.log" \
    "$PYTHON" bench/ddp_bench.py torch --processes "$n" --model smollm2 \
      --size "$SIZE" --batch "$LM_BATCH" --seq "$SEQ" --steps "$STEPS" --json "$WORK/torch-smollm2-$n.json"
  step "PyTorch DDP ResNet-50 x$n" "$CAP" "$WORK/torch-resnet50-$n.log" \
    "$PYTHON" bench/ddp_bench.py torch --processes "$n" --model resnet50 \
      --batch "$IMAGE_BATCH" --image-size "$IMAGE_SIZE" --steps "$STEPS" --json "$WORK/torch-resnet50-$n.json"
done

COMMIT=${MEGANEURA_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}
DEVICE=$("$BINARY" devices 2>/dev/null | head -n 1)
timeout -k 5 60 "$PYTHON" bench/ddp_bench.py report "$WORK" --out "$OUT" --notes "$NOTES" \
  --meta "date=$STAMP" --meta "commit=$COMMIT" --meta "command=$COMMAND" --meta "device=$DEVICE" \
  --meta "gpus=$GPUS" --meta "steps=$STEPS" --meta "lm batch per GPU=$LM_BATCH x $SEQ tokens" \
  --meta "image batch per GPU=$IMAGE_BATCH at $IMAGE_SIZE" --meta "wall time=$(( $(date +%s) - START )) s"
echo "written: $OUT/ddp.md and $OUT/ddp.json (work in $WORK)"
