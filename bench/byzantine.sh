#!/usr/bin/env bash
# byzantine.sh — untrusted trainers (issue 31): robust aggregation against
# attacking trainers, and spot checks that catch a falsifying one. Local
# jobs of 8 sync trainers (a 784-64-10 MLP on Fashion-MNIST, batch 16, one
# server): for each --aggregate rule a clean run, then 1..3 attackers
# with each attack (sign-flip, scale, noise, "a little is enough",
# inner-product manipulation, label flipping, a lazy trainer); then
# --runs seeded jobs where one trainer falsifies 10% of its pushes, the
# servers keep 2% of the pushes (and the robust aggregate's outliers) for
# a verifier that recomputes them, and a mismatch quarantines it
# (bench/byzantine.py says how each figure is made).
#
# Writes bench/results/byzantine.json: `runs` (attack, aggregate,
# attackers, trainers, acc, acc_clean, round_ms; attack "none" for the
# clean runs) and `spot_check` (rate, falsify_rate, caught_runs, runs,
# median_steps_to_catch, false_positives).
#
#   bench/byzantine.sh            # everything (~30 minutes on 2 cores)
#   bench/byzantine.sh --quick    # 2 attackers only, 20 spot-check runs
#   bench/byzantine.sh --smoke    # a few steps of 2 jobs and one spot
#                                 # check, JSON in a temp dir (ctest)
#   options: --steps N, --runs N, --only aggregation|clean|spot (a part
#   alone replaces its own part of an existing byzantine.json; clean: the
#   clean runs' round times again, 5 interleaved repeats)
# Builds with scripts/setup.sh first (not --smoke); FERRY_BUILD_DIR picks
# the build directory, FERRY_RESULTS_DIR where byzantine.json goes,
# FERRY_DATA_DIR the data set (/usr/share/datasets/fashion-mnist).
set -euo pipefail
cd "$(dirname "$0")/.."
smoke=0 extra=()
cmdline="bench/byzantine.sh $*"
while (($#)); do
	case "$1" in
	--smoke)
		smoke=1
		extra+=(--steps 30 --repeat 1 --attackers 2 --attacks scale:-4
			--aggregates mean,median --runs 1 --lazy-runs 0 --catch-steps 200
			--rate 0.2 --falsify-rate 0.5 --timeout 240)
		shift ;;
	--quick) extra+=(--attackers 2 --runs 20); shift ;;
	--steps | --runs) extra+=("$1" "$2"); shift 2 ;;
	--only)
		case "$2" in
		aggregation) extra+=(--skip-spot) ;;
		clean) extra+=(--skip-spot --attacks none --repeat 5) ;;
		spot) extra+=(--skip-aggregation) ;;
		*) echo "byzantine.sh: --only aggregation|clean|spot, not $2" >&2
			exit 2 ;;
		esac
		shift 2 ;;
	-h | --help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "byzantine.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
BUILD=${FERRY_BUILD_DIR:-build}
RESULTS=${FERRY_RESULTS_DIR:-bench/results}
DATA=${FERRY_DATA_DIR:-/usr/share/datasets/fashion-mnist}
if ((smoke)); then
	RESULTS=${FERRY_RESULTS_DIR:-$(mktemp -d /tmp/ferry-byz-smoke.XXXXXX)}
else
	[ -n "${FERRY_SKIP_SETUP:-}" ] || scripts/setup.sh
	cmake --build "$BUILD" -j2 --target ps-server trainer >/dev/null
fi
BUILD=$(cd "$BUILD" && pwd)
PS=$BUILD/ps/ps-server TR=$BUILD/trainer/trainer
for b in "$PS" "$TR"; do
	[ -x "$b" ] || { echo "byzantine.sh: no $b (build it first)" >&2; exit 1; }
done
if ! ls "$DATA"/train-images-idx3-ubyte* >/dev/null 2>&1; then
	echo "byzantine.sh: no Fashion-MNIST in $DATA: skipped" >&2
	exit 77
fi
RAW=${FERRY_BENCH_DIR:-$(mktemp -d /tmp/ferry-byz.XXXXXX)}
mkdir -p "$RESULTS"
echo "byzantine.sh: logs in $RAW" >&2
/usr/bin/python3 bench/byzantine.py --ps "$PS" --tr "$TR" --data "$DATA" \
	--raw "$RAW" --out "$RESULTS/byzantine.json" --command "$cmdline" \
	"${extra[@]}"
if ((smoke)); then
	/usr/bin/python3 - "$RESULTS/byzantine.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
runs = r["runs"]
keys = {"attack", "aggregate", "attackers", "trainers", "acc", "acc_clean",
        "round_ms"}
assert runs and all(keys <= set(x) for x in runs), runs
assert any(x["attack"] == "none" for x in runs)
sc = r["spot_check"]
for k in ("rate", "falsify_rate", "caught_runs", "runs",
          "median_steps_to_catch", "false_positives"):
    assert k in sc, k
assert sc["false_positives"] == 0, sc
print("byzantine smoke: %d runs, spot check %s" % (len(runs), {
    k: sc[k] for k in ("caught_runs", "runs", "false_positives")}))
PY
fi
