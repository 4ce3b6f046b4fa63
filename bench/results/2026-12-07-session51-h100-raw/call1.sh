#!/usr/bin/env bash
# Session 51, call 1 (run in this order, most valuable first):
# (a) can the driver's compiled code be read (pipeline cache -> ELF -> nvidia disassembler bundled with Triton)?
# (b) dQ as a scaled cooperative matmul of the dS the cooperative dK/dV kernel stores (build-lead/dq): its GPU tests,
#     then Whisper fast training/step against the head (h51) and against itself with the dQ kernel (GRAD_Q=kernel);
# (c) SmolLM2, SmolVLA, U-Net beside PyTorch with CUDA graphs at the head (last run: session 37);
# (d) Whisper fast's attention forward at other key-split counts (existing knob).
set -u
source scripts/gpu-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
B=build-lead/h51 N=build-lead/dq
for f in $B/*.xz $N/*.xz; do xz -dkf -T0 $f && chmod +x ${f%.xz}; done
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
rm -rf /tmp/mncache /tmp/sass; mkdir -p /tmp/mncache
MEGANEURA_CACHE_DIR=/tmp/mncache timeout 60 $B/meganeura bench --model whisper --precision fast --size full \
  --repeat 2 --warmup 1 > /dev/null 2>&1; ls -la /tmp/mncache
python3 scratch/s51/sass.py  # (call1-sass-probe.py here) /tmp/sass /tmp/mncache/* > $OUT/sass-log.txt 2>&1; tail -4 $OUT/sass-log.txt
tar czf $OUT/sass.tgz -C /tmp sass mncache 2>/dev/null; ls -la $OUT/sass.tgz
SHARDS=4 timeout 150 scripts/h200_tests.sh $N/meganeura_tests '*AttentionFast*:*AttentionGpu.Fast*:*AttentionCoop*:*TransformerVsTorch*:*SelfTest*' $OUT/t > /dev/null 2>&1
grep -E "PASSED|FAILED|tests ran" $OUT/t/tests.txt | head -20
MODELS=whisper PRECISIONS=fast ROUNDS=2 KERNELS=5 GPU_ENV=0 scripts/h200_ab.sh $OUT/ab head=$B dq=$N dqk=$N@MEGANEURA_ATTENTION_GRAD_Q=kernel > $OUT/ab-log.txt 2>&1
cat $OUT/ab/ab.md | cut -c1-400
mkdir -p $OUT/p
bench/run_gpu.sh $B/meganeura --out $OUT/p --repeat 20 --warmup 3 --budget 270 --size full \
  --models "smollm2 smolvla sd_unet" --torch-compiled cudagraphs > $OUT/p/log.txt 2>&1
echo "protocol rc $?"; grep -E "^\*\*" $OUT/p/*.md
MODELS=whisper PRECISIONS=fast KERNELS=2 GPU_ENV=0 timeout 60 scripts/h200_ab.sh $OUT/sp head=$B s2=$B@MEGANEURA_ATTENTION_SPLITS=2 \
  s8=$B@MEGANEURA_ATTENTION_SPLITS=8 s12=$B@MEGANEURA_ATTENTION_SPLITS=12 > /dev/null 2>&1
grep inference $OUT/sp/ab.md | head -2 | cut -c1-600
ls -R $OUT | head -30
