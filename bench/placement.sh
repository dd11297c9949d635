#!/usr/bin/env bash
# placement.sh — benchmark latency-aware vs uniform shard placement (issue 4).
# Runs the default job (784-256-128-10 MLP, 2 servers, 2 trainers, sync,
# --shard-bytes 65536 = 19 shards) for STEPS steps over netsim.sh namespaces:
#   base  all links unshaped (gives compute time per step = step - F)
#   a     server s1's link 100mbit, s0's 1gbit (1/10), trainers unshaped
#   b     both servers 1gbit; asymmetric RTT via delay relays in each
#         trainer's namespace: t0 +1 ms RTT to s0, +20 ms to s1; t1 reverse
#         (servers advertise tcp://srvM:PORT, resolved per namespace by
#         /etc/netns/<ns>/hosts)
#   c     both servers 1gbit, trainers unshaped (all equal)
# REPS repeats of uniform and latency each, interleaved. Writes
# bench/results/placement.json and bench/placement/RESULTS.md's table.
#
# Step = the slower trainer's median step after its first 10
# (bench/placement/steady.py): the start-up probes' traffic has drained
# from tbf's queues by then, so equal assignments measure equal.
#
#   bench/placement.sh [--build DIR] [--steps N] [--reps R] [--keep DIR]
#                      [--scenarios "base a b c"]
# Builds DIR (default build-place/) with scripts/setup.sh first, so a fresh
# clone needs nothing else. Exit 77 when network namespaces are unavailable.
#
#   bench/placement.sh --smoke    # seconds (ctest -L bench-smoke): base and
#                                 # a, 12 steps, 1 rep, what FERRY_BUILD_DIR
#                                 # holds, the JSON in the run directory
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BUILD="$ROOT/build-place" STEPS=60 REPS=5 KEEP="" SCEN="base a b c" SMOKE=0
while (($#)); do
	case "$1" in
	--smoke)
		SMOKE=1 STEPS=12 REPS=1 SCEN="base a"
		BUILD=${FERRY_BUILD_DIR:-$ROOT/build}
		shift ;;
	--build) BUILD=$2; shift 2 ;;
	--steps) STEPS=$2; shift 2 ;;
	--reps) REPS=$2; shift 2 ;;
	--keep) KEEP=$2; shift 2 ;;
	--scenarios) SCEN=$2; shift 2 ;;
	*) echo "placement.sh: unknown flag $1" >&2; exit 2 ;;
	esac
done
PS="$BUILD/ps/ps-server" TR="$BUILD/trainer/trainer"
NETSIM="$ROOT/bench/links/netsim.sh" NET="plb$$"
"$NETSIM" check || exit 77
# setup.sh installs what is missing and builds (incrementally) into $BUILD:
# ps-server, trainer and the static libraries evalplace links.
((SMOKE)) || FERRY_BUILD_DIR="$BUILD" "$ROOT/scripts/setup.sh"
. "$HERE/placement/lib.sh"
RUN=${KEEP:-$(mktemp -d /tmp/placement-bench.XXXXXX)}
mkdir -p "$RUN"
EVAL="$RUN/evalplace"
cc -O2 -std=c11 -I"$ROOT/sharding/include" -I"$ROOT/base/include" \
	"$HERE/placement/evalplace.c" "$BUILD/sharding/libshard.a" \
	"$BUILD/base/libfb.a" -lz -lm -lpthread -o "$EVAL"
trap 'pl_down' EXIT
# 4 MiB bulk probe: tbf's burst (≥128 KiB; 500 KB at 1gbit) inflates a 1 MiB probe.
PROBE=(--probe-bytes=4194304)
cat >"$RUN/scenarios.json" <<'J'
{"a": "s0 link 1gbit, s1 link 100mbit (1/10), trainers unshaped",
 "b": "s0,s1 1gbit; added RTT t0->s0 1 ms, t0->s1 20 ms, t1->s0 20 ms, t1->s1 1 ms (delay relays)",
 "c": "s0,s1 1gbit, trainers unshaped (all equal)"}
J
scenario() { # NAME RATE_S0 RATE_S1 [RTT delays...]
	local name=$1 rep pl
	pl_up "$2" "$3" none
	(($# > 3)) && pl_rtt "$4" "$5" "$6" "$7"
	for ((rep = 0; rep < REPS; rep++)); do
		for pl in uniform latency; do
			[ "$name" = base ] && [ "$pl" = uniform ] && continue
			pl_job "$pl" "$STEPS" "$RUN/$name/$pl-$rep" "${PROBE[@]}" ||
				echo "placement.sh: $name $pl rep $rep failed" >&2
			echo "$name $pl $rep: $(pl_step_ms "$RUN/$name/$pl-$rep" 2>/dev/null) ms" >&2
		done
	done
	pl_down
}
for sc in $SCEN; do
	case $sc in
	base) scenario base none none ;;
	a) scenario a 1gbit 100mbit ;;
	b) scenario b 1gbit 1gbit 0.5 10 10 0.5 ;;
	c) scenario c 1gbit 1gbit ;;
	*) echo "placement.sh: unknown scenario $sc" >&2; exit 2 ;;
	esac
done
OUT="$ROOT/bench/results/placement.json"
((!SMOKE)) || OUT="$RUN/placement.json"
python3 "$HERE/placement/analyze.py" "$RUN" "$EVAL" "$OUT" "$RUN/table.md"
echo "runs kept in $RUN" >&2
