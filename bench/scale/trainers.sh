#!/usr/bin/env bash
# trainers.sh — issue 30's trainer and server sweeps: how a job's cost
# grows with its trainers and its servers, load-only (bench/scale/loadgen:
# trainers that push and pull a fixed model, the Fashion-MNIST MLP's 235146
# floats, with no compute). Every cell is a fresh job on loopback: a
# scheduler, M servers and one loadgen process running the N trainers as
# threads; loadgen samples the servers' CPU and memory over its timed
# window (--watch-pids).
#
#   bench/scale/trainers.sh [--quick] [--smoke] [--repeats N] --json FILE
#
#   trainer sweep: trainers 1 2 4 8 16 32 64, sync and async, 1 and 2
#                  servers
#   server sweep:  servers 1 2 4 8 with 8 trainers, sync and async
#
# Each cell moves about the same number of push-pulls (steps = budget /
# trainers), so each takes a few seconds, and runs --repeats times (3 by
# default), the repeats in rounds over every cell so that a change of the
# machine's load falls on all cells alike; a row is the medians of its
# cell's runs (each figure's own median; round_ms_runs and
# agg_gb_per_core_s_runs list every run). One run of a cell on two
# shared cores is not a figure: the same 2-trainer cell gave 1.33 to 1.90
# aggregated GB per core-second in seven runs. --quick: fewer cells and
# steps, one run (~2 min); --smoke: seconds, 1 to 4 trainers, one run
# (exit 77 when the binaries are not built). The model is cut into 16 equal shards
# (--shard-bytes), so that 1 to 8 servers each hold a share.
#
# A control cell runs 2 sync trainers with a model as large as the
# biggest count's trainers x bytes (the same bytes in flight per round):
# when it bends as far as the many trainers do, the cost is the round's
# bytes (their cache footprint), not the number of trainers.
#
# FILE gets one JSON object: trainer_sweep and server_sweep (rows {mode,
# servers, trainers, floats, bytes, round_ms, push_pulls_per_s,
# goodput_gbps, server_cpu_s, agg_bytes, agg_gb_per_core_s,
# server_rss_mb, ...}), trainer_sweep_control (the control cell's row),
# agg_per_core_ratio_64_vs_2 (sync, one server: the median agg_gb_per_core_s at 64
# trainers over that at 2), trainer_sweep_growth and
# trainer_sweep_worst_growth (the step-to-step growth of round time,
# server CPU per GB and server RSS against trainers x bytes). Raw logs go
# to $FERRY_SCALE_RAW/trainers (a temp dir without it); binaries come from
# $FERRY_BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/../.."
quick=0 smoke=0 json= reps=
while (($#)); do
	case "$1" in
	--quick) quick=1 ;;
	--smoke) smoke=1 ;;
	--json) json=${2:?--json needs a file}; shift ;;
	--json=*) json=${1#*=} ;;
	--repeats) reps=${2:?--repeats needs a count}; shift ;;
	-h | --help) sed -n '2,42p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "trainers.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
[ -n "$json" ] || { echo "trainers.sh: --json FILE is required" >&2; exit 2; }
BUILD=${FERRY_BUILD_DIR:-build}
PS=$BUILD/ps/ps-server LG=$BUILD/bench/scale/loadgen
if [ ! -x "$PS" ] || [ ! -x "$LG" ]; then
	echo "trainers.sh: SKIP: $PS or $LG not built" >&2
	((smoke)) && exit 77
	exit 1
fi
RAW=${FERRY_SCALE_RAW:-$(mktemp -d /tmp/ferry-scale.XXXXXX)}/trainers
rm -rf "$RAW"
mkdir -p "$RAW"
log() { echo "[trainers.sh] $*" >&2; }

FLOATS=235146
budget=4000 counts="1 2 4 8 16 32 64" modes="sync async" tservers="1 2"
sservers="1 2 4 8" smodes="sync async" strainers=8 warmup=5
if ((quick)); then
	budget=2400 counts="1 2 8 32 64" smodes="sync" reps=${reps:-1}
fi
if ((smoke)); then
	budget=300 counts="1 2 4" modes="sync" tservers="1" sservers="1 2"
	smodes="sync" strainers=2 warmup=2 reps=${reps:-1}
fi
reps=${reps:-3}
[[ "$reps" =~ ^[1-9][0-9]*$ ]] ||
	{ echo "trainers.sh: --repeats must be a positive count" >&2; exit 2; }

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# cell NAME MODE SERVERS TRAINERS [FLOATS [STEPS]]: one fresh job (the
# model cut into 16 equal shards, a multiple of 4 bytes each), loadgen's
# JSON in $RAW/NAME/loadgen.json. Returns non-zero when the job failed
# (its logs stay in $RAW/NAME).
cell() {
	local mode=$2 m=$3 n=$4 d=$RAW/$1 floats=${5:-$FLOATS} steps=${6:-}
	local sched srv=()
	[ -n "$steps" ] || steps=$((budget / n))
	((steps >= 10)) || steps=10
	mkdir -p "$d"
	# shellcheck disable=SC2017 # whole floats per shard, then bytes
	"$PS" --role=scheduler --trainers="$n" --servers="$m" \
		--shard-bytes="$(((floats + 15) / 16 * 4))" --probe-bytes=0 \
		--url-file="$d/scheduler.url" 2>"$d/scheduler.log" &
	pids+=($!)
	for _ in $(seq 200); do
		[ -s "$d/scheduler.url" ] && break
		sleep 0.05
	done
	[ -s "$d/scheduler.url" ] || { cleanup; return 1; }
	sched=$(cat "$d/scheduler.url")
	for ((i = 0; i < m; i++)); do
		"$PS" --role=server --scheduler="$sched" \
			2>"$d/server-$i.log" &
		pids+=($!)
		srv+=($!)
	done
	local watch rc=0
	watch=$(
		IFS=,
		echo "${srv[*]}"
	)
	timeout 300 "$LG" --scheduler "$sched" --trainers "$n" \
		--floats "$floats" --mode "$mode" --steps "$steps" \
		--warmup "$warmup" --watch-pids "$watch" \
		--json "$d/loadgen.json" >"$d/loadgen.out" 2>&1 || rc=$?
	cleanup
	tail -n 1 "$d/loadgen.out" >&2
	return $rc
}

fails=0
# The modes interleave cell by cell, so that a change of the machine's load
# falls on both alike (the ratio of sync to async is part of what is read),
# and the repeats go round every cell.
for ((r = 1; r <= reps; r++)); do
	for m in $tservers; do
		for n in $counts; do
			for mode in $modes; do
				log "trainer sweep (run $r of $reps): $mode, $m server(s), $n trainer(s)"
				cell "t-$mode-s$m-n$n-r$r" "$mode" "$m" "$n" ||
					{ log "cell failed: $RAW/t-$mode-s$m-n$n-r$r"; fails=$((fails + 1)); }
			done
		done
	done
	# The control: 2 trainers, the largest count's bytes in flight.
	big=${counts##* }
	if ((big > 2)); then
		log "control (run $r of $reps): sync, 1 server, 2 trainers of $((big / 2)) x the model"
		cell "c-sync-s1-n2-r$r" sync 1 2 $((FLOATS * big / 2)) $((budget / big)) ||
			{ log "cell failed: $RAW/c-sync-s1-n2-r$r"; fails=$((fails + 1)); }
	fi
	for mode in $smodes; do
		for m in $sservers; do
			log "server sweep (run $r of $reps): $mode, $m server(s), $strainers trainers"
			cell "s-$mode-s$m-n$strainers-r$r" "$mode" "$m" "$strainers" ||
				{ log "cell failed: $RAW/s-$mode-s$m-n$strainers-r$r"; fails=$((fails + 1)); }
		done
	done
done

/usr/bin/python3 - "$RAW" "$json" <<'PY'
import glob, json, os, sys
raw, out = sys.argv[1], sys.argv[2]

def row(path):
    with open(path) as f:
        j = json.load(f)
    name = os.path.basename(os.path.dirname(path))
    mode, s = name.split("-")[1:3]
    servers = int(s[1:])
    cpu = j["watched_cpu_s"]
    agg = j["agg_bytes"]
    return name[0], {
        "mode": mode, "servers": servers, "trainers": j["trainers"],
        "floats": j["floats"], "bytes": int(j["bytes"]),
        "shards": 16,
        "steps": j["steps"], "elapsed_s": round(j["elapsed_s"], 4),
        "round_ms": round(j["round_ms_median"], 4),
        "round_ms_p99": round(j["round_ms_p99"], 4),
        "push_pulls_per_s": round(j["push_pulls_per_s"], 2),
        "goodput_gbps": round(j["goodput_gbps"], 4),
        "server_cpu_s": round(cpu, 3), "agg_bytes": int(agg),
        "agg_gb_per_core_s": round(agg / 1e9 / cpu, 4) if cpu > 0 else None,
        "server_cpu_s_per_gb": round(cpu / (agg / 1e9), 4) if agg > 0 else None,
        "server_rss_mb": round(j["watched_rss_mb"], 2),
        "server_hwm_mb": round(j["watched_hwm_mb"], 2),
        "ok": j["ok"],
    }

runs = {}
for p in glob.glob(os.path.join(raw, "*", "loadgen.json")):
    try:
        kind, r = row(p)
    except (OSError, ValueError, KeyError) as e:
        print(f"[trainers.sh] {p}: {e}", file=sys.stderr)
        continue
    cell = (kind, r["mode"], r["servers"], r["trainers"], r["floats"])
    runs.setdefault(cell, []).append(r)

def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2

# A row is its cell's runs' medians, each figure its own; ok only when
# every run was.
rows = {"t": [], "s": [], "c": []}
for (kind, *_), rs in sorted(runs.items()):
    out_row = dict(rs[0])
    for k, v in rs[0].items():
        if k in ("mode", "servers", "trainers", "floats", "bytes",
                 "shards", "ok") or not isinstance(v, (int, float)):
            continue
        vals = [q[k] for q in rs if isinstance(q.get(k), (int, float))]
        if vals:
            m = median(vals)
            out_row[k] = round(m, 4) if isinstance(m, float) else m
    out_row["ok"] = all(q["ok"] for q in rs)
    out_row["repeats"] = len(rs)
    out_row["round_ms_runs"] = [q["round_ms"] for q in rs]
    out_row["agg_gb_per_core_s_runs"] = [q["agg_gb_per_core_s"] for q in rs]
    rows[kind].append(out_row)
key = lambda r: (r["mode"] != "sync", r["servers"], r["trainers"])
tsw = sorted(rows["t"], key=key)
ssw = sorted(rows["s"], key=key)
doc = {"trainer_sweep": tsw, "server_sweep": ssw,
       "trainer_sweep_control": rows["c"]}

def pick(mode, servers, trainers):
    for r in tsw:
        if (r["mode"], r["servers"], r["trainers"]) == (mode, servers, trainers) and r["ok"]:
            return r
    return None

a, b = pick("sync", 1, 64), pick("sync", 1, 2)
if a and b and a["agg_gb_per_core_s"] and b["agg_gb_per_core_s"]:
    doc["agg_per_core_ratio_64_vs_2"] = round(
        a["agg_gb_per_core_s"] / b["agg_gb_per_core_s"], 4)

# Growth: between consecutive trainer counts of one (mode, servers)
# series, each cost over the growth of its work. Work per round is
# trainers x bytes, so a sync round's time may grow with trainers; CPU
# per GB should stay flat; RSS may grow with trainers (each holds a
# request in flight). > 1 means the step cost more than linear.
growth = []
series = {}
for r in tsw:
    if r["ok"]:
        series.setdefault((r["mode"], r["servers"]), []).append(r)
for (mode, servers), rs in sorted(series.items()):
    for p, q in zip(rs, rs[1:]):
        k = q["trainers"] / p["trainers"]
        g = {"mode": mode, "servers": servers,
             "from": p["trainers"], "to": q["trainers"]}
        if mode == "sync" and p["round_ms"] > 0:
            g["round_ms"] = round(q["round_ms"] / p["round_ms"] / k, 3)
        if p["server_cpu_s_per_gb"] and q["server_cpu_s_per_gb"]:
            g["cpu_per_gb"] = round(
                q["server_cpu_s_per_gb"] / p["server_cpu_s_per_gb"], 3)
        if p["server_rss_mb"] > 0:
            g["rss"] = round(q["server_rss_mb"] / p["server_rss_mb"] / k, 3)
        growth.append(g)
doc["trainer_sweep_growth"] = growth
worst = {}
for g in growth:
    for k in ("round_ms", "cpu_per_gb", "rss"):
        if k in g and g[k] > worst.get(k, {}).get(k, 0):
            worst[k] = g
doc["trainer_sweep_worst_growth"] = {
    k: {"value": v[k], "mode": v["mode"], "servers": v["servers"],
        "from": v["from"], "to": v["to"]} for k, v in worst.items()}
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
print(f"[trainers.sh] {len(tsw)} trainer and {len(ssw)} server rows; "
      f"agg per core 64 vs 2: {doc.get('agg_per_core_ratio_64_vs_2')}",
      file=sys.stderr)
PY
if ((fails)); then
	log "$fails cell(s) failed"
	exit 1
fi
