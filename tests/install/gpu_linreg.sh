#!/usr/bin/env bash
# gpu_linreg.sh PS_SERVER GPU_LINREG SOURCE_DIR: runs examples/gpu_linreg.cu
# as 2 ranks of a live job and checks that both end within 0.01 of the true
# weights. Without a CUDA device the example refuses (exit 77, before it
# connects), which this test passes on as "skipped".
set -euo pipefail
PS=$1 EXE=$2 SRC=$3
WORK=$(mktemp -d /tmp/ferry-gpu.XXXXXX)
# shellcheck source=tests/install/job.sh
. "$SRC/tests/install/job.sh"
trap 'job_stop; rm -rf "$WORK"' EXIT

job_start "$PS" 2
"$EXE" "$SCHED" 1 >"$WORK/r1.out" 2>"$WORK/r1.log" & r1=$!
rc=0
"$EXE" "$SCHED" 0 >"$WORK/r0.out" 2>"$WORK/r0.log" || rc=$?
if [ $rc = 77 ]; then
	wait $r1 || true
	cat "$WORK/r0.log"
	exit 77
fi
[ $rc = 0 ] || job_fail "rank 0 exited $rc"
wait $r1 || job_fail "rank 1 exited $?"
cat "$WORK/r0.out" "$WORK/r1.out"
for r in 0 1; do
	e=$(sed -n 's/.*max |w - w_true| = \([0-9.]*\)$/\1/p' "$WORK/r$r.out")
	[ -n "$e" ] || job_fail "rank $r printed no result"
	awk -v e="$e" 'BEGIN { exit !(e < 0.01) }' ||
		job_fail "rank $r: max |w - w_true| = $e, not below 0.01"
done
echo "gpu_linreg: ok"
