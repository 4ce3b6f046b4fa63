#!/usr/bin/env bash
# Session 39, call 2: where a decode layer's time goes (experiment switches), and the GPU tests that failed in call 1.
set -u
for d in build-lead/h39 build-lead/exp; do for f in $d/*.xz; do xz -dkf -T0 $f; chmod +x ${f%.xz}; done; done
mkdir -p build && cp build-lead/h39/meganeura build/meganeura
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0
E=build-lead/exp/meganeura
python3 scratch/decode_ab.py head=build-lead/h39/meganeura sg=$E@MEGANEURA_EXP_GEMV_SG=1 noepi=$E@MEGANEURA_EXP_NO_EPI=1 \
  nochunks=$E@MEGANEURA_EXP_EMPTY_CHUNKS=1 nocombine=$E@MEGANEURA_EXP_EMPTY_COMBINE=1 > $OUT/decode-ab.txt 2>&1
MEGANEURA_EXP_GEMV_SG=1 timeout 200 build-lead/exp/meganeura_tests --gtest_brief=1 --gtest_filter='*KvCache*:*Gemv*:Matmul*:Fusion*' > $OUT/sg-tests.txt 2>&1; echo "sg tests $?" >> $OUT/sg-tests.txt
timeout 200 build-lead/h39/meganeura_tests --gtest_filter='*Finetune*:*CliErrors*:*Generat*:Bench.*' > $OUT/tests.txt 2>&1; echo "tests $?" >> $OUT/tests.txt
