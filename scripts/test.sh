#!/usr/bin/env bash
# test.sh — set up (scripts/setup.sh), then run every test through ctest.
#   scripts/test.sh                 # all tests
#   scripts/test.sh -L unit         # extra ctest arguments pass through
# On a failure the last lines printed are a digest (scripts/test-digest.sh):
# each failed entry's Check failures and its last lines, so that a CI log
# cut to its tail still says what failed and why.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD=${FERRY_BUILD_DIR:-build}
cd "$BUILD"
ctest --output-on-failure -j2 "$@" || {
	rc=$?
	bash ../scripts/test-digest.sh .
	exit $rc
}
