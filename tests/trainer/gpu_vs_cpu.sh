#!/usr/bin/env bash
# gpu_vs_cpu.sh PS_SERVER TRAINER SOURCE_DIR DATA_DIR: the same 2-trainer
# sync job (Fashion-MNIST, 5 steps) on --device cpu and --device cuda must
# end with the same weights: bit for bit between the two ranks of each job,
# and within float rounding (max |dw| <= 1e-5) between the devices; with
# q8 both ways (the on-device codec path on cuda) within 1e-3, since a
# rounding difference may move a code by one step. Without a CUDA device
# (or the data set) it reports itself skipped (exit 77).
set -euo pipefail
PS=$1 TR=$2 SRC=$3 DATA=$4
[ -s "$DATA/train-images-idx3-ubyte.gz" ] || {
	echo "SKIP: no Fashion-MNIST in $DATA"
	exit 77
}
WORK=$(mktemp -d /tmp/ferry-gpucpu.XXXXXX)
# shellcheck source=tests/install/job.sh
. "$SRC/tests/install/job.sh"
trap 'job_stop; rm -rf "$WORK"' EXIT

# run NAME DEVICE [flags]: a 2-trainer job; weights in $WORK/NAME.r{0,1}
run() {
	local name=$1 dev=$2 rc=0 p1
	shift 2
	job_start "$PS" 2
	"$TR" --scheduler="$SCHED" --rank=1 --device="$dev" --data="$DATA" \
		--max-steps=5 --log-interval=0 --weights-out="$WORK/$name.r1" \
		"$@" >"$WORK/$name.r1.out" 2>"$WORK/$name.r1.log" & p1=$!
	"$TR" --scheduler="$SCHED" --rank=0 --device="$dev" --data="$DATA" \
		--max-steps=5 --log-interval=0 --weights-out="$WORK/$name.r0" \
		"$@" >"$WORK/$name.r0.out" 2>"$WORK/$name.r0.log" || rc=$?
	wait $p1 || rc=$?
	job_stop
	if [ $rc != 0 ] && grep -qE 'no usable CUDA GPU|built without the CUDA' \
		"$WORK/$name.r0.log"; then
		cat "$WORK/$name.r0.log"
		echo "SKIP: no CUDA device"
		exit 77
	fi
	[ $rc = 0 ] || job_fail "$name: a trainer exited $rc"
	cmp -s "$WORK/$name.r0" "$WORK/$name.r1" ||
		job_fail "$name: the two ranks' weights differ (sync mode)"
}
# maxdiff A B: the largest |a - b| over two raw float32 files
maxdiff() {
	paste <(od -An -v -w4 -t f4 "$1") <(od -An -v -w4 -t f4 "$2") |
		awk '$1 ~ /n/ || $2 ~ /n/ { print "nan"; bad = 1; exit }
		     { d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
		     END { if (!bad) printf "%.3g\n", m + 0 }'
}
run cuda cuda
run cpu cpu
d=$(maxdiff "$WORK/cpu.r0" "$WORK/cuda.r0")
echo "fp32: max |w_cpu - w_cuda| = $d"
awk -v d="$d" 'BEGIN { exit !(d <= 1e-5) }' ||
	job_fail "fp32: cpu and cuda weights differ by $d (> 1e-5)"
run cuda-q8 cuda --codec-push=q8 --codec-pull=q8
run cpu-q8 cpu --codec-push=q8 --codec-pull=q8
d=$(maxdiff "$WORK/cpu-q8.r0" "$WORK/cuda-q8.r0")
echo "q8: max |w_cpu - w_cuda| = $d"
awk -v d="$d" 'BEGIN { exit !(d <= 1e-3) }' ||
	job_fail "q8: cpu and cuda weights differ by $d (> 1e-3)"
echo "gpu_vs_cpu: ok"
