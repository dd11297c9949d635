#!/usr/bin/env bash
# size-check.sh — the house's two size limits on production code
# (docs/style.md): no source file over 900 lines, no function over 150.
# A function is found the way the house style writes it (and
# scripts/format-check.sh keeps it): its name opens a line, after the
# return type's own line, and its body closes with a `}` in column 0.
#
#   scripts/size-check.sh            # every production folder
#   scripts/size-check.sh DIR...     # just these
#
# Prints each file or function over its limit and exits 1 if any.
set -euo pipefail
cd "$(dirname "$0")/.."
MAX_FILE=900 MAX_FN=150
dirs=(base clients compression ps proto obs sharding tables trainer)
if [ $# -gt 0 ]; then dirs=("$@"); fi
files=$(find "${dirs[@]}" -type f \( -name '*.c' -o -name '*.h' \
	-o -name '*.cu' \) | sort)
bad=0
for f in $files; do
	out=$(awk -v maxf="$MAX_FILE" -v maxfn="$MAX_FN" -v f="$f" '
		/^[A-Za-z_][A-Za-z0-9_]*\(/ && name == "" {
			name = $0; sub(/\(.*/, "", name); start = FNR
		}
		/^}/ && name != "" {
			if (FNR - start + 1 > maxfn)
				printf "%s: function %s is %d lines (max %d)\n",
				    f, name, FNR - start + 1, maxfn
			name = ""
		}
		END {
			if (FNR > maxf)
				printf "%s: %d lines (max %d)\n", f, FNR, maxf
		}' "$f")
	if [ -n "$out" ]; then
		echo "$out"
		bad=1
	fi
done
if [ $bad -ne 0 ]; then
	echo "size-check: split what is listed above" >&2
	exit 1
fi
echo "size-check: every file and function within its limit"
