#!/usr/bin/env bash
# scrape.sh — what scraping costs: the 2-trainer sync Fashion-MNIST job
# (2 servers, fp32) run alternately without HTTP endpoints and with
# --http on every process plus a scraper that fetches every process's
# /metrics once a second, as Prometheus would. Prints each variant's
# median samples/s (rank 0's summary), the runs' spread and the cost
# (1 - scraped/plain); the target is a cost of at most 2%.
#
#   bench/scrape.sh [REPS]        # REPS runs per variant (default 5)
#
# FERRY_SCRAPE_EPOCHS (default 3) sets the job's length: the longer, the
# more scrapes land inside it. Builds with scripts/setup.sh first (a fresh
# clone needs nothing else); FERRY_BUILD_DIR picks the build directory.
#
#   bench/scrape.sh --smoke       # seconds (ctest -L bench-smoke): 1 run
#                                 # per variant of 20 steps, what is built
set -euo pipefail
cd "$(dirname "$0")/.."
smoke=0
if [ "${1:-}" = --smoke ]; then
	smoke=1
	command -v curl >/dev/null || { echo "scrape.sh: SKIP: no curl"; exit 77; }
	[ -d /usr/share/datasets/fashion-mnist ] ||
		{ echo "scrape.sh: SKIP: no data set"; exit 77; }
	export FERRY_MAX_STEPS=20 # every trainer's --max-steps (env)
	set -- 1
fi
command -v curl >/dev/null || { echo "scrape.sh: needs curl (apt-get install curl)" >&2; exit 1; }
REPS=${1:-5} EPOCHS=${FERRY_SCRAPE_EPOCHS:-3}
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || { echo "scrape.sh: REPS must be a positive integer" >&2; exit 2; }
((smoke)) || scripts/setup.sh
RAW=$(mktemp -d /tmp/ferry-scrape.XXXXXX)
: >"$RAW/runs.tsv"

# scraper DIR: every second, fetch /metrics of every process that has
# written its URL into DIR (one curl for all of them, as one Prometheus
# does not fork per target), until killed. Counts the scrapes answered in
# DIR/scrapes and their times in DIR/scrape-ms.
scraper() {
	local dir=$1 n=0 f args
	while true; do
		args=()
		for f in "$dir"/*.http; do
			[ -s "$f" ] && args+=(-o /dev/null "$(cat "$f")/metrics")
		done
		if ((${#args[@]})); then
			curl -s --max-time 5 -w '%{http_code} %{time_total}\n' \
				"${args[@]}" >>"$dir/scrape-ms" || true
			n=$(grep -c '^200 ' "$dir/scrape-ms" || true)
		fi
		echo "$n" >"$dir/scrapes"
		sleep 1
	done
}

# one VARIANT REP: one job; appends "variant sps scrapes" to runs.tsv.
one() {
	local variant=$1 rep=$2 out spid="" flags=()
	out="$RAW/$variant-$rep"
	mkdir -p "$out"
	if [ "$variant" = scraped ]; then
		flags=(--http)
		scraper "$out" &
		spid=$!
	fi
	if FERRY_SKIP_SETUP=1 FERRY_RUN_DIR="$out" scripts/run-local.sh \
		--epochs "$EPOCHS" --log-interval 0 "${flags[@]}" \
		>"$out.log" 2>&1; then
		sps=$(grep '"rank": 0' "$out.log" | grep -o '"samples_per_s": [0-9.]*' | awk '{print $2}')
		[ -n "$spid" ] && { kill "$spid"; wait "$spid" 2>/dev/null || true; }
		printf '%s\t%s\t%s\n' "$variant" "$sps" \
			"$(cat "$out/scrapes" 2>/dev/null || echo 0)" >>"$RAW/runs.tsv"
		if [ -s "$out/scrape-ms" ]; then
			awk '$1 == 200 {print $2 * 1000}' "$out/scrape-ms" \
				>>"$RAW/scrape-ms"
		fi
	else
		[ -n "$spid" ] && { kill "$spid"; wait "$spid" 2>/dev/null || true; }
		echo "scrape.sh: run failed: $out.log" >&2
		((!smoke)) || exit 1
	fi
}
for ((r = 1; r <= REPS; r++)); do
	# Alternate the order too, so neither variant always runs second.
	if ((r % 2)); then one plain "$r"; one scraped "$r"
	else one scraped "$r"; one plain "$r"; fi
done
python3 - "$RAW/runs.tsv" "$RAW/scrape-ms" <<'PY'
import os, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
med = {}
print("variant  runs  median samples/s  min..max        scrapes/run")
for v in ("plain", "scraped"):
    s = sorted(float(r[1]) for r in rows if r[0] == v and r[1])
    sc = [int(r[2]) for r in rows if r[0] == v]
    if not s:
        print(f"{v:8} {0:4}  (no run)")
        continue
    med[v] = statistics.median(s)
    print(f"{v:8} {len(s):4}  {med[v]:16.1f}  {s[0]:.0f}..{s[-1]:.0f}"
          f"  {statistics.median(sc):>11.0f}")
if os.path.exists(sys.argv[2]):
    ms = sorted(float(x) for x in open(sys.argv[2]) if x.strip())
    if ms:
        print(f"one /metrics fetch: median {statistics.median(ms):.2f} ms, "
              f"p90 {ms[int(0.9 * (len(ms) - 1))]:.2f} ms ({len(ms)} fetches)")
if len(med) == 2:
    cost = 1 - med["scraped"] / med["plain"]
    print(f"cost of scraping every process each second: {100 * cost:.2f}% "
          f"(target <= 2%): {'met' if cost <= 0.02 else 'NOT met'}")
PY
echo "scrape.sh: raw logs in $RAW" >&2
