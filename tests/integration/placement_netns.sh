#!/usr/bin/env bash
# placement_netns.sh — latency-aware placement over emulated links (issue 4).
# Network namespaces (bench/links/netsim.sh): a scheduler, two servers and two
# trainers; server s1's link is shaped 10x slower (100mbit) than server s0's
# (1gbit); trainers' links are not shaped. The job runs 20 steps with
# --placement=latency and again with --placement=uniform; the test reads the
# scheduler's log (which index was s1, by its registered IP; the bytes each
# server got) and asserts:
#   latency: slow server's bytes < fast server's, and <= 1/4 of them;
#   uniform gave the slow server more bytes than latency did;
#   both jobs finished all 20 steps on both trainers.
#
#   placement_netns.sh PS_SERVER TRAINER     (or env PS, TR)
# Exit 0 pass, 1 fail, 77 skip (no root / no namespaces).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PS=${1:-${PS:-}} TR=${2:-${TR:-}}
NETSIM="$ROOT/bench/links/netsim.sh"
NET="plnt$$"
[ -x "$PS" ] && [ -x "$TR" ] || { echo "usage: $0 PS_SERVER TRAINER" >&2; exit 1; }
if ! "$NETSIM" check; then
	echo "placement_netns: SKIP: network namespaces unavailable (needs root)" >&2
	exit 77
fi
# shellcheck source=../../bench/placement/lib.sh
. "$ROOT/bench/placement/lib.sh"
WORK=$(mktemp -d /tmp/placement-netns.XXXXXX)
fail=0
cleanup() {
	pl_down
	if ((fail)); then
		echo "placement_netns: logs kept in $WORK" >&2
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
trap 'fail=1; exit 1' INT TERM
bad() { echo "placement_netns: FAIL: $*" >&2; fail=1; }

STEPS=20
pl_up 1gbit 100mbit none || { echo "placement_netns: netsim up failed" >&2; fail=1; exit 1; }
declare -A SLOW FAST
for pl in latency uniform; do
	d="$WORK/$pl"
	if ! pl_job "$pl" "$STEPS" "$d"; then
		bad "$pl job did not finish (see $d)"
		continue
	fi
	for r in 0 1; do
		grep -q "\"steps\": $STEPS," "$d/t$r.out" || bad "$pl: trainer $r did not run $STEPS steps"
	done
	si=$(pl_slow_index "$d" "$PL_S1")
	fi_=$(pl_slow_index "$d" "$PL_S0")
	[ -n "$si" ] && [ -n "$fi_" ] || { bad "$pl: servers' registration not in log"; continue; }
	SLOW[$pl]=$(pl_load "$d" "$si")
	FAST[$pl]=$(pl_load "$d" "$fi_")
	[ -n "${SLOW[$pl]}" ] && [ -n "${FAST[$pl]}" ] || { bad "$pl: server loads not in log"; continue; }
	echo "placement_netns: $pl: slow server m$si got ${SLOW[$pl]} bytes, fast m$fi_ ${FAST[$pl]} bytes; step $(pl_step_ms "$d") ms; $(grep -o 'F [0-9.]* ms, LB.*' "$d/sch.log" | tail -1)"
done
if [ -n "${SLOW[latency]:-}" ] && [ -n "${SLOW[uniform]:-}" ]; then
	((SLOW[latency] < FAST[latency])) || bad "latency: slow server got ${SLOW[latency]} >= fast ${FAST[latency]}"
	((4 * SLOW[latency] <= FAST[latency])) || bad "latency: slow server got more than 1/4 of the fast one's bytes"
	((SLOW[uniform] > SLOW[latency])) || bad "uniform gave the slow server ${SLOW[uniform]} <= latency's ${SLOW[latency]}"
else
	bad "missing results"
fi
((fail)) && exit 1
echo "placement_netns: PASS"
exit 0
