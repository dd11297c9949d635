#!/usr/bin/env bash
# elastic.sh — the soak of an elastic job (issue 27): a local job of
# --trainers 1:6 (a scheduler with --state-dir, 2 servers, heartbeats every
# 200 ms: a killed trainer is out in 0.4 s, a silent member after 2 s) whose trainers start without
# --rank and take data leases; for --minutes M random joins, graceful
# leaves (SIGTERM) and kill -9s of trainers (1..6 alive, one event every
# ~4 s: >= 100 in 10 minutes) and one scheduler kill -9 + restart on its
# --state-dir; then the job finishes its epochs. It checks from the
# scheduler's lease records that every sample of every epoch was consumed
# exactly once, that no exchange waited past the death-detection time
# (+1 s), measures a join's time to its first applied step, and compares
# the final test accuracy with a run of fixed ranks (as many as were alive
# on average) over the same samples (bench/elastic.py says how each
# figure is made).
#
# Writes bench/results/elastic.json: events, events_by_kind, hangs,
# hang_bound_ms, max_wait_ms, samples_lost, samples_doubled,
# join_to_step_p50_ms, join_to_step_p99_ms, acc, acc_fixed, ... Exit
# status 1 when a sample was lost or doubled, a round hung or the job did
# not finish.
#
#   bench/elastic.sh               # 10 minutes of events (~20 minutes)
#   bench/elastic.sh --minutes 1   # a CI-length run (~3 minutes)
#   bench/elastic.sh --smoke       # seconds of events, 1 epoch, JSON in a
#                                  # temp dir (ctest -L bench-smoke)
#   options: --epochs E (default: about 1.7 per minute), --seed S,
#            --no-fixed (skip the fixed-membership run)
# Builds with scripts/setup.sh first (not --smoke); FERRY_BUILD_DIR picks
# the build directory, FERRY_RESULTS_DIR where elastic.json goes,
# FERRY_DATA_DIR the data set (/usr/share/datasets/fashion-mnist).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=10 smoke=0 extra=()
cmdline="bench/elastic.sh $*"
while (($#)); do
	case "$1" in
	--minutes) minutes=$2; shift 2 ;;
	--smoke) smoke=1; minutes=0.4; shift ;;
	--epochs | --seed) extra+=("$1" "$2"); shift 2 ;;
	--no-fixed) extra+=(--no-fixed); shift ;;
	-h | --help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "elastic.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
BUILD=${FERRY_BUILD_DIR:-build}
RESULTS=${FERRY_RESULTS_DIR:-bench/results}
DATA=${FERRY_DATA_DIR:-/usr/share/datasets/fashion-mnist}
if ((smoke)); then
	RESULTS=${FERRY_RESULTS_DIR:-$(mktemp -d /tmp/ferry-elastic-smoke.XXXXXX)}
	extra+=(--epochs 1)
else
	[ -n "${FERRY_SKIP_SETUP:-}" ] || scripts/setup.sh
	cmake --build "$BUILD" -j2 --target ps-server trainer >/dev/null
fi
BUILD=$(cd "$BUILD" && pwd)
PS=$BUILD/ps/ps-server TR=$BUILD/trainer/trainer
for b in "$PS" "$TR"; do
	[ -x "$b" ] || { echo "elastic.sh: no $b (build it first)" >&2; exit 1; }
done
if ! ls "$DATA"/train-images-idx3-ubyte* >/dev/null 2>&1; then
	echo "elastic.sh: no Fashion-MNIST in $DATA: skipped" >&2
	exit 77
fi
RAW=${FERRY_BENCH_DIR:-$(mktemp -d /tmp/ferry-elastic.XXXXXX)}
mkdir -p "$RESULTS"
echo "elastic.sh: $minutes minute(s) of events; logs in $RAW" >&2
exec /usr/bin/python3 bench/elastic.py --minutes "$minutes" \
	--ps "$PS" --tr "$TR" --data "$DATA" --raw "$RAW" \
	--out "$RESULTS/elastic.json" --command "$cmdline" "${extra[@]}"
