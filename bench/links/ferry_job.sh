#!/usr/bin/env bash
# ferry_job.sh — run one Ferry training job over emulated links: a host
# "srv" (scheduler + 1 server; with --servers N, N-1 more server hosts
# srv1..srv{N-1}) and T trainer hosts t0..t{T-1}, every link
# shaped to RATE (both directions) by netsim.sh, optionally with DELAY_MS of
# added one-way latency on the trainers' path to the server (delay relay).
# Prints rank 0's output (progress lines and the summary JSON) on stdout.
#
#   ferry_job.sh [--rate 100mbit|none] [--delay-ms D] [--trainers T]
#                [--servers N]
#                [--rate-of R=RATE]... [--curve FILE] [--time-cap S]
#                [--build DIR] [--name NET] -- [trainer flags...]
#
# --rate-of R=RATE shapes trainer R's link to RATE instead (mixed links:
# --rate none --rate-of 0=1gbit --rate-of 1=20mbit); --curve FILE gives
# rank 0 alone --curve FILE (accuracy against wall time). --time-cap S
# sends the trainers SIGTERM after S seconds (SIGKILL 30 s later): they
# stop between steps, print their summary and leave the job, so a capped
# run still reports.
#
# Builds DIR (default build/) with scripts/setup.sh when its binaries are
# missing. Exit 77 (skip) when network namespaces are not available (not
# root).
#
#   ferry_job.sh --smoke     # ctest -L bench-smoke: 2 trainers at 100mbit
#                            # for 20 steps with what FERRY_BUILD_DIR holds
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
NETSIM="$HERE/netsim.sh"
rate=none delay=0 trainers=2 servers=1 build="$ROOT/build" name="fj$$" curve="" cap=0
declare -A rate_of=()
if [ "${1:-}" = --smoke ]; then
	build=${FERRY_BUILD_DIR:-$build}
	[ -x "$build/ps/ps-server" ] && [ -x "$build/trainer/trainer" ] ||
		{ echo "ferry_job: no ps-server or trainer in $build" >&2; exit 1; }
	set -- --rate 100mbit --build "$build" -- --epochs=1 --max-steps=20 \
		--log-interval=5
fi
while (($#)); do
	case "$1" in
	--rate) rate=$2; shift 2 ;;
	--delay-ms) delay=$2; shift 2 ;;
	--trainers) trainers=$2; shift 2 ;;
	--servers) servers=$2; shift 2 ;;
	--rate-of) rate_of[${2%%=*}]=${2#*=}; shift 2 ;;
	--curve) curve=$2; shift 2 ;;
	--time-cap) cap=$2; shift 2 ;;
	--build) build=$2; shift 2 ;;
	--name) name=$2; shift 2 ;;
	--) shift; break ;;
	*) echo "ferry_job: unknown flag $1" >&2; exit 2 ;;
	esac
done
"$NETSIM" check || exit 77
PS="$build/ps/ps-server" TR="$build/trainer/trainer"
# A fresh clone has no build: setup.sh installs what is missing and builds.
if [ ! -x "$PS" ] || [ ! -x "$TR" ]; then
	FERRY_BUILD_DIR="$build" "$ROOT/scripts/setup.sh" >&2
fi
# FERRY_JOB_RUN_DIR keeps the logs and the other ranks' output there.
RUN=${FERRY_JOB_RUN_DIR:-$(mktemp -d /tmp/ferry-links.XXXXXX)}
hosts=("srv:$rate")
for ((i = 1; i < servers; i++)); do hosts+=("srv$i:$rate"); done
for ((r = 0; r < trainers; r++)); do hosts+=("t$r:${rate_of[$r]:-$rate}"); done
relay_pid="" cap_pid=""
cleanup() {
	[ -n "$cap_pid" ] && kill "$cap_pid" 2>/dev/null || true
	[ -n "$relay_pid" ] && kill "$relay_pid" 2>/dev/null || true
	"$NETSIM" down "$name" || true
}
trap cleanup EXIT
"$NETSIM" up "$name" "${hosts[@]}"
SIP=$("$NETSIM" ip "$name" srv)

"$NETSIM" exec "$name" srv "$PS" --role=scheduler --trainers="$trainers" \
	--servers="$servers" --listen="tcp://$SIP:7000" --log-level=warn \
	2>"$RUN/scheduler.log" &
srv_args=(--role=server --scheduler="tcp://$SIP:7000" --log-level=warn)
if [ "$delay" != 0 ]; then
	# Server on 7001, the relay on 7101 in front of it; trainers dial the relay.
	srv_args+=(--listen="tcp://$SIP:7001" --advertise="tcp://$SIP:7101")
	relay_pid=$("$NETSIM" relay "$name" srv 7101 "$SIP:7001" "$delay")
else
	srv_args+=(--listen="tcp://$SIP:7001")
fi
sleep 0.2
"$NETSIM" exec "$name" srv "$PS" "${srv_args[@]}" 2>"$RUN/server.log" &
# The other servers (no delay relay in front of them).
for ((i = 1; i < servers; i++)); do
	ip_i=$("$NETSIM" ip "$name" "srv$i")
	"$NETSIM" exec "$name" "srv$i" "$PS" --role=server \
		--scheduler="tcp://$SIP:7000" --log-level=warn \
		--listen="tcp://$ip_i:7001" 2>"$RUN/server-$i.log" &
done
tp=()
for ((r = 0; r < trainers; r++)); do
	if ((r == 0)); then
		"$NETSIM" exec "$name" "t$r" "$TR" --scheduler="tcp://$SIP:7000" \
			--rank=$r ${curve:+--curve="$curve"} "$@" \
			2>"$RUN/trainer-$r.log" &
	else
		"$NETSIM" exec "$name" "t$r" "$TR" --scheduler="tcp://$SIP:7000" \
			--rank=$r "$@" >"$RUN/trainer-$r.out" 2>"$RUN/trainer-$r.log" &
	fi
	tp+=($!)
done
if ((cap > 0)); then
	# SIGKILL 30 s later: a trainer stuck on its way out (nng 1.5's
	# nng_close can deadlock in ferry_client_leave) must not hold the
	# benchmark; its summary and curve are written by then.
	(sleep "$cap" && kill -TERM "${tp[@]}" 2>/dev/null
	sleep 30 && kill -KILL "${tp[@]}" 2>/dev/null) &
	cap_pid=$!
fi
rc=0
for p in "${tp[@]}"; do wait "$p" || rc=$?; done
if ((rc != 0)); then
	echo "ferry_job: a trainer failed (exit $rc):" >&2
	tail -n 3 "$RUN"/trainer-*.log >&2 || true
fi
exit $rc
