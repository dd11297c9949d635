#!/usr/bin/env bash
# time_to_acc.sh — time to 84% test accuracy over emulated links (issue 14,
# item 5): Fashion-MNIST, the default MLP, 2 trainers, sync, 1 server, for
# each link, codec pair and --overlap; PyTorch DDP (gloo) on the same
# shaped links as the peer row. Each run trains --epochs (3) or until its
# --cap-s time cap, whichever comes first; a run that never reaches 84%
# reports null.
#
#   bench/links/time_to_acc.sh [--links "none 1gbit 100mbit 10mbit mixed"]
#       [--codecs "none/none q4/q4 topk:0.01+q8/topk:0.02+q8
#                  randk:0.02+q8/topk:0.02+q8 auto/auto"]
#       [--overlap "0 1"] [--epochs 3] [--cap-s 900] [--log-interval 50]
#       [--no-ddp] [--quick] [--smoke] [--build DIR] [--raw DIR]
#
# --smoke (ctest -L bench-smoke): one unshaped fp32 run of 30 steps, no
# DDP, nothing installed or built (FERRY_BUILD_DIR as it is), the results
# in the raw directory instead of bench/results.
#
# Links: none (unshaped namespaces), 1gbit, 100mbit, 10mbit (every link,
# both directions, tc tbf), mixed (trainer 0 at 1gbit, trainer 1 at
# 20mbit, the server at 1gbit). --quick: unshaped and 100mbit only, cap
# 180 s. A codec the trainer refuses (e.g. `auto` in a build without it)
# gets a row of nulls and a note.
#
# Writes bench/results/time_to_acc.json ({"time_to_acc": [...], "notes":
# [...], "command": ...}), the accuracy-vs-wall-time curves
# bench/results/time_to_acc/<link>/*.csv (plus <link>.png when matplotlib
# is installed), and the `time_to_acc` list of bench/results/latest.json;
# bench/results/make_report.py renders them into docs/benchmarks.md.
# Needs root for network namespaces (exit 77 otherwise). Builds DIR
# (default build-bench/, or $FERRY_BUILD_DIR) with scripts/setup.sh when
# its binaries are missing.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
links="none 1gbit 100mbit 10mbit mixed"
codecs="none/none q4/q4 topk:0.01+q8/topk:0.02+q8 randk:0.02+q8/topk:0.02+q8 auto/auto"
overlaps="0 1" epochs=3 cap=900 logi=50 ddp=1 quick=0 smoke=0
build=${FERRY_BUILD_DIR:-$ROOT/build-bench}
raw=${FERRY_BENCH_DIR:-}
cmdline="bench/links/time_to_acc.sh $*"
while (($#)); do
	case "$1" in
	--links) links=$2; shift 2 ;;
	--codecs) codecs=$2; shift 2 ;;
	--overlap) overlaps=$2; shift 2 ;;
	--epochs) epochs=$2; shift 2 ;;
	--cap-s) cap=$2; shift 2 ;;
	--log-interval) logi=$2; shift 2 ;;
	--no-ddp) ddp=0; shift ;;
	--quick) quick=1; links="none 100mbit"; cap=180; shift ;;
	--smoke)
		smoke=1 links=none codecs=none/none overlaps=0 epochs=1 cap=60
		ddp=0 logi=10
		build=${FERRY_BUILD_DIR:-$ROOT/build}
		export FERRY_MAX_STEPS=30 # every trainer's --max-steps (env)
		shift ;;
	--build) build=$2; shift 2 ;;
	--raw) raw=$2; shift 2 ;;
	-h | --help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "time_to_acc: unknown flag $1" >&2; exit 2 ;;
	esac
done
NETSIM="$HERE/netsim.sh"
"$NETSIM" check || exit 77
PY=/usr/bin/python3
DATA=${FERRY_DATA_DIR:-/usr/share/datasets/fashion-mnist}
if ((!smoke)) && { [ ! -x "$build/ps/ps-server" ] || [ ! -x "$build/trainer/trainer" ]; }; then
	FERRY_BUILD_DIR="$build" "$ROOT/scripts/setup.sh" >&2
fi
# The accuracy-vs-time plots need matplotlib: install Debian's when it is
# missing (this script runs as root); without it the curves stay CSV.
if ((!smoke)) && ! "$PY" -c 'import matplotlib' 2>/dev/null; then
	apt_mpl() {
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends python3-matplotlib >/dev/null 2>&1
	}
	apt_mpl || { apt-get update -qq >/dev/null 2>&1 && apt_mpl; } ||
		echo "time_to_acc: python3-matplotlib could not be installed; no plots" >&2
fi
raw=${raw:-$(mktemp -d /tmp/ferry-ttacc.XXXXXX)}
mkdir -p "$raw"
log() { echo "[time_to_acc $(date -u +%H:%M:%S)] $*" >&2; }

# srv_rate LINK / trainer_rates LINK: the netsim rates of a link setting.
srv_rate() { case $1 in mixed) echo 1gbit ;; *) echo "$1" ;; esac; }
trainer_rates() { case $1 in mixed) echo 1gbit,20mbit ;; *) echo "$1,$1" ;; esac; }

# ferry_run LINK PUSH PULL OVERLAP: one Ferry job into $raw/<run>/.
ferry_run() {
	local link=$1 push=$2 pull=$3 ov=$4 d trs
	d="$raw/ferry-$link-${push//[:+]/_}-${pull//[:+]/_}-ov$ov"
	rm -rf "$d" && mkdir -p "$d"
	printf '%s\n' "$link" ferry "$push/$pull" "$ov" >"$d/run.txt"
	log "ferry $link $push/$pull overlap $ov (cap ${cap}s)"
	IFS=, read -r -a trs <<<"$(trainer_rates "$link")"
	if ! FERRY_JOB_RUN_DIR="$d" "$HERE/ferry_job.sh" \
		--rate "$(srv_rate "$link")" --rate-of "0=${trs[0]}" \
		--rate-of "1=${trs[1]}" --time-cap "$cap" --curve "$d/curve-0.csv" \
		--build "$build" --name "tta$$" -- --data="$DATA" \
		--epochs="$epochs" --log-interval="$logi" --seed=1 \
		--codec-push="$push" --codec-pull="$pull" --overlap="$ov" \
		>"$d/rank0.out" 2>"$d/job.err"; then
		log "  failed: $(grep -v '^ *$' "$d/job.err" | tail -n 1 | cut -c1-200)"
		((!smoke)) || exit 1
	fi
}

# ddp_run LINK: PyTorch DDP, one rank per trainer namespace.
ddp_run() {
	local link=$1 d="$raw/torch-ddp-$link" name="ttd$$" ip0 r p=() trs
	rm -rf "$d" && mkdir -p "$d"
	printf '%s\n' "$link" torch-ddp none/none 0 >"$d/run.txt"
	log "torch-ddp $link (cap ${cap}s)"
	IFS=, read -r -a trs <<<"$(trainer_rates "$link")"
	"$NETSIM" up "$name" "t0:${trs[0]}" "t1:${trs[1]}"
	ip0=$("$NETSIM" ip "$name" t0)
	for r in 0 1; do
		"$NETSIM" exec "$name" "t$r" env GLOO_SOCKET_IFNAME=eth0 \
			timeout "$cap" "$PY" "$ROOT/bench/peers/torch_mlp.py" --mode ddp \
			--rank $r --world 2 --master-addr "$ip0" --port 29533 \
			--data "$DATA" --epochs "$epochs" --log-interval "$logi" \
			--seed 1 --curve "$d/curve-0.csv" \
			>"$d/rank$r.out" 2>"$d/rank$r.err" &
		p+=($!)
	done
	for r in "${p[@]}"; do wait "$r" || true; done
	"$NETSIM" down "$name" || true
}

for link in $links; do
	for codec in $codecs; do
		for ov in $overlaps; do
			ferry_run "$link" "${codec%/*}" "${codec#*/}" "$ov"
		done
	done
	((ddp)) && ddp_run "$link"
done
log "report"
results="$ROOT/bench/results"
((!smoke)) || { results="$raw/results" && mkdir -p "$results"; }
"$PY" "$HERE/time_to_acc.py" "$raw" "$results" "$cmdline"
log "done; raw runs in $raw"
