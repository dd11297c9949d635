#!/usr/bin/env bash
# ssp.sh — the stale-synchronous sweep (issue 13): Fashion-MNIST on a local
# job of 2 servers and 2 trainers, rank 1 slowed to about half speed with
# --slow-ms, in sync mode and in SSP with K = 0, 1, 4 and "inf" (K =
# 1e9: never waits, as async). Reports per run the job's samples/s (all
# trainers' samples over the job's wall time, the slowest trainer's
# wall_s), the sum of the trainers' own samples/s, rank 0's test accuracy
# after the run, and the pull staleness (mean, max) of both ranks, and
# writes bench/results/ssp.json (make_report.py renders it into
# docs/benchmarks.md).
#
#   bench/ssp.sh [--quick] [EPOCHS [REPS]]   # default 3 epochs, 3 reps
#
# Each configuration runs REPS times, the configurations interleaved (so
# a burst of load on a shared machine hits them alike); the table gives
# the medians over repetitions.
# The straggler's delay is calibrated in the same run: a short sync run
# without it measures the mean step time (compute and push-pull), and
# --slow-ms is that (at least 1 ms), so rank 1's steps take about twice
# as long as they would. --quick: 1 epoch, 1 repetition. Set-up and build go through scripts/setup.sh;
# FERRY_BUILD_DIR picks the build directory, FERRY_BENCH_DIR the raw logs.
# --smoke (ctest -L bench-smoke): seconds, 30 steps a job, what is built
# as it is, the JSON beside the raw logs instead of bench/results.
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=3 reps=3 pos=0 smoke=0
for a in "$@"; do
	case "$a" in
	--quick) epochs=1 reps=1 ;;
	--smoke) epochs=1 reps=1 smoke=1 ;;
	-h | --help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*)
		[[ "$a" =~ ^[1-9][0-9]*$ ]] || { echo "ssp.sh: unknown argument $a" >&2; exit 2; }
		if ((pos++ == 0)); then epochs=$a; else reps=$a; fi ;;
	esac
done
((smoke)) || scripts/setup.sh
BUILD=${FERRY_BUILD_DIR:-build}
export FERRY_BUILD_DIR=$BUILD FERRY_SKIP_SETUP=1
((smoke)) || cmake --build "$BUILD" -j2 --target ps-server trainer >/dev/null
RAW=${FERRY_BENCH_DIR:-$(mktemp -d /tmp/ferry-ssp.XXXXXX)}
OUT=bench/results/ssp.json calib=300
if ((smoke)); then
	[ -d /usr/share/datasets/fashion-mnist ] ||
		{ echo "ssp.sh: SKIP: no data set"; exit 77; }
	OUT=$RAW/ssp.json calib=30
	export FERRY_MAX_STEPS=30 # every trainer's --max-steps (env)
fi
mkdir -p "$RAW" bench/results
log() { echo "[ssp.sh] $*" >&2; }

# job NAME FLAGS...: one local job; its trainers' outputs in $RAW/NAME/.
job() {
	local name=$1
	shift
	rm -rf "${RAW:?}/$name"
	FERRY_RUN_DIR="$RAW/$name" timeout 1800 scripts/run-local.sh \
		--servers 2 --trainers 2 --log-interval 0 "$@" \
		>"$RAW/$name.out" 2>&1 || {
		log "$name failed; see $RAW/$name.out"
		tail -n 5 "$RAW/$name.out" >&2
		return 1
	}
}

# Calibrate: the mean time of a step, unslowed.
job calib --epochs 1 --max-steps "$calib" --step-times="$RAW/calib-steps.csv"
slow=$(python3 - "$RAW/calib-steps.csv" "$RAW/calib/step-times-1.csv" <<'PY'
import csv, sys
ms = []
for p in sys.argv[1:]:
    with open(p) as f:
        ms += [float(r["compute_ms"]) + float(r["push_pull_ms"])
               for r in csv.DictReader(f)]
ms = ms[len(ms) // 10:]  # skip the warm-up
print(max(1, round(sum(ms) / len(ms))))
PY
)
log "calibrated: ${slow} ms a step; rank 1 sleeps --slow-ms=$slow"

runs=("sync|--mode sync" "ssp0|--mode ssp --staleness 0"
	"ssp1|--mode ssp --staleness 1" "ssp4|--mode ssp --staleness 4"
	"sspinf|--mode ssp --staleness 1000000000")
: >"$RAW/ssp.jsonl"
for ((rep = 1; rep <= reps; rep++)); do
	for r in "${runs[@]}"; do
		name=${r%%|*} flags=${r#*|}
		log "$name (rep $rep of $reps): $flags, $epochs epochs"
		# shellcheck disable=SC2086
		job "$name-$rep" --epochs "$epochs" $flags --slow-ms "$slow" \
			--slow-rank 1 || { ((!smoke)) || exit 1; continue; }
		for f in "$RAW/$name-$rep"/trainer-[01].out; do
			grep '"summary"' "$f" | python3 -c 'import sys, json
s = json.loads(sys.stdin.read())["summary"]
s["run"], s["rep"] = sys.argv[1], int(sys.argv[2])
print(json.dumps(s))' "$name" "$rep" >>"$RAW/ssp.jsonl"
		done
	done
done
python3 - "$RAW/ssp.jsonl" "$slow" "$epochs" "$reps" "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
runs = {}
for r in rows:
    runs.setdefault(r["run"], {}).setdefault(r["rep"], []).append(r)
out = {"slow_ms": int(sys.argv[2]), "epochs": int(sys.argv[3]),
       "reps": int(sys.argv[4]), "servers": 2, "trainers": 2,
       "slow_rank": 1, "runs": []}
med = statistics.median
for name, by_rep in runs.items():
    one = []
    for rs in by_rep.values():
        if len(rs) != 2:
            continue  # a trainer failed: no summary
        rs.sort(key=lambda r: r["rank"])
        wall = max(r["wall_s"] for r in rs)
        one.append({
            "job": sum(r["samples"] for r in rs) / wall if wall > 0 else 0,
            "own": sum(r["samples_per_s"] for r in rs), "wall": wall,
            "acc": rs[0].get("test_acc"),
            "smean": [r["staleness_mean"] for r in rs],
            "smax": [r["staleness_max"] for r in rs],
            "mode": rs[0]["mode"], "k": rs[0]["staleness"]})
    if not one:
        continue
    accs = [o["acc"] for o in one if o["acc"] is not None]
    out["runs"].append({
        "run": name, "mode": one[0]["mode"], "staleness": one[0]["k"],
        "reps": len(one),
        "job_samples_per_s": med(o["job"] for o in one),
        "job_samples_per_s_all": [round(o["job"]) for o in one],
        "sum_samples_per_s": med(o["own"] for o in one),
        "wall_s": med(o["wall"] for o in one),
        "test_acc": med(accs) if accs else None,
        "staleness_mean": [med(o["smean"][i] for o in one) for i in (0, 1)],
        "staleness_max": [max(o["smax"][i] for o in one) for i in (0, 1)],
    })
base = next((r for r in out["runs"] if r["run"] == "sync"), None)
for r in out["runs"]:
    if base and base["job_samples_per_s"] > 0:
        r["vs_sync"] = r["job_samples_per_s"] / base["job_samples_per_s"]
        if base["test_acc"] is not None and r["test_acc"] is not None:
            r["acc_minus_sync"] = r["test_acc"] - base["test_acc"]
json.dump(out, open(sys.argv[5], "w"), indent=1)
print(f"{'run':8} {'job samples/s':>14} {'x sync':>7} {'sum of own':>11} "
      f"{'wall s':>7} {'test_acc':>9} {'staleness mean/max (r0; r1)':>28}")
for r in out["runs"]:
    st = "; ".join(f"{m:.2f}/{x}" for m, x in zip(r["staleness_mean"], r["staleness_max"]))
    print(f"{r['run']:8} {r['job_samples_per_s']:14.0f} {r.get('vs_sync', 0):7.2f} "
          f"{r['sum_samples_per_s']:11.0f} {r['wall_s']:7.2f} "
          f"{(r['test_acc'] or 0):9.4f} {st:>28}")
PY
log "raw logs in $RAW; wrote $OUT"
