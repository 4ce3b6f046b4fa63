#!/usr/bin/env bash
# Session 43 call 2: the f32 tiled products staging operands read along K as their rows (l43, the change to land)
# against the head (b43 = 8b9c9fa's code, the experiment binary with no variable set): tests, then the A/B.
set -u
source scripts/gpu-env.sh
export MEGANEURA_VALIDATE=0 MEGANEURA_TEST_PYTHON=$(which python3)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
for f in build-lead/l43/*.xz build-lead/b43/*.xz; do xz -dkf -T0 $f && chmod +x ${f%.xz}; done
timeout 90 build-lead/l43/meganeura_tests --gtest_brief=1 \
  --gtest_filter="MatmulTest.*:FusionTest.*:TransformerVsTorch*:ConvModels.*:SiblingProductsTest.*" \
  > $OUT/r/tests.txt 2>&1
echo "tests rc $?"; grep -E '^\[  (PASSED|FAILED) |FAILED TEST|tests ran|^\[  FAILED' $OUT/r/tests.txt | head -20
MODELS="whisper" PRECISIONS=strict ROUNDS=2 REPEAT=15 timeout 150 scripts/h200_ab.sh $OUT/r/abw \
  base=build-lead/b43 rows=build-lead/l43 > /dev/null 2>&1
echo "abw rc $?"
MODELS="smollm2 resnet50" PRECISIONS=strict ROUNDS=1 REPEAT=15 timeout 120 scripts/h200_ab.sh $OUT/r/ab \
  base=build-lead/b43 rows=build-lead/l43 > /dev/null 2>&1
echo "ab rc $?"
python3 - <<'PY'
import re, os
for f in [os.environ['OUT'] + '/r/abw/ab.md', os.environ['OUT'] + '/r/ab/ab.md', os.environ['OUT'] + '/r/abf/ab.md']:
    if not os.path.exists(f): continue
    for line in open(f):
        if line.startswith('| ') and 'GPU' in line:
            cells = [c.strip() for c in line.split('|')[1:-1]]
            out = cells[:3]
            for c in cells[3:]:
                out.append(' / '.join(f'{a} ({b})' for a, b in re.findall(r'([\d.]+) \(GPU ([\d.]+)', c)))
            print(' | '.join(out))
PY
cd $OUT && tar czf r.tgz r && rm -rf r
