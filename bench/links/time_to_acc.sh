#!/usr/bin/env bash
# time_to_acc.sh — time to 84% test accuracy over emulated links (issues
# 14 and 28): Fashion-MNIST, the default MLP, 2 trainers, sync, 1 server,
# for each link, codec pair and --overlap (per-step rows); with
# --local-steps H > 0 also local-steps rows (issue 28: H inner steps on
# the trainer, an outer optimizer on the server) for each H, fragment
# count, codec pair and outer optimizer; PyTorch DDP (gloo) on the same
# shaped links as the peer row. Each run trains --epochs (3) or until its
# --cap-s time cap, whichever comes first; a run that never reaches 84%
# reports null.
#
#   bench/links/time_to_acc.sh
#       [--links "none 1gbit 100mbit 10mbit mixed 1mbit"]
#       [--codecs "none/none q4/q4 topk:0.01+q8/topk:0.02+q8
#                  randk:0.02+q8/topk:0.02+q8 auto/auto"]
#       [--overlap "0 1"] [--per-step-links LINKS]
#       [--per-step-cap "1mbit=60"]
#       [--local-steps "0 8 32 128"] [--fragments "1 4"]
#       [--fragment-delay 1] [--ls-codecs "none/none q8/q8
#                  topk:0.05+q8/topk:0.05+q8"]
#       [--outer "nesterov:0.7:0.9"] [--ls-args "TRAINER FLAGS"]
#       [--ls-cells "LINK,H,F,PUSH/PULL,OUTER ..."]
#       [--epochs 3] [--cap-s 900] [--log-interval 50]
#       [--no-ddp] [--quick] [--smoke] [--build DIR] [--raw DIR]
#       [--results DIR]
#
# Per-step rows (local steps 0): every link of --per-step-links (default:
# all of --links) x --codecs x --overlap, when --local-steps holds 0; at
# a link named in --per-step-cap their time cap is that many seconds (a
# per-step run at 1 Mbit/s needs hours: it reports null). Local-steps
# rows: every link x H > 0 of --local-steps x F of --fragments (F > 1
# only where H % F == 0; those rows use --fragment-delay D when
# D < H/F, else 0) x --ls-codecs x --outer (OPT:LR[:MOMENTUM], the
# servers' outer optimizer; the trainer's --optimizer/--lr, default sgd
# 0.1, is the inner one: pass others with --ls-args). Local-steps rows
# have overlap 0 (the trainer refuses --overlap with --local-steps).
# --ls-cells lists the local-steps runs one by one instead (a reduced
# matrix: e.g. "10mbit,128,4,q8/q8,nesterov:0.7:0.9"; D as above); the
# per-step rows stay as --local-steps 0 and --per-step-links say.
#
# --smoke (ctest -L bench-smoke): one unshaped fp32 per-step run and one
# local-steps run (H = 4), 30 steps each, no DDP, nothing installed or
# built (FERRY_BUILD_DIR as it is), the results in the raw directory
# instead of bench/results.
#
# Links: none (unshaped namespaces), 1gbit, 100mbit, 10mbit, 1mbit (every
# link, both directions, tc tbf), mixed (trainer 0 at 1gbit, trainer 1 at
# 20mbit, the server at 1gbit). The 1mbit links get a 16 KiB tbf burst
# (0.13 s of line rate, about the 10mbit links' 128 KiB) so the idle
# time between outer rounds does not bank a second of free traffic.
# --quick: unshaped and 100mbit only, cap 180 s, local steps H = 32 with
# q8/q8 only. A codec the trainer
# refuses (e.g. `auto` in a build without it) gets a row of nulls and a
# note.
#
# Writes bench/results/time_to_acc.json ({"time_to_acc": [...], "summary":
# {...}, "notes": [...], "command": ...}), the accuracy-vs-wall-time
# curves bench/results/time_to_acc/<link>/*.csv (plus <link>.png and
# <link>-local.png when matplotlib is installed), and the `time_to_acc`
# list (and `time_to_acc_summary`) of bench/results/latest.json;
# bench/results/make_report.py renders them into docs/benchmarks.md (and
# this script replaces that section of docs/benchmarks.md itself).
# --results DIR writes the report files there instead and leaves
# bench/results and docs/benchmarks.md alone (trial runs).
# Needs root for network namespaces (exit 77 otherwise). Builds DIR
# (default build-bench/, or $FERRY_BUILD_DIR) with scripts/setup.sh when
# its binaries are missing.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
links="none 1gbit 100mbit 10mbit mixed 1mbit"
codecs="none/none q4/q4 topk:0.01+q8/topk:0.02+q8 randk:0.02+q8/topk:0.02+q8 auto/auto"
ls_codecs="none/none q8/q8 topk:0.05+q8/topk:0.05+q8"
overlaps="0 1" epochs=3 cap=900 logi=50 ddp=1 quick=0 smoke=0
hs="0 8 32 128" frags="1 4" fdelay=1 outers="nesterov:0.7:0.9" ls_args=""
ps_links="" ps_caps="1mbit=60" ls_cells=""
build=${FERRY_BUILD_DIR:-$ROOT/build-bench}
raw=${FERRY_BENCH_DIR:-}
results=""
cmdline="bench/links/time_to_acc.sh $*"
while (($#)); do
	case "$1" in
	--links) links=$2; shift 2 ;;
	--codecs) codecs=$2; shift 2 ;;
	--overlap) overlaps=$2; shift 2 ;;
	--per-step-links) ps_links=$2; shift 2 ;;
	--per-step-cap) ps_caps=$2; shift 2 ;;
	--local-steps) hs=$2; shift 2 ;;
	--fragments) frags=$2; shift 2 ;;
	--fragment-delay) fdelay=$2; shift 2 ;;
	--ls-codecs) ls_codecs=$2; shift 2 ;;
	--outer) outers=$2; shift 2 ;;
	--ls-args) ls_args=$2; shift 2 ;;
	--ls-cells) ls_cells=$2; shift 2 ;;
	--epochs) epochs=$2; shift 2 ;;
	--cap-s) cap=$2; shift 2 ;;
	--log-interval) logi=$2; shift 2 ;;
	--no-ddp) ddp=0; shift ;;
	--quick)
		quick=1 links="none 100mbit" cap=180 hs="0 32" frags=1
		ls_codecs=q8/q8
		shift ;;
	--smoke)
		smoke=1 links=none codecs=none/none overlaps=0 epochs=1 cap=60
		ddp=0 logi=10 hs="0 4" frags=1 ls_codecs=none/none
		outers="nesterov:0.7:0.9" ps_links=""
		build=${FERRY_BUILD_DIR:-$ROOT/build}
		export FERRY_MAX_STEPS=30 # every trainer's --max-steps (env)
		shift ;;
	--build) build=$2; shift 2 ;;
	--raw) raw=$2; shift 2 ;;
	--results) results=$2; shift 2 ;;
	-h | --help)
		sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
		exit 0 ;;
	*) echo "time_to_acc: unknown flag $1" >&2; exit 2 ;;
	esac
done
ps_links=${ps_links:-$links}
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
# link_burst LINK: the tbf burst of a link (bytes; empty: netsim's default).
link_burst() { case $1 in 1mbit) echo 16384 ;; *) echo "" ;; esac; }
# ps_cap LINK: the time cap of a per-step run at LINK.
ps_cap() {
	local kv
	for kv in $ps_caps; do
		[ "${kv%%=*}" = "$1" ] && { echo "${kv#*=}"; return; }
	done
	echo "$cap"
}

# ferry_run LINK PUSH PULL OVERLAP CAP [H F D OUTER]: one Ferry job into
# $raw/<run>/ (H 0 or absent: a per-step run).
ferry_run() {
	local link=$1 push=$2 pull=$3 ov=$4 rcap=$5 h=${6:-0} f=${7:-1}
	local fd=${8:-0} outer=${9:-} d trs extra=() o
	d="$raw/ferry-$link-${push//[:+]/_}-${pull//[:+]/_}-ov$ov"
	if ((h > 0)); then
		d+="-h$h-f$f-d$fd-${outer//:/_}"
		IFS=: read -r -a o <<<"$outer"
		extra=(--local-steps="$h" --fragments="$f"
			--fragment-delay="$fd" --outer-optimizer="${o[0]}"
			${o[1]:+--outer-lr="${o[1]}"}
			${o[2]:+--outer-momentum="${o[2]}"})
		# shellcheck disable=SC2206 # --ls-args: words on purpose
		extra+=($ls_args)
	fi
	rm -rf "$d" && mkdir -p "$d"
	printf '%s\n' "$link" ferry "$push/$pull" "$ov" "$h" "$f" "$fd" \
		"$outer" >"$d/run.txt"
	log "ferry $link $push/$pull overlap $ov H $h F $f D $fd" \
		"${outer:+outer $outer }(cap ${rcap}s)"
	IFS=, read -r -a trs <<<"$(trainer_rates "$link")"
	if ! NETSIM_BURST=$(link_burst "$link") FERRY_JOB_RUN_DIR="$d" \
		"$HERE/ferry_job.sh" \
		--rate "$(srv_rate "$link")" --rate-of "0=${trs[0]}" \
		--rate-of "1=${trs[1]}" --time-cap "$rcap" --curve "$d/curve-0.csv" \
		--build "$build" --name "tta$$" -- --data="$DATA" \
		--epochs="$epochs" --log-interval="$logi" --seed=1 \
		--codec-push="$push" --codec-pull="$pull" --overlap="$ov" \
		"${extra[@]}" >"$d/rank0.out" 2>"$d/job.err"; then
		log "  failed: $(grep -v '^ *$' "$d/job.err" | tail -n 1 | cut -c1-200)"
		((!smoke)) || exit 1
	fi
}

# ls_run LINK H F PUSH/PULL OUTER: one local-steps run (D: --fragment-delay
# where F > 1 and it is below H/F, else 0).
ls_run() {
	local fd=0
	(($3 > 1 && fdelay < $2 / $3)) && fd=$fdelay
	ferry_run "$1" "${4%/*}" "${4#*/}" 0 "$cap" "$2" "$3" "$fd" "$5"
}

# ddp_run LINK: PyTorch DDP, one rank per trainer namespace.
ddp_run() {
	local link=$1 d="$raw/torch-ddp-$link" name="ttd$$" ip0 r p=() trs
	local rcap
	rcap=$(ps_cap "$link")
	rm -rf "$d" && mkdir -p "$d"
	printf '%s\n' "$link" torch-ddp none/none 0 >"$d/run.txt"
	log "torch-ddp $link (cap ${rcap}s)"
	IFS=, read -r -a trs <<<"$(trainer_rates "$link")"
	NETSIM_BURST=$(link_burst "$link") \
		"$NETSIM" up "$name" "t0:${trs[0]}" "t1:${trs[1]}"
	ip0=$("$NETSIM" ip "$name" t0)
	for r in 0 1; do
		"$NETSIM" exec "$name" "t$r" env GLOO_SOCKET_IFNAME=eth0 \
			timeout "$rcap" "$PY" "$ROOT/bench/peers/torch_mlp.py" --mode ddp \
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
	for h in $hs; do
		if ((h == 0)); then
			[[ " $ps_links " == *" $link "* ]] || continue
			for codec in $codecs; do
				for ov in $overlaps; do
					ferry_run "$link" "${codec%/*}" "${codec#*/}" \
						"$ov" "$(ps_cap "$link")"
				done
			done
			continue
		fi
		[ -z "$ls_cells" ] || continue
		for f in $frags; do
			((f == 1 || h % f == 0)) || continue
			for codec in $ls_codecs; do
				for outer in $outers; do
					ls_run "$link" "$h" "$f" "$codec" "$outer"
				done
			done
		done
	done
	for cell in $ls_cells; do
		IFS=, read -r cl h f codec outer <<<"$cell"
		[ "$cl" = "$link" ] && ls_run "$link" "$h" "$f" "$codec" "$outer"
	done
	# DDP is a per-step system: it runs where the per-step rows do
	((ddp)) && [[ " $ps_links " == *" $link "* ]] && ddp_run "$link"
done
log "report"
if [ -n "$results" ]; then
	mkdir -p "$results"
	"$PY" "$HERE/time_to_acc.py" "$raw" "$results" "$cmdline"
elif ((smoke)); then
	mkdir -p "$raw/results"
	"$PY" "$HERE/time_to_acc.py" "$raw" "$raw/results" "$cmdline"
else
	"$PY" "$HERE/time_to_acc.py" "$raw" "$ROOT/bench/results" "$cmdline"
	"$PY" "$HERE/time_to_acc.py" --splice "$ROOT/bench/results" \
		"$ROOT/docs/benchmarks.md"
fi
log "done; raw runs in $raw"
