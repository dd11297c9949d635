#!/usr/bin/env bash
# lose_server.sh — issue 24's scenario, run N times: a job of a scheduler,
# 2 servers and 2 trainers on loopback (sync, SGD, lossless pull, the
# defaults, --epochs 1) loses one server at a random moment: kill -9 and a
# restart 1 s later on the same URL (fixed --listen ports), or SIGSTOP for
# 10 s (past --dead-after-ms) and SIGCONT. A fault-free run of the same
# flags comes first. Prints, per run: whether the job finished, whether
# each trainer's final weights (--weights-out) equal the fault-free run's
# byte for byte, the detection and recovery times from the logs (as
# bench/chaos.sh defines them, docs/benchmarks.md "Chaos"), and any healthy
# member the scheduler declared dead; then a summary. The harness is
# bench/chaos/lose_server.py; its run directory (printed) keeps every
# run's logs.
#
#   bench/lose_server.sh [--runs N] [--signal kill|stop] [--replicas R]
#                        [--stop-s S] [--epochs E] [--max-steps N]
#                        [--shard-bytes B] [--deadline-s S] [--seed S]
#                        [--json FILE]
#
# Defaults: 20 runs, kill, 1 replica, 10 s stops, a 240 s deadline per run.
# Exit 0 when every run finished with the fault-free weights and no healthy
# member declared dead; 1 otherwise; 2 on a bad flag. FERRY_BUILD_DIR
# picks the build directory (default build; built with scripts/setup.sh
# unless it already holds ps-server and trainer or FERRY_SKIP_SETUP=1);
# FERRY_DATA_DIR the data set (default /usr/share/datasets/fashion-mnist).
#
#   bench/lose_server.sh --smoke    # ctest -L bench-smoke: 1 kill run
#                                   # of a 300-step job, JSON in the run
#                                   # directory
set -euo pipefail
cd "$(dirname "$0")/.."
smoke=0 args=()
usage() {
	echo "usage: bench/lose_server.sh [--smoke] [--runs N] [--signal kill|stop] [--replicas R]" \
		"[--stop-s S] [--epochs E] [--max-steps N] [--shard-bytes B] [--deadline-s S] [--seed S] [--json FILE]" >&2
	exit 2
}
while (($#)); do
	case "$1" in
	--smoke) smoke=1; shift ;;
	--signal) [[ "${2:-}" =~ ^(kill|stop)$ ]] || usage; args+=("$1" "$2"); shift 2 ;;
	--runs | --replicas | --epochs | --max-steps | --shard-bytes | --seed)
		[[ "${2:-}" =~ ^[0-9]+$ ]] || usage; args+=("$1" "$2"); shift 2 ;;
	--stop-s | --deadline-s)
		[[ "${2:-}" =~ ^[0-9]+([.][0-9]+)?$ ]] || usage; args+=("$1" "$2"); shift 2 ;;
	--json) [ -n "${2:-}" ] || usage; args+=("$1" "$2"); shift 2 ;;
	*) usage ;;
	esac
done
BUILD=${FERRY_BUILD_DIR:-build}
PS="$BUILD/ps/ps-server" TR="$BUILD/trainer/trainer"
built() { [ -x "$PS" ] && [ -x "$TR" ]; }
# A fresh clone builds (--smoke too: there is nothing else to run), unless
# FERRY_SKIP_SETUP=1 (ctest's bench-smoke sets it, with its build tree).
built || [ "${FERRY_SKIP_SETUP:-0}" = 1 ] || FERRY_BUILD_DIR="$BUILD" scripts/setup.sh
built || { echo "lose_server.sh: no ps-server/trainer in $BUILD" >&2; exit 1; }
DATA=${FERRY_DATA_DIR:-/usr/share/datasets/fashion-mnist}
((!smoke)) || [ -d "$DATA" ] || { echo "lose_server.sh: SKIP: no data set"; exit 77; }
[ -d "$DATA" ] || { echo "lose_server.sh: no data set at $DATA (set FERRY_DATA_DIR)" >&2; exit 1; }
RUN=$(mktemp -d /tmp/ferry-lose-server.XXXXXX)
((!smoke)) || args=(--runs 1 --max-steps 300 --deadline-s 120 --json "$RUN/lose_server.json" "${args[@]}")
# exec: the harness kills its job on SIGTERM, SIGINT and SIGHUP, and the
# kernel kills the job if the harness dies (PDEATHSIG).
exec python3 bench/chaos/lose_server.py --ps "$PS" --tr "$TR" --data "$DATA" \
	--run "$RUN" "${args[@]}"
