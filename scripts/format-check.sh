#!/usr/bin/env bash
# format-check.sh — check that every tracked C/CUDA source (library code,
# tests and benchmarks; generated *.pb-c.* files and build dirs excluded)
# is laid out as .clang-format says. Exits 1 and names the files that
# differ, with the start of each diff.
#
#   scripts/format-check.sh          # check (CI runs this)
#   scripts/format-check.sh --fix    # rewrite the differing files in place
#   CLANG_FORMAT=clang-format-14 ... # use another binary
#
# The layout is what clang-format 14 (Debian 12) produces; other versions
# can disagree on a few lines, so a different version only earns a warning.
# A missing clang-format is installed with apt-get (via sudo when not root).
set -euo pipefail
cd "$(dirname "$0")/.."

fix=0
case "${1:-}" in
--fix) fix=1 ;;
"") ;;
*) echo "usage: $0 [--fix]" >&2; exit 2 ;;
esac

CF=${CLANG_FORMAT:-clang-format}
if ! command -v "$CF" >/dev/null 2>&1; then
	echo "format-check: $CF not found; installing clang-format" >&2
	SUDO=""
	if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
	if ! { $SUDO apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
			--no-install-recommends clang-format >/dev/null; }; then
		echo "format-check: could not install clang-format;" \
			"install it (Debian: apt-get install clang-format)" >&2
		exit 1
	fi
	CF=clang-format
fi
ver=$("$CF" --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
if [ "$ver" != 14 ]; then
	echo "format-check: warning: clang-format $ver; CI uses 14" >&2
fi

mapfile -t files < <(git ls-files -- '*.c' '*.h' '*.cu' '*.cuh' |
	grep -Ev '\.pb-c\.(c|h)$|^build[^/]*/')

# differing: the files clang-format would change, into bad[].
differing() {
	bad=()
	for f in "${files[@]}"; do
		"$CF" --style=file "$f" | cmp -s - "$f" || bad+=("$f")
	done
}

differing
if ((${#bad[@]} == 0)); then
	echo "format-check: ${#files[@]} files ok"
	exit 0
fi
if ((fix)); then
	# A second pass can move a wrapped trailing comment again: repeat
	# until clang-format has nothing left to change.
	for _ in 1 2 3; do
		((${#bad[@]})) || break
		printf 'format-check: reformatting %s\n' "${bad[@]}"
		"$CF" --style=file -i "${bad[@]}"
		differing
	done
	((${#bad[@]} == 0)) && exit 0
	echo "format-check: clang-format keeps changing ${bad[*]}" >&2
	exit 1
fi
for f in "${bad[@]}"; do
	"$CF" --style=file "$f" | diff -u --label "$f" --label "$f (formatted)" \
		"$f" - | head -n 20 || true
done
echo "format-check: ${#bad[@]} of ${#files[@]} files differ from" \
	".clang-format:" >&2
printf '  %s\n' "${bad[@]}" >&2
echo "fix them with: scripts/format-check.sh --fix" >&2
exit 1
