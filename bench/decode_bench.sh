#!/usr/bin/env bash
# SmolLM2-135M's per-token decode time at 4K and 8K positions on the GPU machine: meganeura generate
# beside PyTorch with a static KV cache, eager and torch.compile(mode="reduce-overhead") (CUDA
# graphs); see bench/decode_bench.py for the method.
#
#   bench/decode_bench.sh MEGANEURA_BINARY [--no-gpu-env] [decode_bench.py options, e.g. --json FILE]
#
# Sources scripts/gpu-env.sh (the Vulkan loader carried in .gl/) unless --no-gpu-env (lavapipe, to
# try it on a development machine: PYTHON=/usr/bin/python3 there, and
# --size tiny --positions 200,256 --new 9,137 --steps 50 --warmup 5).
set -eu -o pipefail
[ $# -ge 1 ] || { sed -n '6p' "$0" | sed 's/^# *//'; exit 2; }
BINARY=$(realpath "$1"); shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
if [ "${1:-}" = --no-gpu-env ]; then
  shift
else
  # shellcheck source=../scripts/gpu-env.sh
  source scripts/gpu-env.sh
fi
exec "${PYTHON:-python3}" bench/decode_bench.py "$BINARY" "$@"
