#!/usr/bin/env bash
# ctr.sh — a recommendation model end to end (issue 26): one DLRM-style
# model (tr/ctr.h: 26 embedding tables of dim 16, bottom 64,16, dot
# interaction, top 64,1; row-wise Adagrad for the embeddings, Adagrad for
# the dense part) on one generated Criteo-shaped data set (ferry-ctrgen),
# one pass, the same global batch everywhere, on
#   ferry         the C trainer, 2 trainers, 2 servers (loopback)
#   ferry-torch   examples/torch_dlrm.py --system ferry, 2 trainers, 2 servers
#   torch-single  examples/torch_dlrm.py --system single (the quality
#                 reference: one row per distinct key, no eviction)
#   torch-ddp     examples/torch_dlrm.py --system ddp, 2 gloo ranks
# those four interleaved, --repeats times (medians reported), then once each
#   ferry-cap25   ferry with --sparse-capacity-mb at 25% of the unbounded
#                 run's table bytes per server
#   ferry-admit   ferry with admission (--admit-count 2)
#   ferry-100mbit, ferry-10mbit   ferry over emulated links (every host's
#                 link shaped, bench/links/ferry_job.sh, 2 servers), rows
#                 q8 both ways (a scale per row), dense fp16 both ways
#                 (needs root; else skipped)
#
# Writes bench/results/ctr.json: {"auc_ceiling", "data", "model", "runs":
# [{"system", "samples_per_s", "auc", "logloss", "wall_s", "samples",
# "bytes_per_step", "server_rss_mb", "table_mb", "repeats", ...}], "all_runs",
# "ratios", "command"} (runs: the median run of each system by
# samples_per_s; auc and logloss are those runs') and the AUC-vs-wall-time
# curves bench/results/ctr/<system>.csv (step,wall_s,samples,auc,logloss);
# bench/results/make_report.py renders them into docs/benchmarks.md.
#
#   bench/ctr.sh             # the full run: 2M training rows (~40 minutes)
#   bench/ctr.sh --quick     # 300k rows (under 10 minutes)
#   bench/ctr.sh --smoke     # seconds (ctest -L bench-smoke); JSON in a
#                            # temp dir, one repeat, no links
#   options: --rows N --test-rows M --repeats R --no-links --no-torch
#
# bytes_per_step: loopback bytes sent (all processes, from /proc/net/dev)
# over the run's global steps; over emulated links the
# trainers' own counters (bytes_pushed + bytes_pulled, all ranks).
# Builds with scripts/setup.sh first (not --smoke); FERRY_BUILD_DIR picks
# the build directory, FERRY_RESULTS_DIR where ctr.json goes,
# FERRY_CTR_DATA where the generated data is kept between runs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
size=full rows="" test_rows="" repeats="" links=1 torch=1
cmdline="bench/ctr.sh $*"
while (($#)); do
	case "$1" in
	--quick) size=quick; shift ;;
	--smoke) size=smoke; shift ;;
	--rows) rows=$2; shift 2 ;;
	--test-rows) test_rows=$2; shift 2 ;;
	--repeats) repeats=$2; shift 2 ;;
	--no-links) links=0; shift ;;
	--no-torch) torch=0; shift ;;
	-h | --help) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "ctr.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
case $size in
full) ROWS=2000000 TEST=200000 REPS=3 VSCALE=0.1 ;;
quick) ROWS=300000 TEST=50000 REPS=3 VSCALE=0.02 ;;
smoke) ROWS=20000 TEST=4000 REPS=1 VSCALE=0.002 links=0 ;;
esac
ROWS=${rows:-$ROWS} TEST=${test_rows:-$TEST} REPS=${repeats:-$REPS}
# The model and the optimizers, the same for every system. BATCH is per
# trainer: the global batch (2 x BATCH) is torch-single's batch.
BATCH=${FERRY_CTR_BATCH:-1024} LR=${FERRY_CTR_LR:-0.02}
TABLE_LR=${FERRY_CTR_TABLE_LR:-0.05} SEED=1
MODEL=(--emb-dim 16 --bottom 64,16 --top 64,1 --interaction dot)
BUILD=${FERRY_BUILD_DIR:-build}
RESULTS=${FERRY_RESULTS_DIR:-bench/results}
PY=/usr/bin/python3
if [ $size = smoke ]; then
	RESULTS=${FERRY_RESULTS_DIR:-$(mktemp -d /tmp/ferry-ctr-smoke.XXXXXX)}
else
	[ -n "${FERRY_SKIP_SETUP:-}" ] || scripts/setup.sh
	cmake --build "$BUILD" -j2 --target ps-server trainer ferry-ctrgen \
		ferry >/dev/null
fi
BUILD=$(cd "$BUILD" && pwd)
PS=$BUILD/ps/ps-server TR=$BUILD/trainer/trainer
GEN=$BUILD/trainer/ferry-ctrgen
for b in "$PS" "$TR" "$GEN"; do
	[ -x "$b" ] || { echo "ctr.sh: no $b (build it first)" >&2; exit 1; }
done
if ((torch)) && ! $PY -c 'import torch, numpy' 2>/dev/null; then
	echo "ctr.sh: no torch or numpy for $PY: the PyTorch runs are skipped" >&2
	torch=0
fi
export FERRY_LIB=$BUILD/clients/libferry.so
export FERRY_PS_SERVER=$PS
export PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH}
RAW=${FERRY_BENCH_DIR:-$(mktemp -d /tmp/ferry-ctr.XXXXXX)}
mkdir -p "$RAW/curves" "$RESULTS"
T0=$(date +%s)
log() { echo "[ctr.sh +$(($(date +%s) - T0))s] $*" >&2; }
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

# --- data ----------------------------------------------------------------
DATA=${FERRY_CTR_DATA:-/tmp/ferry-ctr-data/r$ROWS-t$TEST-v$VSCALE-s$SEED}
if [ ! -s "$DATA/meta.json" ] || [ ! -s "$DATA/test.bin" ]; then
	log "generating $ROWS + $TEST rows into $DATA"
	mkdir -p "$DATA"
	"$GEN" --out "$DATA" --rows "$ROWS" --test-rows "$TEST" --seed "$SEED" \
		--format bin --vocab-scale "$VSCALE" >&2
fi
TRAIN=$DATA/train.bin TESTF=$DATA/test.bin
STEPS=$((ROWS / (2 * BATCH)))
# Progress evaluations: about 8 points a curve, on at most 20k test rows.
LOGI=$((STEPS / 8 > 0 ? STEPS / 8 : 1))
EVALR=$((TEST < 20000 ? TEST : 20000))
COMMON=(--data "$TRAIN" --test-data "$TESTF" "${MODEL[@]}" --epochs 1
	--lr "$LR" --table-lr "$TABLE_LR" --seed "$SEED"
	--log-interval "$LOGI" --eval-rows "$EVALR")
CTRAIN=(--model dlrm --optimizer adagrad --table-optimizer adagrad
	--table-init-scale 0.05 --batch "$BATCH" --blas-threads 1)

free_port() {
	$PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# Loopback's transmitted bytes (each byte sent once is counted once).
lo_bytes() { awk '/^ *lo:/ {printf "%.0f\n", $10}' /proc/net/dev; }
peak_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
wait_for() { # FILE PATTERN: until FILE holds PATTERN (a process's log)
	for ((i = 0; i < 3000; i++)); do
		grep -qs "$2" "$1" && return 0
		sleep 0.1
	done
	log "timed out waiting for '$2' in $1"
	return 1
}

# cluster NAME [SERVER FLAGS...]: a scheduler and 2 servers for 2
# trainers on loopback; sets URL, SPIDS and SURLS (their /metrics bases).
cluster() {
	local name=$1 i
	shift
	URL=tcp://127.0.0.1:$(free_port) SPIDS=() SURLS=()
	"$PS" --role scheduler --listen "$URL" --trainers 2 --servers 2 \
		>"$RAW/$name-sched.log" 2>&1 &
	pids+=($!)
	for i in 0 1; do
		rm -f "$RAW/$name-s$i.url"
		"$PS" --scheduler "$URL" --http-listen 127.0.0.1:0 \
			--http-url-file "$RAW/$name-s$i.url" "$@" \
			>"$RAW/$name-server-$i.log" 2>&1 &
		pids+=($!) SPIDS+=($!)
	done
	for i in 0 1; do
		wait_for "$RAW/$name-s$i.url" http
		SURLS+=("$(cat "$RAW/$name-s$i.url")")
	done
}
# table_bytes URL...: the sum of ferry_table_bytes over the servers.
table_bytes() {
	local u t=0 b
	for u in "$@"; do
		b=$($PY - "$u/metrics" <<'EOF'
import sys, urllib.request
s = 0.0
for line in urllib.request.urlopen(sys.argv[1], timeout=10).read().decode().splitlines():
    if line.startswith("ferry_table_bytes{"):
        s += float(line.rsplit(" ", 1)[1])
print(int(s))
EOF
)
		t=$((t + b))
	done
	echo $t
}
# record NAME SYSTEM OUT LO0 [SERVER_KB TABLE_BYTES]: one run's JSON object
# from its output (the last JSON line; the trainer's {"summary": ...}).
record() {
	local name=$1 system=$2 out=$3 lo0=$4 skb=${5:-0} tb=${6:-0}
	$PY - "$out" "$system" "$(($(lo_bytes) - lo0))" "$STEPS" "$skb" "$tb" \
		"$RAW/curves/$name.csv" >"$RAW/$name.json" <<'EOF'
import json, os, sys
out, system, lo, steps, skb, tb, curve = sys.argv[1:8]
obj = None
for line in open(out, errors="replace"):
    line = line.strip()
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except ValueError:
            pass
if obj is None:
    sys.exit(f"ctr.sh: no JSON summary in {out}")
obj = obj.get("summary", obj)
r = {"system": system}
for k in ("samples_per_s", "auc", "logloss", "wall_s", "samples"):
    r[k] = obj.get(k)
steps = int(steps)
r["bytes_per_step"] = int(lo) / steps if int(lo) > 0 and steps else None
if r["bytes_per_step"] is None and steps and obj.get("bytes_pushed") is not None:
    # Over emulated links: rank 0's own counters, times the 2 trainers.
    r["bytes_per_step"] = 2 * (obj["bytes_pushed"] + obj["bytes_pulled"]) / steps
r["server_rss_mb"] = int(skb) / 1024 if int(skb) else None
r["table_mb"] = int(tb) / 2**20 if int(tb) else None
r["curve"] = curve if os.path.exists(curve) else None
print(json.dumps(r))
EOF
}

# ferry NAME SYSTEM [SERVER FLAGS...] -- [TRAINER FLAGS...]
ferry() {
	local name=$1 system=$2 sflags=() tflags=() lo0 r p skb=0 tb
	shift 2
	while (($#)) && [ "$1" != -- ]; do sflags+=("$1"); shift; done
	(($#)) && shift
	tflags=("$@")
	log "$name: the C trainer, 2 trainers, 2 servers"
	cluster "$name" "${sflags[@]}"
	lo0=$(lo_bytes)
	local tp=() extra
	for r in 0 1; do
		extra=()
		((r != 0)) || extra=(--curve "$RAW/curves/$name.csv")
		"$TR" --scheduler "$URL" --rank $r "${COMMON[@]}" "${CTRAIN[@]}" \
			"${extra[@]}" "${tflags[@]}" >"$RAW/$name-t$r.out" \
			2>"$RAW/$name-t$r.log" &
		tp+=($!)
	done
	for p in "${tp[@]}"; do
		wait "$p" || { log "$name: a trainer failed"; tail -n 5 "$RAW/$name"-t*.log >&2; exit 1; }
	done
	tb=$(table_bytes "${SURLS[@]}")
	for p in "${SPIDS[@]}"; do skb=$((skb + $(peak_kb "$p"))); done
	record "$name" "$system" "$RAW/$name-t0.out" "$lo0" "$skb" "$tb"
	cleanup; pids=()
	log "$name: $(cat "$RAW/$name.json")"
}

# ferry_torch NAME: examples/torch_dlrm.py --system ferry on 2 servers.
ferry_torch() {
	local name=$1 lo0 r p skb=0 tb tp=() extra
	log "$name: PyTorch on Ferry, 2 trainers, 2 servers"
	cluster "$name"
	lo0=$(lo_bytes)
	for r in 0 1; do
		extra=()
		((r != 0)) || extra=(--curve "$RAW/curves/$name.csv")
		$PY examples/torch_dlrm.py --system ferry --scheduler "$URL" \
			--rank $r --trainers 2 "${COMMON[@]}" --batch "$BATCH" \
			"${extra[@]}" >"$RAW/$name-t$r.out" 2>"$RAW/$name-t$r.log" &
		tp+=($!)
	done
	for p in "${tp[@]}"; do
		wait "$p" || { log "$name: a trainer failed"; tail -n 5 "$RAW/$name"-t*.log >&2; exit 1; }
	done
	tb=$(table_bytes "${SURLS[@]}")
	for p in "${SPIDS[@]}"; do skb=$((skb + $(peak_kb "$p"))); done
	record "$name" ferry-torch "$RAW/$name-t0.out" "$lo0" "$skb" "$tb"
	cleanup; pids=()
	log "$name: $(cat "$RAW/$name.json")"
}

# torch NAME SYSTEM FLAGS...: examples/torch_dlrm.py single or ddp.
torch_run() {
	local name=$1 system=$2 lo0 p skb
	shift 2
	log "$name: $system"
	lo0=$(lo_bytes)
	/usr/bin/time -f '%M' -o "$RAW/$name.maxrss" \
		$PY examples/torch_dlrm.py "${COMMON[@]}" \
		--curve "$RAW/curves/$name.csv" "$@" >"$RAW/$name.out" \
		2>"$RAW/$name.log" || { log "$name failed"; tail -n 5 "$RAW/$name.log" >&2; exit 1; }
	skb=$(tail -n 1 "$RAW/$name.maxrss")
	record "$name" "$system" "$RAW/$name.out" "$lo0" "$skb" 0
	log "$name: $(cat "$RAW/$name.json")"
}

# --- the four systems, interleaved -----------------------------------------
for ((k = 1; k <= REPS; k++)); do
	ferry "ferry-$k" ferry --
	if ((torch)); then
		ferry_torch "ferry-torch-$k"
		torch_run "torch-single-$k" torch-single --system single \
			--batch $((2 * BATCH))
		torch_run "torch-ddp-$k" torch-ddp --system ddp --ranks 2 \
			--batch "$BATCH"
	fi
done

# --- memory cap and admission ----------------------------------------------
tb1=$($PY -c "import json; print(int(json.load(open('$RAW/ferry-1.json'))['table_mb'] or 0))")
cap=$(((tb1 + 3) / 8)) # 25% of the total over 2 servers, rounded up
((cap >= 1)) || cap=1
ferry ferry-cap25 ferry-cap25 --sparse-capacity-mb "$cap" --
ferry ferry-admit ferry-admit -- --admit-count 2

# --- slow links --------------------------------------------------------------
LINKRUNS=()
if ((links)) && bench/links/netsim.sh check 2>"$RAW/links-skip.txt"; then
	for rate in 100mbit 10mbit; do
		name=ferry-$rate
		log "$name: ferry over $rate links (q8 rows, fp16 dense)"
		FERRY_JOB_RUN_DIR=$RAW/$name-run
		mkdir -p "$FERRY_JOB_RUN_DIR"
		FERRY_JOB_RUN_DIR=$FERRY_JOB_RUN_DIR bench/links/ferry_job.sh \
			--rate "$rate" --servers 2 --trainers 2 --build "$BUILD" \
			--name "ctr$$" --curve "$RAW/curves/$name.csv" -- \
			"${COMMON[@]}" "${CTRAIN[@]}" --codec-push fp16 --codec-pull fp16 \
			--table-codec-push q8 --table-codec-pull q8 \
			>"$RAW/$name.out" 2>"$RAW/$name.log" ||
			{ log "$name failed"; tail -n 5 "$RAW/$name.log" >&2; exit 1; }
		record "$name" "$name" "$RAW/$name.out" "$(lo_bytes)" 0 0
		LINKRUNS+=("$name")
		log "$name: $(cat "$RAW/$name.json")"
	done
else
	log "links skipped: $(cat "$RAW/links-skip.txt" 2>/dev/null)"
fi

# --- results ------------------------------------------------------------------
mkdir -p "$RESULTS/ctr"
$PY - "$RAW" "$RESULTS" "$DATA/meta.json" "$cmdline" "$BATCH" "$LR" \
	"$TABLE_LR" "$ROWS" "$TEST" "$VSCALE" <<'EOF'
import glob, json, os, shutil, statistics, sys
raw, results, meta, cmd, batch, lr, tlr, rows, test, vs = sys.argv[1:11]
meta = json.load(open(meta))
runs = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(raw, "*.json")))]
out, by = [], {}
for r in runs:
    by.setdefault(r["system"], []).append(r)
order = ["ferry", "ferry-torch", "torch-single", "torch-ddp", "ferry-cap25",
         "ferry-admit", "ferry-100mbit", "ferry-10mbit"]
for s in order:
    rs = by.get(s)
    if not rs:
        continue
    rs = sorted(rs, key=lambda r: r["samples_per_s"] or 0)
    m = dict(rs[len(rs) // 2])
    m["repeats"] = len(rs)
    m["samples_per_s_all"] = [r["samples_per_s"] for r in rs]
    m["auc_all"] = [r["auc"] for r in rs]
    if m.get("curve"):
        dst = os.path.join(results, "ctr", s + ".csv")
        shutil.copyfile(m["curve"], dst)
        m["curve"] = os.path.relpath(dst, results)
    out.append(m)
get = {r["system"]: r for r in out}
def ratio(a, b, k="samples_per_s"):
    if a in get and b in get and get[a][k] and get[b][k]:
        return get[a][k] / get[b][k]
    return None
def diff(a, b, k="auc"):
    if a in get and b in get and get[a][k] is not None and get[b][k] is not None:
        return get[a][k] - get[b][k]
    return None
ratios = {
    "ferry_over_ddp_samples_per_s": ratio("ferry", "torch-ddp"),
    "ferry_torch_over_ddp_samples_per_s": ratio("ferry-torch", "torch-ddp"),
    "ferry_auc_minus_single": diff("ferry", "torch-single"),
    "ferry_torch_auc_minus_single": diff("ferry-torch", "torch-single"),
    "ferry_cap25_auc_minus_single": diff("ferry-cap25", "torch-single"),
    "ferry_admit_auc_minus_single": diff("ferry-admit", "torch-single"),
    "ferry_100mbit_wall_over_unshaped": ratio("ferry-100mbit", "ferry", "wall_s"),
    "ferry_100mbit_auc_minus_unshaped": diff("ferry-100mbit", "ferry"),
    "ferry_10mbit_wall_over_unshaped": ratio("ferry-10mbit", "ferry", "wall_s"),
    "ferry_10mbit_auc_minus_unshaped": diff("ferry-10mbit", "ferry"),
}
# "Reaches the unshaped run's final AUC": the shaped run's final AUC (all
# test rows) is at least the unshaped one's less 0.0005 (the codecs change
# the arithmetic, not the model); its time is then its wall time.
d = ratios["ferry_100mbit_auc_minus_unshaped"]
ratios["ferry_100mbit_reaches_unshaped_auc"] = None if d is None else d >= -0.0005
doc = {"auc_ceiling": meta.get("auc_ceiling"),
       "logloss_ceiling": meta.get("logloss_ceiling"),
       "data": {"rows": int(rows), "test_rows": int(test), "vocab_scale": float(vs),
                "positive_rate": meta.get("positive_rate"),
                "total_vocab": meta.get("total_vocab")},
       "model": {"emb_dim": 16, "bottom": "64,16", "top": "64,1", "interaction": "dot",
                 "batch_per_trainer": int(batch), "global_batch": 2 * int(batch),
                 "optimizer": "adagrad", "lr": float(lr),
                 "table_optimizer": "adagrad (row-wise)", "table_lr": float(tlr)},
       "runs": out, "all_runs": runs, "ratios": ratios, "command": cmd}
with open(os.path.join(results, "ctr.json"), "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
print(json.dumps(ratios, indent=1))
EOF
log "wrote $RESULTS/ctr.json (raw logs in $RAW)"
