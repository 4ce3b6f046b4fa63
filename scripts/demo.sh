#!/usr/bin/env bash
# The main job: until training lands, a small MLP forward pass on the best device, checked against
# the float64 reference.
set -euo pipefail
build=${1:-build}
"$build/meganeura" devices
"$build/mlp_forward"
