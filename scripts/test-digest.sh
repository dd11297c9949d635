#!/usr/bin/env bash
# test-digest.sh BUILD_DIR — after a failed ctest run, print for each failed
# entry its Check failure lines, sanitizer reports and last lines of output.
# ctest's --output-on-failure prints whole logs in the middle of the run;
# this puts the reasons at the end, where a truncated log still shows them.
set -uo pipefail
dir=${1:-.}
log="$dir/Testing/Temporary/LastTest.log"
failed="$dir/Testing/Temporary/LastTestsFailed.log"
[ -f "$failed" ] && [ -f "$log" ] || exit 0
echo "== digest of failed tests"
while IFS=: read -r _ name; do
	echo "-- $name"
	# The entry's output sits between its "Test: NAME" line and the next
	# "----" separator of LastTest.log.
	awk -v n="$name" '
		$0 ~ "^[0-9]+/[0-9]+ Test: " n "$" { on = 1; next }
		on && /^"?Test time = / { on = 0 }
		on { print }
	' "$log" >"$dir/digest.$$"
	grep -E ':[EF]:|ERROR: |runtime error:|Timeout|timed out|Assertion' \
		"$dir/digest.$$" | head -n 20
	echo "   (last lines)"
	tail -n 15 "$dir/digest.$$" | sed 's/^/   /'
	rm -f "$dir/digest.$$"
done <"$failed"
