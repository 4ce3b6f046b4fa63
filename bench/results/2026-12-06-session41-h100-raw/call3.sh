#!/usr/bin/env bash
# Session 41 call 3: the diagnostic with the start-up check passed before K is forced into pieces.
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
xz -dc build-lead/d41/meganeura_tests.xz > /tmp/t && chmod +x /tmp/t
mkdir -p $OUT/r
for coop in khr nv; do
  MEGANEURA_CACHE_DIR=/tmp/cache-$coop MEGANEURA_COOP=$coop /tmp/t --gtest_filter='DiagTest.*' > $OUT/r/diag-$coop.txt 2>&1
  echo "diag $coop rc $?"; grep -E "===|differ|run 2|warning" $OUT/r/diag-$coop.txt
done
MEGANEURA_CACHE_DIR=/tmp/cache-d MEGANEURA_DEBUG=1 /tmp/t --gtest_filter='DiagTest.*' > $OUT/r/diag-debug.txt 2>&1
cd $OUT && tar czf r.tgz r && rm -rf r
