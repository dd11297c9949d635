#!/usr/bin/env bash
# snapshot.sh — a parameter server's snapshot write and restore speed
# against the disk's sequential write speed, measured with dd in the same
# run: each repetition writes a snapshot of an MB-sized job
# (bench/snapshot/snapshot_bench: ps_server_snapshot, then a restore from
# a cold page cache) and, alternately before or after it, `dd
# if=/dev/zero bs=1M count=MB conv=fsync` into the same directory. Prints
# the medians and writes bench/results/snapshot.json:
#   snapshot_write_gbps (a server's second and later snapshots, whose
#   buffer is reused), snapshot_first_write_gbps (its first, which also
#   faults the buffer in), snapshot_file_gbps (the writer thread's part),
#   snapshot_restore_gbps, dd_write_gbps (medians, GB/s = 1e9 bytes/s),
#   write_vs_dd (the median over repetitions of dd's time / the
#   snapshot's: each against its own neighbour), mb, reps, dir.
# The target (issue 11): snapshot writes at >= 50% of dd's speed.
#
#   bench/snapshot.sh [MB] [REPS]     # defaults: 256 MB, 5 repetitions
#
# FERRY_SNAPSHOT_DIR picks the directory (default: a new one under
# /var/tmp, on the disk rather than a tmpfs). Builds with scripts/setup.sh
# first; FERRY_BUILD_DIR picks the build directory, FERRY_RESULTS_DIR
# where snapshot.json goes (default bench/results).
#
#   bench/snapshot.sh --smoke     # seconds (ctest -L bench-smoke): 8 MB
#                                 # once, what is built, JSON in a temp dir
set -euo pipefail
cd "$(dirname "$0")/.."
smoke=0
if [ "${1:-}" = --smoke ]; then
	smoke=1
	export FERRY_RESULTS_DIR=${FERRY_RESULTS_DIR:-$(mktemp -d /tmp/ferry-snapshot-smoke.XXXXXX)}
	set -- 8 1
fi
MB=${1:-256} REPS=${2:-5}
[[ "$MB" =~ ^[1-9][0-9]*$ ]] || { echo "snapshot.sh: MB must be a positive integer" >&2; exit 2; }
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || { echo "snapshot.sh: REPS must be a positive integer" >&2; exit 2; }
((smoke)) || scripts/setup.sh
BUILD=${FERRY_BUILD_DIR:-build}
RESULTS=${FERRY_RESULTS_DIR:-bench/results}
((smoke)) || cmake --build "$BUILD" --target snapshot_bench >/dev/null
[ -x "$BUILD/bench/snapshot/snapshot_bench" ] ||
	{ echo "snapshot.sh: no $BUILD/bench/snapshot/snapshot_bench" >&2; exit 1; }
DIR=${FERRY_SNAPSHOT_DIR:-$(mktemp -d /var/tmp/ferry-snapbench.XXXXXX)}
mkdir -p "$DIR"
RAW=$(mktemp /tmp/ferry-snapshot-runs.XXXXXX)
trap 'rm -f "$DIR/dd.bin" "$DIR/server-0.snap"' EXIT

# dd_once: one dd run; appends {"dd_s": S} (its own elapsed time).
dd_once() {
	local s
	s=$(LC_ALL=C dd if=/dev/zero of="$DIR/dd.bin" bs=1M count="$MB" conv=fsync 2>&1 |
		awk '/copied/ {for (i = 1; i <= NF; i++) if ($i == "s,") print $(i - 1)}')
	rm -f "$DIR/dd.bin"
	echo "{\"dd_s\": $s}" >>"$RAW"
}
for ((r = 1; r <= REPS; r++)); do
	if ((r % 2)); then dd_once; fi
	"$BUILD/bench/snapshot/snapshot_bench" "$DIR" "$MB" 1 2>/dev/null >>"$RAW"
	if ! ((r % 2)); then dd_once; fi
done
mkdir -p "$RESULTS"
python3 - "$RAW" "$MB" "$REPS" "$DIR" "$RESULTS" <<'PY'
import json, statistics, sys
raw, mb, reps, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
results = sys.argv[5]
rows = [json.loads(l) for l in open(raw) if l.strip()]
snap = [r for r in rows if "write_s" in r]
dd = [r["dd_s"] for r in rows if "dd_s" in r]
if not snap or not dd:
    sys.exit("snapshot.sh: no measurement (see the errors above)")
gb = lambda b, s: b / s / 1e9
w = statistics.median(gb(r["bytes"], r["write_s"]) for r in snap)
f = statistics.median(gb(r["bytes"], r["file_s"]) for r in snap)
first = statistics.median(gb(r["bytes"], r["first_s"]) for r in snap)
rs = statistics.median(gb(r["bytes"], r["restore_s"]) for r in snap)
ddg = statistics.median(gb(mb << 20, s) for s in dd)
# Each repetition's snapshot against its own dd run: robust to a disk
# whose speed drifts during the run (a shared machine).
ratio = statistics.median(s / r["write_s"] for r, s in zip(snap, dd))
out = {"snapshot_write_gbps": round(w, 3), "snapshot_file_gbps": round(f, 3),
       "snapshot_first_write_gbps": round(first, 3),
       "snapshot_restore_gbps": round(rs, 3), "dd_write_gbps": round(ddg, 3),
       "write_vs_dd": round(ratio, 3), "mb": mb, "reps": reps, "dir": d}
json.dump(out, open(f"{results}/snapshot.json", "w"), indent=1)
print(f"snapshot of {mb} MB, {reps} runs (medians, GB/s): write {w:.3f} "
      f"(file part {f:.3f}; a server's first {first:.3f}), restore "
      f"{rs:.3f}; dd {ddg:.3f}")
print(f"snapshot write / dd (median of each run's pair) = {ratio:.2f} "
      f"(target >= 0.50): {'met' if ratio >= 0.5 else 'NOT met'}")
PY
rm -f "$RAW"
