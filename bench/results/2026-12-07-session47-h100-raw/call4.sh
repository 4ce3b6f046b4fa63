#!/usr/bin/env bash
# Session 47, call 4: the protocol for Whisper-tiny (the cells nearest PyTorch) at 510e162, beside PyTorch with CUDA graphs.
set -u
xz -dkf build-lead/h47/meganeura.xz && chmod +x build-lead/h47/meganeura
bench/run_gpu.sh build-lead/h47/meganeura --out $OUT --repeat 20 --warmup 3 --budget 300 --size full --models "whisper" --torch-compiled cudagraphs 2>&1 | tee $OUT/run.log | tail -40
