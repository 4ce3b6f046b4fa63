#!/usr/bin/env bash
# Session 39, call 5: the decode's combine merged by the output projection's GEMV, against the GEMV's subgroup sums
# alone and the head; its tests on the GPU; the decode trace.
set -u
for d in build-lead/h39 build-lead/n39 build-lead/c39; do for f in $d/*.xz; do xz -dkf -T0 $f; chmod +x ${f%.xz}; done; done
mkdir -p build && cp build-lead/c39/meganeura build/meganeura
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0
C=build-lead/c39/meganeura
python3 scratch/decode_ab.py head=build-lead/h39/meganeura sg=build-lead/n39/meganeura gemv=$C combine=$C@MEGANEURA_DECODE_COMBINE=dispatch gemvfast=$C%fast > $OUT/decode-ab.txt 2>&1
IDS=$(python3 -c "import random; random.seed(1); print(','.join(str(random.randrange(49152)) for _ in range(4056)))")
MEGANEURA_TRACE=/tmp/dec.json timeout 200 $C generate --model smollm2 --size full --tokens "$IDS" --max-new 40 --ignore-eos > /dev/null 2>&1
python3 scripts/trace_dispatches.py /tmp/dec.json --top 12 > $OUT/decode-trace.txt 2>&1
export MEGANEURA_TEST_PYTHON=$(which python3)
timeout 240 build-lead/c39/meganeura_tests --gtest_brief=1 --gtest_filter='AttentionDecodeGpu.*:*KvCache*:MatmulTest.Gemv:MatmulChoice.*:ShadersCommand.*:FusionTest.Decode*:*Finetune*:*Generat*:CliErrors*' > $OUT/tests.txt 2>&1; echo "tests $?" >> $OUT/tests.txt
