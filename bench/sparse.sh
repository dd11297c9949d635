#!/usr/bin/env bash
# sparse.sh — sparse embedding tables (issue 25): the shard store's speed
# and memory in process, rows through libferry over loopback, and a
# server's memory under --sparse-capacity-mb while 10x the cap's keys
# stream. Writes bench/results/sparse.json:
#   lookups_per_s_core, updates_per_s_core   in process, one thread, a
#       10M-row dim-16 Adagrad table (bench/sparse_store: sparse-store-bench;
#       random batches of distinct keys); *_dim64: the same at dim 64
#   rss_over_raw     a ps-server's RSS after one trainer pushed 10M keys of
#       a dim-16 Adagrad table, over the raw bytes of those rows and their
#       optimizer state (10M x 17 x 4); store_rss_over_raw: the in-process
#       figure (the bench program's own RSS)
#   loopback_rows_per_s   rows/s per server, the smaller of pulled and
#       pushed, one trainer (bench/sparse_loop: sparse-loop) doing a batch's
#       push and the next batch's pull in one call, 1 server; with
#       _2servers: per server of 2
#   cap_mb, cap_rss_ratio_max   the cap and the largest (server RSS - its
#       RSS before any row) / cap sampled every 0.5 s while keys covering
#       10x the cap stream for 5 minutes; cap_rss_ratio_max_total: the same
#       with the whole RSS
#
#   bench/sparse.sh            # the full run (~15 minutes)
#   bench/sparse.sh --quick    # 1M rows, a 128 MB cap for 60 s (< 5 min)
#   bench/sparse.sh --smoke    # seconds (ctest -L bench-smoke); JSON in a
#                              # temp dir
#
# Builds with scripts/setup.sh first (not --smoke); FERRY_BUILD_DIR picks
# the build directory, FERRY_RESULTS_DIR where sparse.json goes.
set -euo pipefail
cd "$(dirname "$0")/.."
size=full
case "${1:-}" in
--quick) size=quick ;;
--smoke) size=smoke ;;
"") ;;
-h | --help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
*) echo "sparse.sh: unknown argument $1 (--quick, --smoke)" >&2; exit 2 ;;
esac
case $size in
full) ROWS=10000000 ROWS64=2000000 CAP=512 STREAM_S=300 RATE_S=20 ;;
quick) ROWS=1000000 ROWS64=500000 CAP=128 STREAM_S=60 RATE_S=10 ;;
smoke) ROWS=20000 ROWS64=10000 CAP=16 STREAM_S=3 RATE_S=2 ;;
esac
BUILD=${FERRY_BUILD_DIR:-build}
RESULTS=${FERRY_RESULTS_DIR:-bench/results}
if [ $size = smoke ]; then
	RESULTS=${FERRY_RESULTS_DIR:-$(mktemp -d /tmp/ferry-sparse-smoke.XXXXXX)}
else
	scripts/setup.sh
	cmake --build "$BUILD" -j2 --target ps-server sparse-loop \
		sparse-store-bench >/dev/null
fi
PS=$BUILD/ps/ps-server LOOP=$BUILD/bench/sparse_loop/sparse-loop
STORE=$BUILD/bench/sparse_store/sparse-store-bench
for b in "$PS" "$LOOP" "$STORE"; do
	[ -x "$b" ] || { echo "sparse.sh: no $b (build it first)" >&2; exit 1; }
done
RAW=$(mktemp -d /tmp/ferry-sparse.XXXXXX)
log() { echo "[sparse.sh] $*" >&2; }
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

# job NAME SERVERS [SERVER FLAGS...]: a scheduler and SERVERS servers for
# one trainer; sets URL and SPIDS (the servers' pids).
job() {
	local name=$1 n=$2 port
	shift 2
	port=$(free_port)
	URL=tcp://127.0.0.1:$port SPIDS=()
	"$PS" --role scheduler --listen "$URL" --trainers 1 --servers "$n" \
		>"$RAW/$name-sched.log" 2>&1 &
	pids+=($!)
	for ((i = 0; i < n; i++)); do
		"$PS" --scheduler "$URL" "$@" >"$RAW/$name-server-$i.log" 2>&1 &
		pids+=($!) SPIDS+=($!)
	done
}
endjob() { cleanup; pids=(); }

# loop NAME ARGS...: sparse-loop against $URL; its JSON lines in
# $RAW/NAME.jsonl.
loop() {
	local name=$1
	shift
	timeout 1800 "$LOOP" --scheduler "$URL" "$@" >"$RAW/$name.jsonl" \
		2>"$RAW/$name.err" || {
		log "$name failed:"
		tail -n 5 "$RAW/$name.err" >&2
		exit 1
	}
}

log "in process: $ROWS rows, dim 16 and $ROWS64 rows, dim 64, adagrad"
"$STORE" --rows "$ROWS" --dim 16 --optim adagrad >"$RAW/store16.json"
"$STORE" --rows "$ROWS64" --dim 64 --optim adagrad >"$RAW/store64.json"

log "loopback, 1 server: load $ROWS keys (dim 16, adagrad), then ${RATE_S}s of steps"
job one 1
loop one --mode load,rate --keys "$ROWS" --dim 16 --batch 16384 \
	--seconds "$RATE_S"
rss_one=$(rss_kb "${SPIDS[0]}")
endjob

log "loopback, 2 servers: ${RATE_S}s of steps over $ROWS keys"
job two 2
loop two --mode load,rate --keys "$ROWS" --dim 16 --batch 16384 \
	--seconds "$RATE_S"
endjob

log "cap ${CAP} MB: ${STREAM_S}s of new keys covering 10x the cap"
job cap 1 --sparse-capacity-mb "$CAP"
keys=$((CAP * 1048576 * 10 / 68))
: >"$RAW/cap-rss.txt"
# The server's RSS before any row: once it has registered.
for ((i = 0; i < 600; i++)); do
	grep -qs "registered as server" "$RAW/cap-server-0.log" && break
	sleep 0.1
done
base_cap=$(rss_kb "${SPIDS[0]}")
"$LOOP" --scheduler "$URL" --mode stream --keys "$keys" --dim 16 \
	--batch 16384 --seconds "$STREAM_S" >"$RAW/cap.jsonl" \
	2>"$RAW/cap.err" &
lp=$!
while kill -0 "$lp" 2>/dev/null; do
	rss_kb "${SPIDS[0]}" >>"$RAW/cap-rss.txt"
	sleep 0.5
done
wait "$lp" || { log "cap stream failed:"; tail -n 5 "$RAW/cap.err" >&2; exit 1; }
endjob

mkdir -p "$RESULTS"
python3 - "$RAW" "$ROWS" "$CAP" "$rss_one" "$base_cap" "$STREAM_S" \
	"$RESULTS/sparse.json" "$size" <<'PY'
import json, sys
raw, rows, cap, rss_one, base_cap, stream_s, out, size = sys.argv[1:]
rows, cap = int(rows), int(cap)
def lines(name):
    return [json.loads(l) for l in open(f"{raw}/{name}.jsonl") if l.strip()]
s16 = json.load(open(f"{raw}/store16.json"))
s64 = json.load(open(f"{raw}/store64.json"))
rate1 = [r for r in lines("one") if r["mode"] == "rate"][0]
rate2 = [r for r in lines("two") if r["mode"] == "rate"][0]
raw_bytes = rows * (16 + 1) * 4
rss = [int(l) * 1024 for l in open(f"{raw}/cap-rss.txt") if l.strip()]
base = int(base_cap) * 1024
capb = cap * 1048576
res = {
    "size": size,
    "rows": rows,
    "lookups_per_s_core": s16["lookups_per_s_core"],
    "updates_per_s_core": s16["updates_per_s_core"],
    "lookups_per_s_core_dim64": s64["lookups_per_s_core"],
    "updates_per_s_core_dim64": s64["updates_per_s_core"],
    "store_rss_over_raw": s16["rss_over_raw"],
    "rss_over_raw": round(int(rss_one) * 1024 / raw_bytes, 3),
    "loopback_rows_per_s": round(min(rate1["pushed_per_s"], rate1["pulled_per_s"])),
    "loopback_rows_per_s_2servers": round(min(rate2["pushed_per_s"], rate2["pulled_per_s"]) / 2),
    "cap_mb": cap,
    "cap_stream_s": int(stream_s),
    "cap_rss_ratio_max": round(max(r - base for r in rss) / capb, 3) if rss else None,
    "cap_rss_ratio_max_total": round(max(rss) / capb, 3) if rss else None,
    "cap_rows_streamed": lines("cap")[0]["rows_pushed"],
}
json.dump(res, open(out, "w"), indent=1)
print(json.dumps(res, indent=1))
PY
log "wrote $RESULTS/sparse.json"
