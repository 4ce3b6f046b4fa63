#!/usr/bin/env bash
# Session 41 call 1: the cooperative kernels' own split-K sums (guards lifted), against their sum's dispatch.
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
xz -dc build-lead/d41/meganeura_tests.xz > /tmp/t && chmod +x /tmp/t
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
for coop in khr nv; do
  MEGANEURA_COOP=$coop /tmp/t --gtest_filter='DiagTest.*' > $OUT/r/diag-$coop.txt 2>&1
  echo "diag $coop rc $?"; grep -E "differ|dispatches|run 2" $OUT/r/diag-$coop.txt
done
MEGANEURA_DEBUG=1 /tmp/t --gtest_filter='DiagTest.*' > $OUT/r/diag-debug.txt 2>&1
MEGANEURA_SPLIT_SUM=product timeout 200 /tmp/t --gtest_brief=1 --gtest_filter='MatmulTest.PiecesSummed*:MatmulTest.FastPrecision:ConvOpsTest.DerivativesInFastPrecisionMatchReference' > $OUT/r/tests.txt 2>&1
echo "tests rc $?"; tail -5 $OUT/r/tests.txt
cd $OUT && tar czf r.tgz r && rm -rf r
