#!/usr/bin/env bash
# train and finetune --distributed on MPI (ctest MPI.TrainAndFinetuneMatchOneProcessOnTheCombinedBatch): two
# processes of batch b under mpirun must train as one process of batch 2b does, their loss curves equal to
# 1e-5 relative at every step, with every rank's parameters bit-identical to rank 0's after every step
# (MEGANEURA_CHECK_REPLICAS) and only rank 0 printing and writing the checkpoint, the curve and the model. Small
# --bucket-mb: the backward in several segments, each bucket all-reduced while the later ones run.
# train: the Fashion-MNIST MLP, 200 steps on the first 3,200 training images (500 test images); finetune:
# a tiny causal LM, 40 steps. ~20 s on 2 cores, lavapipe on one thread per process (LP_NUM_THREADS=1:
# with a thread per core each, the two processes ran 6x slower).
# Usage: mpi_train_test.sh MEGANEURA_BINARY
set -euo pipefail
bin=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 - "${MEGANEURA_DATA_DIR:-/usr/share/datasets/fashion-mnist}" "$work/data" <<'PY'
import gzip, os, struct, sys
src, dst = sys.argv[1:]
if not os.path.isdir(src) and os.path.isdir(os.path.join(src, "fashion-mnist")): src = os.path.join(src, "fashion-mnist")
os.makedirs(dst)
for split, count in (("train", 3200), ("t10k", 500)):
    for kind, item in (("images-idx3", 784), ("labels-idx1", 1)):
        name = f"{split}-{kind}-ubyte.gz"
        data = gzip.open(os.path.join(src, name)).read()
        header = 16 if item == 784 else 8
        dims = list(struct.unpack(">" + "I" * ((header - 4) // 4), data[4:header]))
        dims[0] = count
        out = data[:4] + struct.pack(">" + "I" * len(dims), *dims) + data[header:header + count * item]
        with gzip.open(os.path.join(dst, name), "wb") as f: f.write(out)
PY
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# Two ranks in $work, each with every rank's parameters checked against rank 0's after every step.
two_ranks() {
  mpirun -np 2 --oversubscribe -x MEGANEURA_CHECK_REPLICAS=1 -x MEGANEURA_VALIDATE -x LP_NUM_THREADS=1 \
    bash -c 'cd "$1" && shift && exec "$@"' _ "$work" "$bin" "$@"
}
# The loss curves in CSV $1 (one process) and $2 (two) over $3 steps, equal to 1e-5 relative, and trained.
same_curves() {
  python3 - "$@" <<'PY'
import csv, sys
one_csv, two_csv, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
def losses(name):
    return {int(r["step"]): float(r["loss"]) for r in csv.DictReader(open(name)) if r["loss"]}
one, two = losses(one_csv), losses(two_csv)
assert len(one) == steps and sorted(one) == sorted(two), f"steps: {len(one)} in one process, {len(two)} in two"
worst = max(abs(two[s] - one[s]) / abs(one[s]) for s in one)
print(f"{two_csv}: {steps} steps, loss {one[1]:.4f} -> {one[steps]:.4f}; largest relative difference {worst:.2e}")
assert one[steps] < 0.9 * one[1], "it did not train"
assert worst <= 1e-5, f"the two processes' loss curve is {worst:.2e} from the single process's"
PY
}

# train: the Fashion-MNIST MLP, 200 steps of 16 images.
common=(train fashion-mnist --data "$work/data" --epochs 1 --lr 2e-3 --seed 5)
"$bin" "${common[@]}" --batch 16 --checkpoint "$work/one.safetensors" > "$work/one.log"
two_ranks "${common[@]}" --batch 8 --distributed --bucket-mb 0.05 --checkpoint two.safetensors > "$work/two.log"
cat "$work/two.log"
grep -q "processes of 8" "$work/two.log"
[ "$(grep -c 'test accuracy:' "$work/two.log")" = 1 ]  # rank 0 alone prints
[ -f "$work/two.safetensors" ]
same_curves "$work/one.csv" "$work/two.csv" 200

# finetune: a tiny random causal LM (a full fine-tune) on 6 KB of text, 40 steps of 4 blocks of 16 tokens.
/usr/bin/python3 "$(dirname "$0")/../torch/tiny_model_folder.py" "$work/model" > /dev/null
head -c 6000 /usr/share/common-licenses/GPL-3 > "$work/text.txt"
common=(finetune -m "$work/model" --data "$work/text.txt" --steps 40 --seq 16 --lr 1e-3)
"$bin" "${common[@]}" --batch 4 --out "$work/one" > "$work/one.log" 2>&1
two_ranks "${common[@]}" --batch 2 --out two --distributed --bucket-mb 0.01 > "$work/two.log" 2>&1 || { cat "$work/two.log"; exit 1; }
grep finetuned "$work/two.log"
[ -f "$work/two/model.safetensors" ]
same_curves "$work/one/loss.csv" "$work/two/loss.csv" 40
echo "1 passed, 0 failed"
