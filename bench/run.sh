#!/usr/bin/env bash
# run.sh — Ferry's benchmark suite (issue 5): transport vs raw nng, end to
# end vs PyTorch (single, DDP/gloo, RPC PS, PyTorch on Ferry), the PyTorch
# examples on Ferry vs DDP (bench/peers/torch_examples.py), the servers'
# optimizers vs torch.optim (bench/optim.sh), slow links, time to 84% over
# slow links (bench/links/time_to_acc.sh), scale,
# plus a perf profile of the sync job, the SSP sweep (bench/ssp.sh) and a
# recommendation model side by side (bench/ctr.sh). Writes docs/benchmarks.md,
# docs/plots/*.png and bench/results/latest.json.
#
#   bench/run.sh [--quick] [--skip-build] [--smoke]
#
# --quick: fewer payload sizes and repeats, a few steps per slow-link run
#          (epoch time projected from the mean step time); under 5 minutes.
# --smoke: every stage once at its smallest (20 steps a job, one payload,
#          the other scripts' --smoke; the slow links, the profile, the
#          PyTorch examples and the repeats of the torch peers are
#          left to their own smoke tests), with what FERRY_BUILD_DIR
#          (default build/) holds, the report in the raw directory instead
#          of docs/: ctest -L bench-smoke; fails when a Ferry run fails.
# Raw logs go to $FERRY_BENCH_DIR (default a temp dir; printed at the end).
# Builds into build-bench/ (override with FERRY_BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
quick=0 skip_build=0 smoke=0 failed=0
for a in "$@"; do
	case "$a" in
	--quick) quick=1 ;;
	--skip-build) skip_build=1 ;;
	--smoke) smoke=1 quick=1 skip_build=1 ;;
	-h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "run.sh: unknown flag $a" >&2; exit 2 ;;
	esac
done
BUILD=${FERRY_BUILD_DIR:-build-bench}
if ((smoke)); then
	BUILD=${FERRY_BUILD_DIR:-build}
	[ -d /usr/share/datasets/fashion-mnist ] ||
		{ echo "run.sh: SKIP: no data set"; exit 77; }
	export FERRY_MAX_STEPS=20 # every trainer's --max-steps (env)
fi
RAW=${FERRY_BENCH_DIR:-$(mktemp -d /tmp/ferry-bench.XXXXXX)}
mkdir -p "$RAW" "$RAW/curves" bench/results docs/plots
PY=/usr/bin/python3
T0=$(date +%s)
log() { echo "[run.sh +$(($(date +%s) - T0))s] $*" >&2; }

# --- build --------------------------------------------------------------
if ((!skip_build)); then
	log "building into $BUILD"
	for i in 1 2 3; do
		cmake -S . -B "$BUILD" -DFERRY_TESTS=OFF >"$RAW/cmake.log" 2>&1 &&
			cmake --build "$BUILD" -j2 >>"$RAW/cmake.log" 2>&1 && break
		log "build failed (try $i), retrying in 30 s; see $RAW/cmake.log"
		sleep 30
	done
fi
PS="$BUILD/ps/ps-server" TR="$BUILD/trainer/trainer"
TB="$BUILD/bench/transport/transport_bench"
for b in "$PS" "$TR" "$TB"; do [ -x "$b" ] || { echo "run.sh: missing $b" >&2; exit 1; }; done

# --- machine line -------------------------------------------------------
pkgver() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo "?"; }
{
	echo "cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
	echo "cores=$(nproc)"
	echo "mem_gib=$(awk '/MemTotal/ {printf "%.0f", $2/1048576}' /proc/meminfo)"
	echo "kernel=$(uname -r)"
	echo "os=$(. /etc/os-release; echo "$PRETTY_NAME")"
	echo "nng=$(pkgver libnng1)"
	echo "openblas=$(pkgver libopenblas0)"
	echo "torch=$($PY -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"
	echo "python=$($PY -c 'import sys; print(sys.version.split()[0])')"
	echo "gcc=$(gcc -dumpfullversion 2>/dev/null || echo ?)"
	echo "commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- ps proto clients compression trainer sharding || echo '+dirty')"
	echo "quick=$quick"
	echo "date=$(date -u +%Y-%m-%dT%H:%MZ)"
} >"$RAW/machine.env"

# --- 1. transport -------------------------------------------------------
if ((smoke)); then
	tflags=(--payloads 4k --repeats 1 --min-time 0.05)
elif ((quick)); then
	tflags=(--payloads 4k,64k,1M,16M --repeats 3 --min-time 0.15)
else
	tflags=(--payloads 4k,16k,64k,256k,1M,4M,16M,64M --repeats 5 --min-time 0.3)
fi
log "transport: ${tflags[*]}"
"$TB" --ps "$PS" "${tflags[@]}" --json "$RAW/transport.json" | tee "$RAW/transport.txt" >&2 ||
	log "transport: some points failed (see above)"

# --- 2. scale -----------------------------------------------------------
scale=1,4,16,64
((!smoke)) || scale=1,4
log "scale: $scale clients"
"$TB" --ps "$PS" --scale "$scale" --duration $((quick ? 1 : 3)) \
	--json "$RAW/scale.json" | tee "$RAW/scale.txt" >&2 || log "scale failed"

# --- 3. end to end ------------------------------------------------------
EPOCHS=3 LOGI=100
((!smoke)) || EPOCHS=1 LOGI=10
: >"$RAW/e2e.jsonl"
# local_job DIR SERVERS TRAINERS [trainer flags...]: scheduler + servers +
# trainers on loopback from $BUILD (no rebuild mid-run, unlike
# scripts/run-local.sh); --curve only for rank 0. Outputs in DIR.
local_job() {
	local dir=$1 m=$2 t=$3 pids=() tp=() rc=0 sched i
	shift 3
	mkdir -p "$dir"
	rm -f "$dir/scheduler.url"
	"$PS" --role=scheduler --trainers="$t" --servers="$m" --url-file="$dir/scheduler.url" \
		--shard-bytes="${SHARD_BYTES:-1048576}" --log-level=warn 2>"$dir/scheduler.log" &
	pids+=($!)
	for i in $(seq 200); do [ -s "$dir/scheduler.url" ] && break; sleep 0.05; done
	sched=$(cat "$dir/scheduler.url" 2>/dev/null) || { kill "${pids[@]}"; return 1; }
	for ((i = 0; i < m; i++)); do
		"$PS" --role=server --scheduler="$sched" --log-level=warn 2>"$dir/server-$i.log" &
		pids+=($!)
	done
	for ((i = 0; i < t; i++)); do
		local extra=()
		((i == 0)) && [ -n "${CURVE:-}" ] && extra=(--curve "$CURVE")
		"$TR" --scheduler="$sched" --rank=$i "$@" "${extra[@]}" >"$dir/trainer-$i.out" 2>"$dir/trainer-$i.log" &
		tp+=($!)
	done
	for p in "${tp[@]}"; do wait "$p" || rc=$?; done
	kill "${pids[@]}" 2>/dev/null || true
	wait "${pids[@]}" 2>/dev/null || true
	return $rc
}
# ferry_run NAME MODE TRAINERS PUSH PULL: $SERVERS servers (default 1)
# with $SHARD_BYTES shards (default 1 MiB), T trainers, 3 epochs.
ferry_run() {
	local name=$1 mode=$2 t=$3 cp=$4 cl=$5 dir="$RAW/e2e-$1"
	local m=${SERVERS:-1} sb=${SHARD_BYTES:-1048576}
	log "e2e: ferry $name"
	rm -rf "$dir"
	if CURVE="$RAW/curves/$name.csv" local_job "$dir" "$m" "$t" --epochs $EPOCHS \
		--mode "$mode" --codec-push "$cp" --codec-pull "$cl" --log-interval $LOGI; then
		cat "$dir"/trainer-*.out | grep '"summary"' |
			$PY -c 'import sys,json; print(json.dumps({"name": sys.argv[1], "system": "ferry", "mode": sys.argv[2], "trainers": int(sys.argv[3]), "codec": sys.argv[4], "servers": int(sys.argv[5]), "shard_bytes": int(sys.argv[6]), "status": "ok", "summaries": [json.loads(l)["summary"] for l in sys.stdin]}))' \
				"$name" "$mode" "$t" "$cp/$cl" "$m" "$sb" >>"$RAW/e2e.jsonl"
	else
		local why
		why=$(grep -h -m1 -E ' E ' "$dir"/trainer-*.log 2>/dev/null | head -1 | cut -c1-200)
		log "e2e: ferry $name failed: $why"
		failed=1
		$PY -c 'import sys,json; print(json.dumps({"name": sys.argv[1], "system": "ferry", "mode": sys.argv[2], "trainers": int(sys.argv[3]), "codec": sys.argv[4], "status": "pending", "why": sys.argv[5], "summaries": []}))' \
			"$name" "$mode" "$t" "$cp/$cl" "$why" >>"$RAW/e2e.jsonl"
	fi
}
# torch_run MODE [NAME]: a PyTorch peer, 2 workers, 3 epochs. MODE is
# torch_mlp.py's single, ddp or rpc, or ferry: the same PyTorch loop on a
# Ferry job through the Python binding (bench/peers/torch_ferry.py, its own
# scheduler + 1 server from $BUILD).
torch_run() {
	local m=$1 name=${2:-torch-$1} dir="$RAW/e2e-${2:-torch-$1}" peer
	rm -rf "$dir"
	mkdir -p "$dir"
	log "e2e: $name"
	if [ "$m" = ferry ]; then
		peer=(bench/peers/torch_ferry.py --build "$BUILD" --servers 1)
	else
		peer=(bench/peers/torch_mlp.py --mode "$m" --port $((29500 + RANDOM % 2000)))
	fi
	if timeout 900 $PY "${peer[@]}" --world 2 --epochs $EPOCHS \
		--log-interval $LOGI --curve "$RAW/curves/$name.csv" \
		>"$dir/run.out" 2>"$dir/run.log"; then
		grep '"summary"' "$dir/run.out" |
			$PY -c 'import sys,json; s=[json.loads(l)["summary"] for l in sys.stdin]; print(json.dumps({"name": sys.argv[2], "system": "torch-"+sys.argv[1], "mode": "sync", "trainers": s[0]["trainers"], "codec": "none/none", "status": "ok", "summaries": s}))' \
				"$m" "$name" >>"$RAW/e2e.jsonl"
	else
		log "e2e: torch $m failed; see $dir/run.log"
	fi
}
for mode in sync async; do
	for t in 1 2; do
		ferry_run "$mode-t$t-none" $mode $t none none
	done
done
for codec in q8/q8 q4/q8; do
	for mode in sync async; do
		ferry_run "$mode-t2-${codec%/*}" $mode 2 "${codec%/*}" "${codec#*/}"
	done
	if ((!quick)); then
		ferry_run "sync-t1-${codec%/*}" sync 1 "${codec%/*}" "${codec#*/}"
	fi
done
# Accuracy per codec pair (3 epochs, sync, 2 trainers): the full run only.
if ((!quick)); then
	for codec in fp16/fp16 q4/q4 q2/q4 sign/q8 topk:0.05/q8; do
		ferry_run "sync-t2-${codec%/*}-${codec#*/}" sync 2 "${codec%/*}" \
			"${codec#*/}"
	done
fi
for m in single ddp rpc ferry; do torch_run $m; done
SERVERS=2 SHARD_BYTES=262144 ferry_run sync-t2-none-m2 sync 2 none none

# Head to head: the configurations the targets compare, interleaved and
# repeated (this machine's throughput drifts by tens of percent between
# minutes; the report takes medians over the repeats).
for ((rep = 1; rep <= (quick ? 1 : 3); rep++)); do
	for cfg in "1 1048576 none" "1 1048576 q4" "2 262144 none" "2 262144 q4"; do
		read -r m sb c <<<"$cfg"
		SERVERS=$m SHARD_BYTES=$sb ferry_run "h2h-ferry-m$m-$c-r$rep" sync 2 "$c" "$c"
	done
	# --smoke: the e2e torch runs above are these same four commands.
	((smoke)) || for m in single ddp rpc ferry; do
		torch_run $m "h2h-torch-$m-r$rep"
	done
done

# --- 3b. optimizers vs torch.optim (issue 13) ----------------------------
# adam (lr 1e-3) and momentum (0.9, lr 0.01) on Ferry's servers beside
# torch.optim under DDP, same job; writes bench/results/optim.json, which
# the report renders.
log "optim: ferry --optimizer adam|momentum vs torch.optim"
optim_args=($((quick ? 1 : 3)))
((!smoke)) || optim_args=(--smoke)
FERRY_SKIP_SETUP=1 FERRY_BUILD_DIR="$BUILD" bench/optim.sh "${optim_args[@]}" \
	>"$RAW/optim.txt" 2>"$RAW/optim.log" || {
	log "optim: failed; see $RAW/optim.log"
	failed=1
}

# --- 3c. the PyTorch examples: Ferry vs DDP (issue 29) -----------------
# examples/torch_cnn.py and torch_transformer.py through ferry.run (with and
# without --overlap) and through DDP, 3 interleaved runs each (--quick: a few
# hundred steps); writes bench/results/torch_peers.json, which the report
# renders (--smoke: its JSON stays in the raw directory).
if ((smoke)); then
	log "torch examples: not in --smoke (bench/peers/torch_examples.py --smoke is its own test)"
else
	log "torch examples: ferry vs ddp (cnn, transformer)"
	tex_args=()
	((!quick)) || tex_args=(--quick)
	rc=0
	FERRY_SKIP_SETUP=1 $PY bench/peers/torch_examples.py --build "$BUILD" \
		--raw "$RAW/torch-peers" "${tex_args[@]}" >"$RAW/torch-peers.txt" \
		2>"$RAW/torch-peers.log" || rc=$?
	case $rc in
	0) cat "$RAW/torch-peers.txt" >&2 ;;
	77) log "torch examples: skipped: $(tail -n 1 "$RAW/torch-peers.txt")" ;;
	*)
		log "torch examples: failed; see $RAW/torch-peers.log"
		failed=1
		;;
	esac
fi

# --- 4. slow links ------------------------------------------------------
: >"$RAW/links.jsonl"
if ((smoke)); then
	log "links: not in --smoke (bench/links/ferry_job.sh --smoke is its own test)"
elif bench/links/netsim.sh check 2>"$RAW/links-skip.txt"; then
	for rate in none 1gbit 100mbit 10mbit; do
		for codec in none/none q8/q8 q4/q8 q4/q4; do
			if ((quick)); then
				case $rate in none | 1gbit) steps=80 ;; 100mbit) steps=20 ;; *) steps=10 ;; esac
			else
				case $rate in 10mbit) steps=40 ;; *) steps=0 ;; esac
			fi
			log "links: $rate $codec (${steps:-epoch} steps)"
			out="$RAW/links-$rate-${codec%/*}.out"
			if bench/links/ferry_job.sh --rate "$rate" --build "$BUILD" --name "fb$rate" -- \
				--epochs 1 --max-steps "$steps" --log-interval 0 \
				--codec-push "${codec%/*}" --codec-pull "${codec#*/}" >"$out" 2>"$out.err"; then
				grep '"summary"' "$out" | $PY -c 'import sys,json; s=json.loads(sys.stdin.read())["summary"]; print(json.dumps({"rate": sys.argv[1], "codec": sys.argv[2], "status": "ok", "summary": s}))' \
					"$rate" "$codec" >>"$RAW/links.jsonl"
			else
				log "links: $rate $codec failed: $(grep -v '^ *$' "$out.err" | tail -n 1 | cut -c1-160)"
				$PY -c 'import sys,json; print(json.dumps({"rate": sys.argv[1], "codec": sys.argv[2], "status": "pending", "why": sys.argv[3]}))' \
					"$rate" "$codec" "$(grep -h ' E ' "$out.err" | tail -n 1 | cut -c1-200)" >>"$RAW/links.jsonl"
			fi
		done
	done
else
	log "links: $(cat "$RAW/links-skip.txt")"
fi

# --- 4b. time to 84% over slow links (issue 14) -------------------------
# Writes bench/results/time_to_acc.json, which the report renders; --quick:
# unshaped and 100mbit only, 180 s per run.
if ((smoke)); then
	log "time to 84%: not in --smoke (bench/links/time_to_acc.sh --smoke)"
else
	log "time to 84%: bench/links/time_to_acc.sh"
	bench/links/time_to_acc.sh --build "$BUILD" --raw "$RAW/ttacc" \
		$( ((quick)) && echo --quick) >"$RAW/ttacc.txt" 2>"$RAW/ttacc.log" ||
		log "time to 84%: skipped or failed; see $RAW/ttacc.log"
fi

# --- 5. profile of the sync job (where the time goes) -------------------
if ((!smoke)) && command -v perf >/dev/null; then
	log "profile: perf record of ferry sync, 2 trainers, 3 epochs"
	perf record -F 499 -g -o "$RAW/perf.data" -- bash -c "$(declare -f local_job); \
		PS=$PS TR=$TR local_job $RAW/perf-run 1 2 --epochs 3 --log-interval 0" \
		>"$RAW/perf-run.out" 2>"$RAW/perf.err" || true
	perf report -i "$RAW/perf.data" --no-children --sort comm,dso,sym -g none \
		--stdio 2>/dev/null | grep -v '^#' | grep '%' | head -25 >"$RAW/perf-top.txt" || true
	perf report -i "$RAW/perf.data" --no-children --sort comm,dso -g none \
		--stdio 2>/dev/null | grep -v '^#' | grep '%' | head -12 >"$RAW/perf-dso.txt" || true
fi

# --- 6. codec figures (bench/codec, owned by its author) ----------------
CB="$BUILD/bench/codec/codec_bench"
if [ -x "$CB" ]; then
	log "codec: $CB"
	timeout 300 "$CB" --reps $((smoke ? 1 : quick ? 5 : 15)) --json "$RAW/codec.json" \
		>"$RAW/codec.txt" 2>&1 || log "codec bench failed"
fi

# --- 7. SSP sweep: one trainer at half speed (bench/ssp.sh) --------------
log "ssp: sync vs SSP K = 0, 1, 4, inf with a straggler"
ssp_flag=()
((!quick)) || ssp_flag=(--quick)
((!smoke)) || ssp_flag=(--smoke)
FERRY_BUILD_DIR=$BUILD FERRY_BENCH_DIR=$RAW/ssp bash bench/ssp.sh \
	"${ssp_flag[@]}" >"$RAW/ssp.txt" 2>&1 || {
	log "ssp sweep failed; see $RAW/ssp.txt"
	failed=1
}

# --- 8. a recommendation model side by side (bench/ctr.sh) ---------------
# Not in --smoke (bench/ctr.sh --smoke is its own test): its data set and
# PyTorch runs take minutes even at the quick size.
if ((!smoke)); then
	log "ctr: DLRM on Ferry, PyTorch on Ferry, PyTorch single and DDP"
	ctr_flag=()
	((!quick)) || ctr_flag=(--quick)
	FERRY_SKIP_SETUP=1 FERRY_BUILD_DIR=$BUILD FERRY_BENCH_DIR=$RAW/ctr \
		bash bench/ctr.sh "${ctr_flag[@]}" >"$RAW/ctr.txt" 2>&1 || {
		log "ctr failed; see $RAW/ctr.txt"
		failed=1
	}
fi

# --- report -------------------------------------------------------------
log "report"
if ((smoke)); then
	# The report of a smoke run is not a result: it stays in $RAW.
	mkdir -p "$RAW/plots"
	$PY bench/results/make_report.py "$RAW" "$RAW/benchmarks.md" \
		"$RAW/latest.json" "$RAW/plots"
	log "done in $(($(date +%s) - T0)) s; raw logs and report in $RAW"
	exit $failed
fi
mkdir -p bench/results/curves
# (the head-to-head repeats stay in $RAW: only medians are reported)
find "$RAW/curves" -name "*.csv" ! -name "h2h-*" -exec cp {} bench/results/curves/ \;
$PY bench/results/make_report.py "$RAW" docs/benchmarks.md bench/results/latest.json docs/plots
log "done in $(($(date +%s) - T0)) s; raw logs in $RAW"
