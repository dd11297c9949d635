#!/usr/bin/env bash
# symbols.sh CC LIBFERRY_SO LIBFERRY_A FERRY_H: the ABI surface. The
# functions ferry.h declares (found in its preprocessed text, so comments
# and macros cannot fool it) must be exactly the dynamic symbols that
# libferry.so defines (nm -D --defined-only) and exactly the global
# symbols that the installed libferry.a defines.
set -euo pipefail
CC=$1 SO=$2 AR=$3 H=$4
WORK=$(mktemp -d /tmp/ferry-symbols.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

"$CC" -E -P -x c "$H" |
	grep -o '\bferry_[a-z0-9_]*[[:space:]]*(' | tr -d ' (' | sort -u \
	>"$WORK/header"
[ -s "$WORK/header" ] || { echo "FAIL: no function found in $H"; exit 1; }
nm -D --defined-only "$SO" | awk '{ print $NF }' | sort -u >"$WORK/so"
nm -g --defined-only "$AR" | awk 'NF == 3 { print $3 }' | sort -u >"$WORK/a"
rv=0
for lib in so a; do
	if ! diff "$WORK/header" "$WORK/$lib" >"$WORK/diff"; then
		echo "FAIL: $([ $lib = so ] && echo "$SO" || echo "$AR")" \
			"differs from $H ('<' only in the header, '>' only exported):"
		cat "$WORK/diff"
		rv=1
	fi
done
[ $rv = 0 ] && echo "symbols: $(wc -l <"$WORK/header") functions, all exported, nothing else"
exit $rv
