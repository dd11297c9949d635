#!/usr/bin/env bash
# readme_fit.sh SOURCE_DIR: README.md shows examples/fit.c inline, in its
# first ```c block; the two must be the same text, so that the program a
# reader copies is the one the tests build and run.
set -euo pipefail
SRC=$1
if ! diff <(awk '/^```c$/ { f = 1; next } /^```$/ { if (f) exit } f' \
	"$SRC/README.md") "$SRC/examples/fit.c"; then
	echo "FAIL: README.md's fit.c ('<') differs from examples/fit.c ('>')"
	exit 1
fi
echo "readme_fit: README.md shows examples/fit.c"
