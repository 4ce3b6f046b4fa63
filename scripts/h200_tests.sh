#!/usr/bin/env bash
# The GPU machine's share of meganeura_tests, for the h200_*.sh scripts: runs TESTS_BINARY with a gtest
# filter in SHARDS processes side by side (gtest's sharding; default 8), each for at most 300 s, writes their
# output to DIR/tests.txt (one file: a device call returns only a few) and prints the verdict lines. The tests
# mostly wait on shader compiles on the CPU: the whole suite took 3 minutes in 8 shards on the H100's 16 cores
# (session 49), where one process ran out of a 300 s limit before its summary (session 48).
#
#   scripts/h200_tests.sh TESTS_BINARY FILTER DIR
set -u -o pipefail
[ $# -eq 3 ] || { sed -n '8p' "$0" | sed 's/^# *//'; exit 2; }
# The tests read their scripts from this checkout and run the `meganeura` beside TESTS_BINARY (tests/host_tools.hpp):
# not the paths the build machine compiled in.
export MEGANEURA_TEST_SOURCE=$(cd "$(dirname "$0")/.." && pwd) MEGANEURA_TEST_BINARY=$(dirname "$(realpath "$1")")/meganeura
SHARDS=${SHARDS:-8}
for i in $(seq 0 $((SHARDS - 1))); do
    GTEST_TOTAL_SHARDS=$SHARDS GTEST_SHARD_INDEX=$i timeout 300 "$1" --gtest_brief=1 --gtest_filter="$2" > "$3/tests-$i.txt" 2>&1 &
done
status=0
for job in $(jobs -p); do wait "$job" || status=$?; done
for i in $(seq 0 $((SHARDS - 1))); do
    echo "== shard $i of $SHARDS"
    cat "$3/tests-$i.txt"
    grep -q '^\[==========\].*ran' "$3/tests-$i.txt" || echo "shard $i ended before its summary (a timeout or a crash)"
done > "$3/tests.txt"
rm -f "$3"/tests-*.txt
echo "exit status $status"
grep -E '^\[  (PASSED|FAILED) |FAILED TEST|tests ran|before its summary' "$3/tests.txt" | head -40
