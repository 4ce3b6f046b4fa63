#!/usr/bin/env bash
# The GPU machine's share of meganeura_tests, for the h200_*.sh scripts: runs TESTS_BINARY with a gtest
# filter (at most 300 s), writes its output to DIR/tests.txt and prints the verdict lines.
#
#   scripts/h200_tests.sh TESTS_BINARY FILTER DIR
set -u -o pipefail
[ $# -eq 3 ] || { sed -n '5p' "$0" | sed 's/^# *//'; exit 2; }
# The tests read their scripts from this checkout and run the `meganeura` beside TESTS_BINARY (tests/host_tools.hpp):
# not the paths the build machine compiled in.
export MEGANEURA_TEST_SOURCE=$(cd "$(dirname "$0")/.." && pwd) MEGANEURA_TEST_BINARY=$(dirname "$(realpath "$1")")/meganeura
timeout 300 "$1" --gtest_brief=1 --gtest_filter="$2" > "$3/tests.txt" 2>&1
echo "exit status $?"
grep -E '^\[  (PASSED|FAILED) |FAILED TEST|tests ran' "$3/tests.txt" | head -20
