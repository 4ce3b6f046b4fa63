#!/usr/bin/env bash
# Session 43 call 3: l43's tests on the device (the products and the models against PyTorch).
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r build
for f in build-lead/l43/*.xz; do xz -dkf -T0 $f && chmod +x ${f%.xz}; done
cp build-lead/l43/meganeura build/meganeura  # the model tests run build/meganeura
timeout 170 build-lead/l43/meganeura_tests --gtest_brief=0 \
  --gtest_filter="MatmulTest.*:FusionTest.*:TransformerVsTorch*:ConvModels.*:SiblingProductsTest.*" > $OUT/r/tests.txt 2>&1
echo "tests rc $?"; grep -E '^\[  (PASSED|FAILED) |FAILED TEST|tests ran|^\[  FAILED|^\[       OK' $OUT/r/tests.txt | cut -c1-120 | head -80
cd $OUT && tar czf r.tgz r && rm -rf r
