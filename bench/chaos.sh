#!/usr/bin/env bash
# chaos.sh — one fault after another for M minutes (issue 24): a sync job
# of a scheduler, 2 servers and 3 trainers on loopback (the default MLP,
# SGD, lossless pull, --shard-bytes 65536) sized to run the whole time;
# every few seconds kill -9 or SIGSTOP (1-4 s, then SIGCONT) one process,
# the scheduler, a server or a trainer, in a shuffled rotation of the six
# kinds; a killed one is restarted a second later with the same flags (the
# scheduler on its URL and --state-dir, a server on its URL, a trainer
# under its rank). One fault at a time: the next waits for recovery (every
# trainer prints a new step), and a recovery past its deadline is a hang.
# At the end every trainer must have finished every step, with rank 0's
# test accuracy within 1 point of a fault-free run of the same flags (run
# after the chaos unless --fault-free-acc gives it). Writes JSON (default
# bench/results/chaos.json) with faults, hangs, jobs_lost, acc,
# acc_fault_free, detect_ms_median, recover_ms_median, recover_ms_max, and
# more (detect_ms_max, faults_by_kind, jobs, fault_log): see
# docs/benchmarks.md "Chaos" for the definitions. The harness is
# bench/chaos/chaos.py; its run directory (printed) holds faults.log,
# every fault and recovery with the log line that noticed it, and each
# job's logs.
#
#   bench/chaos.sh [--minutes M] [--replicas R] [--steps N] [--seed S]
#                  [--fault-free-acc A] [--recover-deadline-s S]
#                  [--kinds kill-scheduler,stop-server,...] [JSON]
#
# --kinds limits the faults to some of the six kinds (kill-scheduler,
# kill-server, kill-trainer, stop-scheduler, stop-server, stop-trainer).
#
# Exit 0 when there was no hang and no job lost, every step was done and
# the accuracy is within 1 point; 1 otherwise (the JSON is written either
# way); 2 on a bad flag. FERRY_BUILD_DIR picks the build directory
# (default build; built with scripts/setup.sh unless it already holds
# ps-server and trainer or FERRY_SKIP_SETUP=1); FERRY_DATA_DIR the data
# set (default /usr/share/datasets/fashion-mnist).
#
#   bench/chaos.sh --smoke [JSON]   # ctest -L bench-smoke: 15 s of faults
#                                   # on a 1500-step job, then its
#                                   # fault-free run, no accuracy check;
#                                   # the JSON in the run directory
set -euo pipefail
cd "$(dirname "$0")/.."
smoke=0 MIN=10 REPL=1 JSON="" extra=()
usage() {
	echo "usage: bench/chaos.sh [--smoke] [--minutes M] [--replicas R] [--steps N] [--seed S]" \
		"[--fault-free-acc A] [--recover-deadline-s S] [--kinds K,...] [--verbose] [JSON]" >&2
	exit 2
}
num() { [[ "$2" =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "chaos.sh: $1 needs a number, not '$2'" >&2; exit 2; }; }
while (($#)); do
	case "$1" in
	--smoke) smoke=1; shift ;;
	--minutes) num "$1" "${2:-}"; MIN=$2; shift 2 ;;
	--replicas) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || usage; REPL=$2; shift 2 ;;
	--kinds) [ -n "${2:-}" ] || usage; extra+=("$1" "$2"); shift 2 ;;
	--steps | --seed | --fault-free-acc | --recover-deadline-s)
		num "$1" "${2:-}"; extra+=("$1" "$2"); shift 2 ;;
	--verbose) extra+=("$1"); shift ;;
	-h | --help) usage ;;
	-*) echo "chaos.sh: unknown flag $1" >&2; usage ;;
	*) [ -z "$JSON" ] || usage; JSON=$1; shift ;;
	esac
done
BUILD=${FERRY_BUILD_DIR:-build}
PS="$BUILD/ps/ps-server" TR="$BUILD/trainer/trainer"
built() { [ -x "$PS" ] && [ -x "$TR" ]; }
# A fresh clone builds (--smoke too: there is nothing else to run), unless
# FERRY_SKIP_SETUP=1 (ctest's bench-smoke sets it, with its build tree).
built || [ "${FERRY_SKIP_SETUP:-0}" = 1 ] || FERRY_BUILD_DIR="$BUILD" scripts/setup.sh
built || { echo "chaos.sh: no ps-server/trainer in $BUILD" >&2; exit 1; }
DATA=${FERRY_DATA_DIR:-/usr/share/datasets/fashion-mnist}
((!smoke)) || [ -d "$DATA" ] || { echo "chaos.sh: SKIP: no data set"; exit 77; }
[ -d "$DATA" ] || { echo "chaos.sh: no data set at $DATA (set FERRY_DATA_DIR)" >&2; exit 1; }
RUN=$(mktemp -d /tmp/ferry-chaos.XXXXXX)
if ((smoke)); then
	MIN=0.25
	extra=(--steps 1500 --no-acc-check "${extra[@]}")
	JSON=${JSON:-$RUN/chaos.json}
fi
JSON=${JSON:-bench/results/chaos.json}
if [ ! -w "$(dirname "$JSON")" ] || { [ -e "$JSON" ] && [ ! -w "$JSON" ]; }; then
	echo "chaos.sh: cannot write $JSON" >&2
	exit 2
fi
echo "chaos.sh: $MIN min of faults, --replicas $REPL, on $(nproc) cores; run directory $RUN" >&2
# exec: the harness is the process to signal; it kills its job on SIGTERM,
# SIGINT and SIGHUP, and the kernel kills the job if it dies (PDEATHSIG).
exec python3 bench/chaos/chaos.py --ps "$PS" --tr "$TR" --data "$DATA" \
	--run "$RUN" --json "$JSON" --minutes "$MIN" --replicas "$REPL" \
	"${extra[@]}"
