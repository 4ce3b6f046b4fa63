#!/usr/bin/env bash
# Session 49, call 1: every GPU test at t48 (= the head's kernels) in 8 shards side by side, then Whisper's strict
# training trace, ResNet-50's fast training trace, the attention kernels' registers, and Whisper's key/query chunks
# forced to 3, 5, 6 and 8 (the rule's 4) in every attention kernel; fa: the dK/dV kernel fetching each query tile at its
# step, no register prefetch (x49a: t48 + FETCH_AT_STEP under MN_X_FETCH_AT_STEP); t16: 16-row tiles; fa8:
# fa with 8 threads a group of 4 rows (64 threads, twice the products a shared load).
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
export MEGANEURA_TEST_SOURCE=$PWD MEGANEURA_TEST_BINARY=$PWD/build-lead/t48/meganeura
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r && xz -dkf -T0 build-lead/t48/*.xz build-lead/x49a/*.xz && chmod +x build-lead/t48/meganeura* build-lead/x49a/meganeura
start=$(date +%s)
for i in 0 1 2 3 4 5 6 7; do
  GTEST_TOTAL_SHARDS=8 GTEST_SHARD_INDEX=$i timeout 300 build-lead/t48/meganeura_tests --gtest_brief=1 \
    > $OUT/r/tests-$i.txt 2>&1 &
done
wait
echo "tests took $(( $(date +%s) - start )) s"
for i in 0 1 2 3 4 5 6 7; do echo "shard $i: $(grep -E '^\[  (PASSED|FAILED) |tests ran' $OUT/r/tests-$i.txt | tr '\n' ' ')"; done
grep -h -E "FAILED TEST|^\[  FAILED" $OUT/r/tests-*.txt | sort | uniq | head -30
grep -h -B2 -A12 "Failure" $OUT/r/tests-*.txt | head -60
KERNELS=4 MODELS=whisper PRECISIONS=strict ROUNDS=1 REPEAT=15 timeout 220 scripts/h200_ab.sh $OUT/r/splits head=build-lead/t48 \
  s3=build-lead/t48@MEGANEURA_ATTENTION_SPLITS=3 s5=build-lead/t48@MEGANEURA_ATTENTION_SPLITS=5 \
  s6=build-lead/t48@MEGANEURA_ATTENTION_SPLITS=6 s8=build-lead/t48@MEGANEURA_ATTENTION_SPLITS=8 fa=build-lead/x49a@MN_X_FETCH_AT_STEP=1 \
  t16=build-lead/t48@MEGANEURA_ATTENTION_TILES=32,16,16 \
  'fa8=build-lead/x49a@MN_X_FETCH_AT_STEP=1 MEGANEURA_ATTENTION_TILES=32,8,32' \
  'fa8s2=build-lead/x49a@MN_X_FETCH_AT_STEP=1 MEGANEURA_ATTENTION_TILES=32,8,32 MEGANEURA_ATTENTION_SPLITS=2' > $OUT/r/splits.log 2>&1
echo "splits rc $?"; grep -E "inference|training" $OUT/r/splits/ab.md | tr '|' '\n' | cut -c1-160
timeout 60 build-lead/t48/meganeura bench --model whisper --precision strict --repeat 15 --warmup 3 --out-dir /tmp/wb \
  --json $OUT/r/whisper-strict.json > $OUT/r/whisper-strict.log 2>&1; echo "bench rc $?"
cp /tmp/wb/trace-training.json $OUT/r/whisper-strict-trace-training.json 2>/dev/null
timeout 60 build-lead/t48/meganeura bench --model resnet50 --precision fast --repeat 15 --warmup 3 --out-dir /tmp/rb \
  --json $OUT/r/resnet50-fast.json > $OUT/r/resnet50-fast.log 2>&1; echo "bench rc $?"
cp /tmp/rb/trace-training.json $OUT/r/resnet50-fast-trace-training.json 2>/dev/null; ls -la $OUT/r
MEGANEURA_DEBUG=1 timeout 60 build-lead/t48/meganeura bench --model whisper --precision strict --repeat 1 --warmup 0 \
  --out-dir /tmp/wd > $OUT/r/whisper-strict-debug.log 2>&1
grep -A1 "^  attention" $OUT/r/whisper-strict-debug.log | grep -v "^--" | cut -c1-220 | sort | uniq | head -20
