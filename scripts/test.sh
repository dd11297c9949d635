#!/usr/bin/env bash
# test.sh — set up (scripts/setup.sh), then run every test through ctest.
#   scripts/test.sh                 # all tests
#   scripts/test.sh -L unit         # extra ctest arguments pass through
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD=${FERRY_BUILD_DIR:-build}
cd "$BUILD"
ctest --output-on-failure -j2 "$@"
