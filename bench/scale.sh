#!/usr/bin/env bash
# scale.sh — how Ferry's cost grows (issue 30): trainers, servers, model
# size and members, measured on this machine, and a simulator's model of
# much larger jobs validated against those measurements. Runs the parts in
# order, each writing one JSON object into the raw directory, then merges
# them into bench/results/scale.json (make_report.py renders it into
# docs/benchmarks.md):
#
#   bench/scale/trainers.sh  trainers 1 -> 64 (sync, async; 1 and 2
#                            servers) and servers 1 -> 8 with 8 trainers,
#                            load-only clients (bench/scale/loadgen)
#   bench/scale/model.sh     dense model 1 MB -> 1 GB and sparse tables
#                            1M -> 100M rows: goodput against memcpy and
#                            loopback, server RSS against the state it must
#                            hold; the 1 GB job that trains
#   bench/scale/sched.sh     the scheduler with 1,000 simulated members
#   bench/sim/validate.py    the simulator against every measured row,
#                            then its predictions for 100 to 10,000 trainers
#
#   bench/scale.sh [--quick] [--smoke] [--only PART[,PART...]]
#
# --quick: fewer repetitions and the smaller sizes; --smoke (ctest -L
# bench-smoke): seconds, this build tree's binaries as they are, the JSON
# beside the raw logs instead of bench/results. --only runs some parts
# (trainers, model, sched, sim) and merges them into the scale.json there
# is. Set-up and build go through scripts/setup.sh; FERRY_BUILD_DIR picks
# the build directory, FERRY_BENCH_DIR the raw logs.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0 smoke=0 only="trainers,model,sched,sim" args="$*"
while (($#)); do
	case "$1" in
	--quick) quick=1 ;;
	--smoke) smoke=1 ;;
	--only) only=${2:?--only needs a list}; shift ;;
	-h | --help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "scale.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
((smoke)) || scripts/setup.sh
BUILD=${FERRY_BUILD_DIR:-build}
export FERRY_BUILD_DIR=$BUILD FERRY_SKIP_SETUP=1
((smoke)) || cmake --build "$BUILD" -j2 --target ps-server trainer \
	loadgen membersim >/dev/null
RAW=${FERRY_BENCH_DIR:-$(mktemp -d /tmp/ferry-scale.XXXXXX)}
OUT=bench/results/scale.json
((smoke)) && OUT=$RAW/scale.json
mkdir -p "$RAW" "$(dirname "$OUT")"
log() { echo "[scale.sh] $*" >&2; }
flags=()
((quick)) && flags+=(--quick)
((smoke)) && flags+=(--smoke)
export FERRY_SCALE_RAW=$RAW

# part NAME COMMAND...: one part, its JSON in $RAW/NAME.json. A part that
# fails is logged and left out; the others still run.
part() {
	local name=$1
	shift
	[[ ",$only," == *",$name,"* ]] || return 0
	log "part $name: $*"
	if "$@" "${flags[@]}" --json "$RAW/$name.json" >"$RAW/$name.out" 2>&1
	then
		log "part $name done"
	else
		log "part $name failed (exit $?); see $RAW/$name.out"
		tail -n 8 "$RAW/$name.out" >&2
	fi
}
part trainers bash bench/scale/trainers.sh
part model bash bench/scale/model.sh
part sched bash bench/scale/sched.sh
# The simulator reads the measured parts (in $RAW, or scale.json's).
part sim /usr/bin/python3 bench/sim/validate.py --raw "$RAW" --prev "$OUT"

# Merge: each part's keys into scale.json, over what an earlier run left
# there (--only), with the run's command and machine.
/usr/bin/python3 - "$RAW" "$OUT" "$only" "$args" <<'PY'
import json, os, platform, sys, time
raw, out, only, args = sys.argv[1:5]
try:
    with open(out) as f:
        doc = json.load(f)
except (OSError, ValueError):
    doc = {}
command = ("bench/scale.sh " + args).strip()
when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
for name in only.split(","):
    try:
        with open(os.path.join(raw, name + ".json")) as f:
            doc.update(json.load(f))
        # Which run each part's keys come from (--only merges some).
        doc.setdefault("parts", {})[name] = {"command": command,
                                             "when": when}
    except (OSError, ValueError) as e:
        print(f"[scale.sh] part {name}: no result ({e})", file=sys.stderr)
doc["command"] = command
doc["when"] = when
doc["cores"] = os.cpu_count()
doc["machine"] = platform.machine()
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
PY
log "wrote $OUT"
