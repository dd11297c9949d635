#!/usr/bin/env bash
# sched.sh — the scheduler with many members (issue 30, part "sched" of
# bench/scale.sh): a real scheduler (`ps-server --role=scheduler`) and
# bench/scale/membersim standing in for its members, 100, 300 and 1,000
# trainers and one server (a fake one: the scheduler never dials it) on
# loopback, each on its own connection, heartbeating every second and
# watching the map as the real ones do. Per size: the scheduler's CPU over
# a steady window (utime + stime from /proc/PID/stat over wall time), its
# RSS, the time from the first map's publication until every member holds
# it, and from a trainer's Leave until every other member holds the new
# map (the worst of --changes). Two more runs at the largest size: every
# trainer parks a GetPlacement watch (--watch park: the worst case for the
# scheduler's contexts, one parked call per member), and a 1 GiB model
# (1,024 shards in every map handed out).
#
#   bench/scale/sched.sh [--quick] [--smoke] --json FILE
#                        [--members "100 300 1000"] [--steady-s S]
#                        [--repeats N]
#
# JSON (one object): sched_members (the largest size), sched_cpu_frac,
# sched_map_all_s, sched_rss_mb (that size, --watch stale), sched_sweep:
# rows {members, trainers, servers, watch, model_bytes, cpu_frac,
# map_all_s, map_first_s, map_change_cpu_ms (the scheduler's CPU over one
# map change), rss_mb, hwm_mb, heartbeats_per_s, refused
# (answers other than OK, by status), watches_expired (parked watches
# answered at their deadline: no news, re-sent), transport_errors, ok}.
# The largest size with --watch stale (the headline figures) runs
# --repeats times (3; 1 with --quick and --smoke), interleaved with the
# other runs, and its row is the runs' medians (cpu_frac_runs lists each):
# on two shared cores one window of 10 s is not a figure.
# --quick: 100 and 1,000, shorter windows; --smoke: 20 members, seconds.
# Raw logs in $FERRY_SCALE_RAW (default: a temp dir). Figures taken while
# other work shares the cores are provisional.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${FERRY_BUILD_DIR:-$ROOT/build}
[[ "$BUILD" = /* ]] || BUILD="$ROOT/$BUILD"
PS="$BUILD/ps/ps-server" SIM="$BUILD/bench/scale/membersim"
quick=0 smoke=0 json="" members="" steady=10 warm=3 changes=3 reps=""
while (($#)); do
	case "$1" in
	--quick) quick=1 ;;
	--smoke) smoke=1 ;;
	--json) json=${2:?--json needs a file}; shift ;;
	--members) members=$2; shift ;;
	--steady-s) steady=$2; shift ;;
	--repeats) reps=${2:?--repeats needs a count}; shift ;;
	-h | --help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "sched.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
[[ -n "$json" ]] || { echo "sched.sh: --json FILE is required" >&2; exit 2; }
if ((smoke)); then
	members=${members:-20} steady=2 warm=1 changes=2 reps=${reps:-1}
elif ((quick)); then
	members=${members:-"100 1000"} steady=5 warm=2 reps=${reps:-1}
else
	members=${members:-"100 300 1000"}
fi
reps=${reps:-3}
[[ "$reps" =~ ^[1-9][0-9]*$ ]] ||
	{ echo "sched.sh: --repeats must be a positive count" >&2; exit 2; }
if [[ ! -x "$PS" || ! -x "$SIM" ]]; then
	echo "sched.sh: $PS or $SIM is not built" >&2
	((smoke)) && exit 77
	exit 1
fi
RAW=${FERRY_SCALE_RAW:-$(mktemp -d /tmp/ferry-sched.XXXXXX)}
mkdir -p "$RAW"
# One connection per member, both ends on this machine.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if (($(ulimit -n) < 2 * 1000 + 256)); then
	echo "sched.sh: ulimit -n is $(ulimit -n): 1,000 members need more" >&2
fi

sched_pid=""
cleanup() {
	if [[ -n "$sched_pid" ]]; then
		kill "$sched_pid" 2>/dev/null || true
		wait "$sched_pid" 2>/dev/null || true
	fi
}
trap cleanup EXIT

# run N WATCH [FLOATS [RUN]]: one scheduler, one membersim; its JSON in
# $RAW/sched-N-WATCH-FLOATS[-rRUN].json.
run() {
	local n=$1 watch=$2 floats=${3:-65536}
	local tag="sched-$1-$2-${3:-65536}${4:+-r$4}"
	rm -f "$RAW/$tag.url"
	"$PS" --role=scheduler --trainers="$n" --servers=1 \
		--url-file="$RAW/$tag.url" >"$RAW/$tag.log" 2>&1 &
	sched_pid=$!
	for _ in $(seq 200); do
		[[ -s "$RAW/$tag.url" ]] && break
		sleep 0.05
	done
	if [[ ! -s "$RAW/$tag.url" ]]; then
		echo "sched.sh: the scheduler did not start; see $RAW/$tag.log" >&2
		return 1
	fi
	echo "[sched.sh] $n members, --watch $watch, $floats floats" >&2
	timeout 600 "$SIM" --scheduler "$(cat "$RAW/$tag.url")" --trainers "$n" \
		--servers 1 --floats "$floats" --watch "$watch" --warm-s "$warm" \
		--steady-s "$steady" --changes "$changes" \
		--sched-pid "$sched_pid" --json "$RAW/$tag.json" \
		2>"$RAW/$tag.sim.log" || {
		echo "sched.sh: membersim failed; see $RAW/$tag.sim.log" >&2
		tail -n 5 "$RAW/$tag.sim.log" >&2
	}
	cleanup
	sched_pid=""
}

files=()
last=${members##* }
for n in $members; do
	if [[ "$n" == "$last" ]]; then
		run "$n" stale 65536 1
		files+=("$RAW/sched-$n-stale-65536-r1.json")
	else
		run "$n" stale
		files+=("$RAW/sched-$n-stale-65536.json")
	fi
done
for ((r = 2; r <= reps; r++)); do
	if ((!smoke && r == 2)); then
		run "$last" park
		files+=("$RAW/sched-$last-park-65536.json")
	fi
	run "$last" stale 65536 "$r"
	files+=("$RAW/sched-$last-stale-65536-r$r.json")
	if ((!smoke && r == 2)); then
		# A 1 GiB model: 1,024 shards in every map each member fetches.
		run "$last" stale 268435456
		files+=("$RAW/sched-$last-stale-268435456.json")
	fi
done
if ((!smoke && reps < 2)); then
	run "$last" park
	files+=("$RAW/sched-$last-park-65536.json")
	run "$last" stale 268435456
	files+=("$RAW/sched-$last-stale-268435456.json")
fi

/usr/bin/python3 - "$json" "$last" "${files[@]}" <<'PY'
import json, sys
out, last, files = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
runs = {}
for path in files:
    try:
        with open(path) as f:
            r = json.load(f)
    except (OSError, ValueError) as e:
        print(f"sched.sh: {path}: {e}", file=sys.stderr)
        continue
    runs.setdefault((r["trainers"], r["watch"], r["floats"]), []).append({
        "members": r["trainers"] + r["servers"], "trainers": r["trainers"],
        "servers": r["servers"], "watch": r["watch"],
        "model_bytes": 4 * r["floats"],
        "cpu_frac": r["cpu_frac"], "map_all_s": r["map_all_s"],
        "map_all_ms": r["map_all_ms"], "map_first_s": r["map_first_s"],
        "map_change_cpu_ms": r["map_change_cpu_ms"],
        "rss_mb": r["rss_mb"], "hwm_mb": r["hwm_mb"],
        "heartbeats_per_s": r["heartbeats_per_s"],
        "refused": r["refused"], "watches_expired": r["watches_expired"],
        "transport_errors": r["transport_errors"], "ok": r["ok"]})

def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2

# A size run several times is one row: each figure the runs' median.
rows = []
for rs in runs.values():
    row = dict(rs[0])
    if len(rs) > 1:
        for k in ("cpu_frac", "map_all_s", "map_first_s",
                  "map_change_cpu_ms", "rss_mb", "hwm_mb",
                  "heartbeats_per_s"):
            row[k] = round(median([q[k] for q in rs]), 5)
        row["map_all_ms"] = [x for q in rs for x in q["map_all_ms"]]
        row["watches_expired"] = sum(q["watches_expired"] for q in rs)
        row["transport_errors"] = sum(q["transport_errors"] for q in rs)
        row["ok"] = all(q["ok"] for q in rs)
    row["repeats"] = len(rs)
    row["cpu_frac_runs"] = [q["cpu_frac"] for q in rs]
    rows.append(row)
doc = {"sched_sweep": rows}
top = [r for r in rows if r["trainers"] == last and r["watch"] == "stale"
       and r["model_bytes"] == 4 * 65536]
if top:
    t = top[0]
    doc.update(sched_members=t["trainers"], sched_cpu_frac=t["cpu_frac"],
               sched_map_all_s=t["map_all_s"], sched_rss_mb=t["rss_mb"])
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
for r in rows:
    print("[sched.sh] %5d members (%s, %d MB model): cpu %.2f%% of a core, "
          "map to all %.3f s, rss %.1f MB, refused %s" % (r["members"],
          r["watch"], r["model_bytes"] >> 20, 100 * r["cpu_frac"],
          r["map_all_s"], r["rss_mb"], r["refused"]), file=sys.stderr)
sys.exit(0 if top and all(r["ok"] for r in rows) else 1)
PY
