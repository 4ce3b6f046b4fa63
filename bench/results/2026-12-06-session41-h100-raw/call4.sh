#!/usr/bin/env bash
# Session 41 call 4: the shared bool of last_piece as a uint; cooperative kernels summing their own pieces (guards lifted):
# the diagnostic, the tests with MEGANEURA_SPLIT_SUM=product, and an A/B of the sums in the products against dispatches.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
xz -dkf build-lead/d41/meganeura_tests.xz build-lead/d41/meganeura.xz; chmod +x build-lead/d41/meganeura*
T=build-lead/d41/meganeura_tests
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for coop in khr nv; do
  MEGANEURA_CACHE_DIR=/tmp/cache-$coop MEGANEURA_COOP=$coop $T --gtest_filter='DiagTest.*' > $OUT/r/diag-$coop.txt 2>&1
  echo "diag $coop rc $?"; grep -E "===|differ|run 2|warning" $OUT/r/diag-$coop.txt
done
MEGANEURA_SPLIT_SUM=product timeout 240 $T --gtest_brief=1 --gtest_filter='MatmulTest.*:ConvOpsTest.*:ConvCoop*' > $OUT/r/tests-product.txt 2>&1
echo "tests (product) rc $?"; grep -E "FAILED|PASSED|tests from" $OUT/r/tests-product.txt | tail -12
MEGANEURA_SPLIT_SUM=product timeout 120 $T --gtest_brief=1 --gtest_filter='Attention/AttentionFast*:AttentionSplitBackward.*:AttentionVeryLong.*' > $OUT/r/tests-attention.txt 2>&1
echo "attention tests (product) rc $?"; grep -E "FAILED|PASSED|tests from" $OUT/r/tests-attention.txt | tail -12
MODELS=resnet50 PRECISIONS=fast ROUNDS=2 scripts/h200_ab.sh $OUT/r/ab-resnet50 base=build-lead/d41 sum=build-lead/d41@MEGANEURA_SPLIT_SUM=matmul > $OUT/r/ab-resnet50.log 2>&1
MODELS="whisper smollm2 sd_unet" PRECISIONS=fast ROUNDS=1 scripts/h200_ab.sh $OUT/r/ab-rest base=build-lead/d41 sum=build-lead/d41@MEGANEURA_SPLIT_SUM=matmul att=build-lead/d41@MEGANEURA_SPLIT_SUM=attention > $OUT/r/ab-rest.log 2>&1
cat $OUT/r/ab-resnet50/ab.md | head -30; cat $OUT/r/ab-rest/ab.md | head -40
cd $OUT && tar czf r.tgz r && rm -rf r
