#!/usr/bin/env bash
# import-circles.sh — find import circles: two files in one source folder
# that call each other's internal functions. An internal function is a
# non-static `pfx__name` (the libuv rule, docs/style.md); a file defines it
# when the name opens a line (the house style puts the return type on the
# line before), and uses it when the name appears anywhere else in the
# file. A pair that uses each other both ways means neither file can be
# read, moved or tested without the other, so each such pair is printed
# with the functions that cross in each direction, and the script exits 1.
#
#   scripts/import-circles.sh                # every folder below
#   scripts/import-circles.sh ps/src/server  # just these folders
#
# Only .c and .cu files are read (headers declare, they do not call).
# Comments and string literals are skipped: a name only mentioned in
# them is no use.
set -euo pipefail
cd "$(dirname "$0")/.."

roots=(ps/src clients/src clients/cuda compression/src trainer/src base/src
	proto/src obs/src sharding/src tables/src)
if [ $# -gt 0 ]; then roots=("$@"); fi

# Every folder under the roots that holds a source file.
dirs=$(for r in "${roots[@]}"; do
	[ -d "$r" ] && find "$r" -type f \( -name '*.c' -o -name '*.cu' \) \
		-printf '%h\n'
done | sort -u)

bad=0
for d in $dirs; do
	# One awk pass per folder: collect definitions (name at column 0
	# followed by '('), then uses (the name as a whole word anywhere
	# else), and report every pair that crosses both ways.
	out=$(find "$d" -maxdepth 1 -type f \( -name '*.c' -o -name '*.cu' \) |
		sort | xargs awk '
		FNR == 1 {
			f = FILENAME; sub(/.*\//, "", f); files[f] = 1
			incom = 0
		}
		{
			# Drop comments and string literals: a name only
			# mentioned there is not a call.
			t = $0
			if (incom) {
				if ((e = index(t, "*/")) == 0) {
					t = ""
				} else {
					t = substr(t, e + 2); incom = 0
				}
			}
			gsub(/"([^"\\]|\\.)*"/, "\"\"", t)
			gsub(/\/\*([^*]|\*+[^*\/])*\*+\//, " ", t)
			sub(/\/\/.*/, "", t)
			if ((b = index(t, "/*")) > 0) {
				t = substr(t, 1, b - 1); incom = 1
			}
			line[f, FNR] = t; n[f] = FNR
		}
		match($0, /^[a-z][a-z0-9]*__[a-z0-9_]+\(/) {
			name = substr($0, 1, RLENGTH - 1)
			def[name] = f
			defline[f, FNR] = 1
		}
		END {
			for (f in files)
				for (i = 1; i <= n[f]; i++) {
					if ((f, i) in defline)
						continue
					s = line[f, i]
					while (match(s, /[a-z][a-z0-9]*__[a-z0-9_]+/)) {
						w = substr(s, RSTART, RLENGTH)
						pre = RSTART > 1 ? \
						    substr(s, RSTART - 1, 1) : ""
						# A struct tag may share the name of a
						# function (struct comp__kern, comp__kern):
						# naming the type is not a call.
						tag = substr(s, 1, RSTART - 1) ~ \
						    /(struct|union|enum)[ \t]+$/
						s = substr(s, RSTART + RLENGTH)
						if (pre ~ /[A-Za-z0-9_]/ || tag)
							continue
						if (!(w in def) || def[w] == f)
							continue
						g = def[w]
						if (!((f, g, w) in seen)) {
							seen[f, g, w] = 1
							uses[f, g] = uses[f, g] " " w
						}
					}
				}
			for (a in files)
				for (b in files) {
					if (a >= b)
						continue
					if (((a, b) in uses) && ((b, a) in uses)) {
						printf "%s <-> %s\n", a, b
						printf "  %s uses %s:%s\n", a, b, uses[a, b]
						printf "  %s uses %s:%s\n", b, a, uses[b, a]
					}
				}
		}')
	if [ -n "$out" ]; then
		echo "$d:"
		echo "$out" | sed 's/^/  /'
		bad=1
	fi
done
if [ $bad -ne 0 ]; then
	echo "import-circles: files above call each other both ways" >&2
	exit 1
fi
echo "import-circles: no circles"
