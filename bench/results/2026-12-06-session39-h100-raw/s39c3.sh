#!/usr/bin/env bash
# Session 39, call 3: GEMV sums in subgroups + the one-round-trip combine, against the head; GPU tests.
set -u
for d in build-lead/h39 build-lead/n39; do for f in $d/*.xz; do xz -dkf -T0 $f; chmod +x ${f%.xz}; done; done
mkdir -p build && cp build-lead/n39/meganeura build/meganeura
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0
N=build-lead/n39/meganeura
python3 scratch/decode_ab.py head=build-lead/h39/meganeura new=$N tree=$N@MEGANEURA_GEMV_SUM=tree newfast=$N%fast > $OUT/decode-ab.txt 2>&1
export MEGANEURA_TEST_PYTHON=$(which python3)
timeout 280 build-lead/n39/meganeura_tests --gtest_brief=1 --gtest_filter='*AttentionDecode*:*KvCache*:MatmulTest.*:MatmulChoice.*:FusionTest.*:*Finetune*:*Generat*:Bench.*:CliErrors*' > $OUT/tests.txt 2>&1; echo "tests $?" >> $OUT/tests.txt
