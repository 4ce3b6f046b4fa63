#!/usr/bin/env bash
# Session 39, call 6: the GEMV's epilogue inputs loaded before its sums, against the subgroup sums alone; decode beside
# PyTorch (strict and fast) for the faster one; its GPU tests.
set -u
for d in build-lead/n39 build-lead/e39; do for f in $d/*.xz; do xz -dkf -T0 $f; chmod +x ${f%.xz}; done; done
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0
python3 scratch/decode_ab.py sg=build-lead/n39/meganeura epi=build-lead/e39/meganeura sgfast=build-lead/n39/meganeura%fast epifast=build-lead/e39/meganeura%fast > $OUT/decode-ab.txt 2>&1
B=build-lead/e39
sg=$(awk '/^sg:/{print $3}' $OUT/decode-ab.txt); epi=$(awk '/^epi:/{print $3}' $OUT/decode-ab.txt)
python3 -c "import sys; sys.exit(0 if float('$epi') < float('$sg') else 1)" || B=build-lead/n39
echo "decode_bench binary: $B" >> $OUT/decode-ab.txt
mkdir -p build && cp $B/meganeura build/meganeura
timeout 200 bench/decode_bench.sh $B/meganeura --no-gpu-env --json $OUT/decode-strict.json > $OUT/decode-strict.txt 2>&1
export MEGANEURA_TEST_PYTHON=$(which python3)
timeout 120 build-lead/e39/meganeura_tests --gtest_brief=1 --gtest_filter='*KvCache*:MatmulTest.Gemv:FusionTest.*:*Finetune*' > $OUT/tests.txt 2>&1; echo "tests $?" >> $OUT/tests.txt
