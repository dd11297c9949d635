#!/usr/bin/env bash
# model.sh — issue 30's model-size part: how a push-pull's time and the
# servers' memory grow with the model, and the 1 GB job that trains.
#
#   model_sweep  dense models of 1 MB, 16 MB, 128 MB and 1 GB (--quick:
#                1 MB, 16 MB, 256 MB; --smoke: 1 MB, 4 MB), 2 sync trainers
#                (bench/scale/loadgen, constant gradient) on 4 servers:
#                push-pull time and goodput (bytes both ways / s, all
#                trainers, GB/s) beside the size's memcpy bound (one copy
#                of the bytes, numpy) and loopback bound (transport_bench's
#                raw nng echo of the same bytes, 2 clients x 2 echo servers,
#                at most 256 MB: its echo server's cap), the shard count,
#                and the servers' RSS summed over the 4 against state_mb
#                (weights + optimizer state + pull reference: what they
#                must hold) as rss_ratio
#   big_model_*  the largest size trained: loadgen --grad quadratic (the
#                loss 0.5|w - t|^2 falls), BIG_STEPS steps (200; --quick
#                20; FERRY_MODEL_BIG_STEPS overrides), its server RSS over
#                state_mb, and its push-pull goodput over the 1 MB one's
#                (the sweep's constant-gradient rows, same run)
#   rows_sweep   sparse tables of 1M, 10M and 100M rows (--quick 1M, 10M;
#                --smoke 20k), dim 8, SGD, one table shard in process
#                (bench/sparse_store: lookups and updates per core, RSS over
#                the rows' raw bytes), and through a loopback server
#                (bench/sparse_loop: rows/s, server RSS; --quick up to 1M)
#
#   bench/scale/model.sh [--quick] [--smoke] --json FILE
#
# Run by bench/scale.sh (FERRY_BUILD_DIR: the build tree, FERRY_SCALE_RAW:
# where the raw logs go). Time on 2 loaded cores: --smoke 15 s, --quick
# 1 min, default about 4 min plus 2-3 s per big-model step (200: 8-10
# min more). Memory: the 1 GB job holds about 8.6 GB (loadgen's 2 ranks:
# 5.4 GB, weights and gradient each and the target; 4 servers 3.2 GB);
# the 100M-row table about 4.8 GB, in process or in the server; never two
# at once. --smoke exits 77 (skipped) without loadgen, ps-server or numpy.
set -euo pipefail
cd "$(dirname "$0")/../.."
quick=0 smoke=0 json=
while (($#)); do
	case "$1" in
	--quick) quick=1 ;;
	--smoke) smoke=1 ;;
	--json) json=${2:?--json needs a file}; shift ;;
	-h | --help) sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "model.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
[ -n "$json" ] || { echo "model.sh: --json FILE is required" >&2; exit 2; }
BUILD=${FERRY_BUILD_DIR:-build}
RAW=${FERRY_SCALE_RAW:-$(mktemp -d /tmp/ferry-model.XXXXXX)}/model
mkdir -p "$RAW"
PS=$BUILD/ps/ps-server LG=$BUILD/bench/scale/loadgen
TB=$BUILD/bench/transport/transport_bench
STORE=$BUILD/bench/sparse_store/sparse-store-bench
LOOP=$BUILD/bench/sparse_loop/sparse-loop
PY=/usr/bin/python3
SERVERS=4 TRAINERS=2
if ((smoke)); then
	MB_SIZES="1 4" BIG_STEPS=20 ROWS="20000" LOOP_MAX=20000 MINT=0.1
elif ((quick)); then
	MB_SIZES="1 16 256" BIG_STEPS=20 ROWS="1000000 10000000"
	LOOP_MAX=1000000 MINT=0.2
else
	MB_SIZES="1 16 128 1024" BIG_STEPS=200
	ROWS="1000000 10000000 100000000" LOOP_MAX=100000000 MINT=0.3
fi
BIG_STEPS=${FERRY_MODEL_BIG_STEPS:-$BIG_STEPS}
for b in "$PS" "$LG" "$TB" "$STORE" "$LOOP"; do
	[ -x "$b" ] && continue
	echo "model.sh: no $b (build it first)" >&2
	((smoke)) && exit 77
	exit 1
done
$PY -c 'import numpy' 2>/dev/null || {
	echo "model.sh: $PY has no numpy" >&2
	((smoke)) && exit 77
	exit 1
}
log() { echo "[model.sh] $*" >&2; }

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
trap cleanup EXIT

# job NAME [SCHEDULER FLAGS...]: a scheduler for $TRAINERS trainers and
# $SERVERS servers on loopback; sets URL and WATCH (the servers' pids,
# comma-separated).
job() {
	local name=$1 d=$RAW/$1 sp=()
	shift
	mkdir -p "$d"
	rm -f "$d/sched.url"
	"$PS" --role=scheduler --trainers="$TRAINERS" --servers="$SERVERS" \
		--url-file="$d/sched.url" "$@" 2>"$d/sched.log" &
	pids+=($!)
	for _ in $(seq 200); do
		[ -s "$d/sched.url" ] && break
		sleep 0.05
	done
	[ -s "$d/sched.url" ] || { log "$name: no scheduler"; exit 1; }
	URL=$(cat "$d/sched.url")
	for ((m = 0; m < SERVERS; m++)); do
		"$PS" --role=server --scheduler="$URL" \
			2>"$d/server-$m.log" &
		pids+=($!) sp+=($!)
	done
	WATCH=$(IFS=,; echo "${sp[*]}")
}

# loadgen NAME FLOATS STEPS [FLAGS...]: loadgen's 2 sync ranks against the
# job named NAME (started here, stopped after); its JSON in $RAW/NAME.json.
loadgen() {
	local name=$1 floats=$2 steps=$3
	shift 3
	job "$name"
	if ! "$LG" --scheduler "$URL" --trainers "$TRAINERS" \
		--floats "$floats" --mode sync --steps "$steps" --warmup 2 \
		--watch-pids "$WATCH" --json "$RAW/$name.json" "$@" \
		2>"$RAW/$name/loadgen.log"; then
		log "$name: loadgen failed:"
		tail -n 5 "$RAW/$name/loadgen.log" >&2
		exit 1
	fi
	cleanup
}

# Dense sweep: steps so that each point runs about a second or more.
for mb in $MB_SIZES; do
	floats=$((mb * 262144)) steps=$((1000 / mb))
	((steps < 5)) && steps=5
	log "dense ${mb} MB: $steps push-pulls, $TRAINERS trainers, $SERVERS servers"
	loadgen "dense-$mb" "$floats" "$steps"
	# The loopback bound: nng echo of the same bytes (<= 256 MB).
	pl=$((mb > 256 ? 256 : mb))M
	"$TB" --ps "$PS" --transports tcp --pairs 2 --payloads "$pl" \
		--repeats 1 --min-time "$MINT" --json "$RAW/echo-$mb.json" \
		>"$RAW/echo-$mb.out" 2>&1 || {
		log "transport_bench $pl failed"
		tail -n 5 "$RAW/echo-$mb.out" >&2
	}
done
big_mb=${MB_SIZES##* }
log "big model: ${big_mb} MB trained $BIG_STEPS steps (quadratic loss)"
loadgen big "$((big_mb * 262144))" "$BIG_STEPS" --grad quadratic

# Sparse tables: in process for every size, over loopback up to LOOP_MAX.
: >"$RAW/rows.jsonl"
for rows in $ROWS; do
	log "rows: $rows rows, dim 8, sgd, in process"
	"$STORE" --rows "$rows" --dim 8 --optim sgd --seconds 2 \
		>"$RAW/store-$rows.json"
	if ((rows <= LOOP_MAX)); then
		log "rows: $rows rows through a loopback server"
		SERVERS=1 TRAINERS=1 job "rows-$rows"
		timeout 900 "$LOOP" --scheduler "$URL" --mode load,rate \
			--keys "$rows" --dim 8 --optim sgd --batch 16384 \
			--seconds 3 >"$RAW/loop-$rows.jsonl" \
			2>"$RAW/loop-$rows.err" || {
			log "sparse-loop $rows failed"
			tail -n 5 "$RAW/loop-$rows.err" >&2
			exit 1
		}
		awk '/^VmRSS:/ {print $2}' "/proc/$WATCH/status" \
			>"$RAW/loop-$rows.rss"
		cleanup
	fi
done

$PY - "$RAW" "$json" "$MB_SIZES" "$ROWS" "$big_mb" <<'PY'
import json, os, sys, time
import numpy as np

raw, out, sizes, rows_list, big_mb = sys.argv[1:6]
sizes = [int(s) for s in sizes.split()]
SHARD = 1 << 20  # the scheduler's default --shard-bytes
OPT_BUFS = {"sgd": 0, "momentum": 1, "nesterov": 1, "adagrad": 1,
            "adam": 2, "adamw": 2}


def load(path):
    with open(path) as f:
        return json.load(f)


def memcpy_gbps(nbytes):
    """One copy of nbytes (at most 256 MiB: the rate is flat past that),
    best of a few, GB/s."""
    n = min(nbytes, 256 << 20) // 4
    src = np.ones(n, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = float("inf")
    reps = max(3, min(50, (64 << 20) // (4 * n)))
    for _ in range(reps):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    return 4 * n / best / 1e9


def state_mb(lg):
    # Weights, the optimizer's buffers, and a pull reference when the
    # pull has a codec (none here: loadgen's default).
    bufs = 1 + OPT_BUFS.get(lg.get("optimizer", "sgd"), 0)
    return bufs * lg["bytes"] / 2**20


def row(mb, lg):
    echo = None
    p = os.path.join(raw, f"echo-{mb}.json")
    if os.path.exists(p):
        t = load(p)["transport"]
        if t:
            echo = t[0]["nng_echo_gbps"] / 8  # Gbit/s -> GB/s
    st = state_mb(lg)
    rss = lg["watched_rss_mb"]
    return {
        "bytes": int(lg["bytes"]), "floats": lg["floats"],
        "servers": len(lg["watched"]), "trainers": lg["trainers"],
        "shards": -(-int(lg["bytes"]) // SHARD),
        "push_pull_ms": lg["round_ms_median"],
        "goodput_gbps": lg["goodput_gbps"],
        "memcpy_gbps": round(memcpy_gbps(int(lg["bytes"])), 3),
        "loopback_gbps": round(echo, 3) if echo is not None else None,
        "server_rss_mb": rss, "server_hwm_mb": lg["watched_hwm_mb"],
        "state_mb": st, "rss_ratio": round(rss / st, 3),
        "optimizer": lg.get("optimizer", "sgd"), "steps": lg["steps"],
    }


sweep = [row(mb, load(os.path.join(raw, f"dense-{mb}.json")))
         for mb in sizes]
big = load(os.path.join(raw, "big.json"))
first = sweep[0]
big_row = next(r for r in sweep if r["bytes"] == big["bytes"])
rows_sweep = []
for rows in (int(r) for r in rows_list.split()):
    s = load(os.path.join(raw, f"store-{rows}.json"))
    r = {"rows": rows, "dim": s["dim"], "optim": s["optim"],
         "raw_mb": round(s["raw_bytes"] / 2**20, 1),
         "store_rss_mb": round(s["rss_bytes"] / 2**20, 1),
         "store_rss_over_raw": s["rss_over_raw"],
         "lookups_per_s_core": s["lookups_per_s_core"],
         "updates_per_s_core": s["updates_per_s_core"]}
    lp = os.path.join(raw, f"loop-{rows}.jsonl")
    if os.path.exists(lp):
        modes = [json.loads(l) for l in open(lp) if l.strip()]
        rate = next((m for m in modes if m["mode"] == "rate"), None)
        rss_kb = open(os.path.join(raw, f"loop-{rows}.rss")).read().strip()
        if rate:
            r["loopback_rows_per_s"] = round(
                min(rate["pushed_per_s"], rate["pulled_per_s"]))
        if rss_kb:
            r["server_rss_mb"] = round(int(rss_kb) / 1024, 1)
            r["server_rss_over_raw"] = round(
                int(rss_kb) * 1024 / s["raw_bytes"], 3)
    rows_sweep.append(r)
doc = {
    "model_sweep": sweep,
    "rows_sweep": rows_sweep,
    "big_model_bytes": int(big["bytes"]),
    "big_model_steps": big["steps"],
    "big_model_rss_mb": big["watched_rss_mb"],
    "big_model_state_mb": state_mb(big),
    "big_model_rss_ratio": round(big["watched_rss_mb"] / state_mb(big), 3),
    # the push-pull (constant gradient: no compute in the step) of the
    # big size over the 1 MB one's, both from this run's sweep
    "big_model_goodput_ratio": round(
        big_row["goodput_gbps"] / first["goodput_gbps"], 3),
    "big_model_goodput_gbps": big_row["goodput_gbps"],
    "big_model_train_goodput_gbps": big["goodput_gbps"],
    "big_model_loss_first": big.get("loss_first"),
    "big_model_loss_last": big.get("loss_last"),
    "big_model_ok": bool(big.get("ok")) and
    big.get("loss_last", 1) < big.get("loss_first", 0),
}
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
print(json.dumps({k: v for k, v in doc.items() if k.startswith("big")},
                 indent=1))
PY
log "wrote $json"
