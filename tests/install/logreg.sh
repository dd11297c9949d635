#!/usr/bin/env bash
# logreg.sh PS_SERVER LOGREG SOURCE_DIR [DATA_DIR]: trains examples/logreg.c
# as 2 ranks of a live job and checks it against the same training done in
# one process (logreg --local 2): the test loss within 1e-4 and the test
# accuracy within 0.002 of the reference, and an accuracy of at least
# 0.93 (the reference reaches 0.95). Exits 77 (skipped) without the data.
set -euo pipefail
PS=$1 LOGREG=$2 SRC=$3 DATA=${4:-/usr/share/datasets/fashion-mnist}
[ -e "$DATA/train-images-idx3-ubyte.gz" ] ||
	[ -e "$DATA/train-images-idx3-ubyte" ] || {
	echo "SKIP: no Fashion-MNIST in $DATA"; exit 77
}
WORK=$(mktemp -d /tmp/ferry-logreg.XXXXXX)
# shellcheck source=tests/install/job.sh
. "$SRC/tests/install/job.sh"
trap 'job_stop; rm -rf "$WORK"' EXIT

"$LOGREG" --local 2 "$DATA" >"$WORK/local.out" 2>"$WORK/local.log" ||
	job_fail "logreg --local exited $?"
job_start "$PS" 2
"$LOGREG" "$SCHED" 1 "$DATA" >"$WORK/r1.out" 2>"$WORK/r1.log" & r1=$!
"$LOGREG" "$SCHED" 0 "$DATA" >"$WORK/r0.out" 2>"$WORK/r0.log" ||
	job_fail "rank 0 exited $?"
wait $r1 || job_fail "rank 1 exited $?"
cat "$WORK/local.out" "$WORK/r0.out" "$WORK/r1.out"

# field FILE NAME: the value after the word NAME in FILE.
field() { awk -v n="$2" '{ for (i = 1; i < NF; i++) if ($i == n) print $(i + 1) }' "$1"; }
ref_loss=$(field "$WORK/local.out" test_loss)
ref_acc=$(field "$WORK/local.out" test_acc)
[ -n "$ref_loss" ] && [ -n "$ref_acc" ] || job_fail "no reference result"
for r in 0 1; do
	loss=$(field "$WORK/r$r.out" test_loss)
	acc=$(field "$WORK/r$r.out" test_acc)
	[ -n "$loss" ] && [ -n "$acc" ] || job_fail "rank $r printed no result"
	awk -v l="$loss" -v a="$acc" -v rl="$ref_loss" -v ra="$ref_acc" 'BEGIN {
		d = l - rl; if (d < 0) d = -d; e = a - ra; if (e < 0) e = -e
		exit !(d <= 1e-4 && e <= 0.002 && a >= 0.93) }' ||
		job_fail "rank $r: test_loss $loss test_acc $acc; reference" \
			"$ref_loss $ref_acc (|loss diff| <= 1e-4, |acc diff| <= 0.002," \
			"acc >= 0.93)"
done
echo "logreg: ok"
