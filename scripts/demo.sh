#!/usr/bin/env bash
# The main job: train an MLP on Fashion-MNIST on the best Vulkan device (lavapipe when there is no
# GPU), then reload the checkpoint with `meganeura eval` and report the same test accuracy.
set -euo pipefail
bin=${1:-build}/meganeura
out=${MEGANEURA_OUT:-out}
mkdir -p "$out"
"$bin" devices | head -1
"$bin" train fashion-mnist --epochs 2 --checkpoint "$out/fashion-mnist.safetensors" --force
"$bin" eval fashion-mnist --checkpoint "$out/fashion-mnist.safetensors"
