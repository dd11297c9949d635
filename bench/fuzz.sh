#!/usr/bin/env bash
# fuzz.sh — runs every libFuzzer target of tests/fuzz (issue 12 item 5)
# and reports, per target, executions, executions/s, the coverage libFuzzer
# counts (cov: edges reached, ft: features) and whether it found anything.
# Builds a clang tree with FERRY_FUZZ=ON and ASan+UBSan (build-fuzz, or
# FERRY_FUZZ_BUILD_DIR) first; needs clang (apt-get install clang).
#
#   bench/fuzz.sh [RUNS]           # default 1000000 executions per target
#   bench/fuzz.sh --time SECONDS   # a bounded time per target (.ci/run)
#   FERRY_FUZZ_TARGETS="fuzz_idx fuzz_rpc" bench/fuzz.sh  # some targets
#
# Each target starts from its seed corpus (tests/fuzz/corpus/<target>) in
# a scratch copy; a crash, leak, timeout or sanitizer report fails the
# script and leaves the reproducer under the scratch directory (printed).
# Writes bench/results/fuzz.json.
#
#   bench/fuzz.sh --smoke          # ctest -L bench-smoke: fuzz_frame (or
#                                  # FERRY_FUZZ_TARGETS) for 500 runs, the
#                                  # JSON in the scratch directory; skipped
#                                  # (exit 77) without clang
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=1000000 TIME=0 SMOKE=0
if [[ "${1:-}" == "--smoke" ]]; then
	command -v clang >/dev/null || { echo "fuzz.sh: SKIP: no clang"; exit 77; }
	SMOKE=1 RUNS=500
	export FERRY_FUZZ_TARGETS=${FERRY_FUZZ_TARGETS:-fuzz_frame}
elif [[ "${1:-}" == "--time" ]]; then
	TIME=${2:?"fuzz.sh: --time needs SECONDS"}
	[[ "$TIME" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: SECONDS must be a positive integer" >&2; exit 2; }
elif [[ -n "${1:-}" ]]; then
	RUNS=$1
	[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: RUNS must be a positive integer" >&2; exit 2; }
fi
command -v clang >/dev/null || { echo "fuzz.sh: clang not found (apt-get install clang)" >&2; exit 2; }
BUILD=${FERRY_FUZZ_BUILD_DIR:-build-fuzz}
TARGETS=${FERRY_FUZZ_TARGETS:-"fuzz_frame fuzz_codec fuzz_map fuzz_idx fuzz_rpc fuzz_reply fuzz_ctr"}
CC=clang cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug -DFERRY_FUZZ=ON \
	-DFERRY_TESTS=OFF -DFERRY_WITH_CUDA=OFF \
	-DFERRY_SANITIZER=address,undefined >/dev/null
# shellcheck disable=SC2086
cmake --build "$BUILD" -j"$(nproc)" --target $TARGETS >"$BUILD/fuzz-build.log" 2>&1 || {
	tail -n 40 "$BUILD/fuzz-build.log"
	exit 1
}
WORK=$(mktemp -d /tmp/ferry-fuzz.XXXXXX)
mkdir -p bench/results
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
json="{" sep="" failed=0
printf '%-11s %10s %9s %7s %7s  %s\n' target execs exec/s cov ft result
for t in $TARGETS; do
	mkdir -p "$WORK/$t"
	cp tests/fuzz/corpus/"$t"/* "$WORK/$t/"
	args=(-rss_limit_mb=2048 -timeout=10 -artifact_prefix="$WORK/$t-")
	if [[ "$TIME" -gt 0 ]]; then
		args+=(-max_total_time="$TIME")
	else
		args+=(-runs="$RUNS")
	fi
	# fuzz_rpc keeps its job up across inputs: nothing it holds is a leak,
	# per input or at exit (replies nng still has in flight then).
	asan=$ASAN_OPTIONS
	if [[ "$t" == fuzz_rpc ]]; then
		args+=(-detect_leaks=0)
		asan=abort_on_error=1:detect_leaks=0
	fi
	start=$(date +%s.%N)
	if ASAN_OPTIONS=$asan "$BUILD/tests/fuzz/$t" "${args[@]}" "$WORK/$t" >"$WORK/$t.log" 2>&1; then
		result=ok
	else
		result="FOUND (see $WORK/$t.log)"
		failed=1
	fi
	end=$(date +%s.%N)
	line=$(grep -E '^#[0-9]+' "$WORK/$t.log" | tail -n 1)
	execs=$(sed -E 's/^#([0-9]+).*/\1/' <<<"$line")
	cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$line")
	ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$line")
	rate=$(awk -v n="$execs" -v a="$start" -v b="$end" 'BEGIN { printf "%.0f", n / (b - a) }')
	printf '%-11s %10s %9s %7s %7s  %s\n' "$t" "$execs" "$rate" "${cov:-0}" "${ft:-0}" "$result"
	json+="$sep\"$t\":{\"execs\":${execs:-0},\"execs_per_s\":$rate,\"cov\":${cov:-0},\"ft\":${ft:-0},\"ok\":$([[ $result == ok ]] && echo true || echo false)}"
	sep=","
done
out=bench/results/fuzz.json
[[ -n "${FERRY_FUZZ_TARGETS:-}" ]] && out=bench/results/fuzz-${FERRY_FUZZ_TARGETS// /-}.json
((!SMOKE)) || out=$WORK/fuzz.json
echo "$json}" >"$out"
echo "wrote $out"
[[ $failed -eq 0 ]] && ((!SMOKE)) && rm -rf "$WORK"
exit $failed
