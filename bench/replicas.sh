#!/usr/bin/env bash
# replicas.sh — what --replicas 2 costs a fault-free sync job: the one
# measurement of replicas_overhead (bench/faults.sh runs it too, and it
# runs alone on a machine without apt). A scheduler, 2 servers and 2
# trainers on loopback (--layers=784,256,128,10 --batch=64
# --max-steps=1500), --replicas 1 and 2 interleaved REPS times; prints
# each pair's job samples/s (both trainers summed) and the medians, and
# with JSON writes them there too ({"replicas_overhead": ...,
# "samples_per_s_replicas_1": [...], "samples_per_s_replicas_2": [...]}).
#
#   bench/replicas.sh [REPS [JSON]]      # default 5 pairs
#
# FERRY_BUILD_DIR picks the build directory (default build; built with
# scripts/setup.sh unless it already holds ps-server and trainer, so a
# copied build runs on a machine without apt); FERRY_DATA_DIR the data set
# (default /usr/share/datasets/fashion-mnist).
#
#   bench/replicas.sh --smoke [JSON]     # seconds (ctest -L bench-smoke):
#                                        # 1 pair of 100-step jobs
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=1500 smoke=0
if [ "${1:-}" = --smoke ]; then
	smoke=1 STEPS=100
	shift
	set -- 1 "$@"
fi
REPS=${1:-5}
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || { echo "replicas.sh: REPS must be a positive integer" >&2; exit 2; }
JSON=${2:-}
if [ -n "$JSON" ] && ! { : >"$JSON"; } 2>/dev/null; then
	echo "replicas.sh: cannot write $JSON" >&2
	exit 2
fi
BUILD=${FERRY_BUILD_DIR:-build}
PS="$BUILD/ps/ps-server" TR="$BUILD/trainer/trainer"
[ -x "$PS" ] && [ -x "$TR" ] || ((smoke)) || FERRY_BUILD_DIR="$BUILD" scripts/setup.sh
DATA=${FERRY_DATA_DIR:-/usr/share/datasets/fashion-mnist}
((!smoke)) || [ -d "$DATA" ] || { echo "replicas.sh: SKIP: no data set"; exit 77; }
[ -d "$DATA" ] || { echo "replicas.sh: no data set at $DATA (set FERRY_DATA_DIR)" >&2; exit 1; }
LOGS=$(mktemp -d /tmp/ferry-replicas.XXXXXX)

# run R I: one job with --replicas R; prints its samples/s.
run() {
	local d="$LOGS/replicas$1-$2" pids=() tp=() url
	mkdir -p "$d"
	"$PS" --role=scheduler --trainers=2 --servers=2 --url-file="$d/s.url" \
		--replicas="$1" 2>"$d/scheduler.log" & pids+=($!)
	for _ in $(seq 500); do [ -s "$d/s.url" ] && break; sleep 0.02; done
	url=$(cat "$d/s.url")
	for m in 0 1; do
		"$PS" --role=server --scheduler="$url" --replicas="$1" 2>"$d/server-$m.log" & pids+=($!)
	done
	for r in 0 1; do
		timeout 300 "$TR" --scheduler="$url" --rank=$r --data="$DATA" \
			--layers=784,256,128,10 --batch=64 --max-steps="$STEPS" \
			--log-interval=0 --seed=1 --timeout-ms=30000 \
			>"$d/trainer-$r.out" 2>"$d/trainer-$r.log" & tp+=($!)
	done
	local rc=0
	for p in "${tp[@]}"; do wait "$p" || rc=$?; done
	kill "${pids[@]}" 2>/dev/null || true
	wait "${pids[@]}" 2>/dev/null || true
	[ "$rc" = 0 ] || { echo "replicas.sh: a trainer failed (logs in $d)" >&2; exit 1; }
	grep -h '"summary"' "$d/trainer-0.out" "$d/trainer-1.out" | python3 -c '
import json, sys
print(round(sum(json.loads(l)["summary"]["samples_per_s"] for l in sys.stdin), 1))'
}

echo "replicas.sh: $REPS pairs on $(nproc) cores, logs in $LOGS" >&2
r1=() r2=()
for i in $(seq "$REPS"); do
	a=$(run 1 "$i"); b=$(run 2 "$i")
	r1+=("$a"); r2+=("$b")
	echo "pair $i: samples/s replicas 1 $a, replicas 2 $b"
done
python3 - "${r1[*]}" "${r2[*]}" "$JSON" <<'PY'
import json, statistics, sys
r1 = [float(x) for x in sys.argv[1].split()]
r2 = [float(x) for x in sys.argv[2].split()]
m1, m2 = statistics.median(r1), statistics.median(r2)
pairs = [1 - b / a for a, b in zip(r1, r2)]
print(f"medians: replicas 1 {m1:.1f}, replicas 2 {m2:.1f} samples/s; "
      f"replicas_overhead {1 - m2 / m1:.3f} (per pair median "
      f"{statistics.median(pairs):.3f}; target <= 0.15)")
if sys.argv[3]:
    json.dump({"replicas_overhead": round(1 - m2 / m1, 4),
               "samples_per_s_replicas_1": [round(x, 1) for x in r1],
               "samples_per_s_replicas_2": [round(x, 1) for x in r2]},
              open(sys.argv[3], "w"), indent=1)
PY
