#!/usr/bin/env bash
# run_launch.sh PS_SERVER LIBFERRY SOURCE_DIR PYTHON: python3 -m ferry.run
# (python/ferry/run.py) against this build, from the checkout's package:
#  1. 2 trainers, 2 servers: exit 0, the last stdout line is rank 0's
#     JSON summary, every log is in --log-dir;
#  2. rank 1 of 3 fails before joining: the launcher stops the other two
#     (waiting for it) and exits with rank 1's code, 7; the servers and the
#     scheduler log their shutdown;
#  3. SIGTERM to the launcher: passed on to the trainers, exit 143;
#  4. --scheduler URL: two launchers (--rank-base, --world) share the
#     ranks of a job started by hand, and start no scheduler or server;
#  5. ferry.run.env() outside a launcher and a missing ps-server are clear
#     errors.
# Exits 77 (skipped) when PYTHON has no NumPy (the trainer uses it).
set -euo pipefail
PS=$1 LIB=$2 SRC=$3 PY=$4
"$PY" -c "import numpy" 2>/dev/null || { echo "SKIP: $PY has no numpy"; exit 77; }
WORK=$(mktemp -d /tmp/ferry-launch.XXXXXX)
bg="" jobs_pids=()
cleanup() {
	for p in $bg "${jobs_pids[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*" >&2
	for f in "$WORK"/*.out "$WORK"/*.err "$WORK"/*/*.log; do
		[ -s "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }
	done
	exit 1
}
export PYTHONPATH=$SRC/python FERRY_LIB=$LIB FERRY_PS_SERVER=$PS
unset FERRY_SCHEDULER FERRY_RANK FERRY_TRAINERS FERRY_LOG_DIR FERRY_MODE
T=$SRC/tests/install/run_trainer.py
run() { (cd "$WORK" && "$PY" -m ferry.run "$@"); }

# 1. A job that succeeds.
rc=0
run --trainers 2 --servers 2 --log-dir "$WORK/ok" "$T" --steps 5 \
	>"$WORK/ok.out" 2>"$WORK/ok.err" || rc=$?
[ "$rc" = 0 ] || fail "job 1 exited $rc"
tail -n 1 "$WORK/ok.out" | "$PY" -c '
import json, sys
s = json.loads(sys.stdin.read())["summary"]
sys.exit(0 if s["trainers"] == 2 and s["steps"] == 5 else "bad summary %r" % s)' ||
	fail "job 1: the last stdout line is no summary"
for f in scheduler server-0 server-1 trainer-0 trainer-1; do
	[ -e "$WORK/ok/$f.log" ] || fail "job 1: no $f.log"
done
grep -q "joined a job of 2" "$WORK/ok/trainer-1.log" || fail "job 1: rank 1 log"
grep -q "logs in $WORK/ok" "$WORK/ok.err" || fail "job 1: log folder not named"

# 2. Rank 1 fails: the others wait for it in their first pull until the
# launcher stops them; its exit code is the launcher's.
rc=0
run --trainers 3 --log-dir "$WORK/bad" "$T" --fail-rank 1 --fail-code 7 \
	>"$WORK/bad.out" 2>"$WORK/bad.err" || rc=$?
[ "$rc" = 7 ] || fail "job 2 exited $rc, not rank 1's 7"
grep -q "failing on purpose" "$WORK/bad/trainer-1.log" || fail "job 2: rank 1 log"
grep -q "trainer 1 exited with exit code 7" "$WORK/bad.err" ||
	fail "job 2: the failure is not reported"
! grep -q summary "$WORK/bad.out" || fail "job 2: rank 0 finished"
for f in scheduler server-0; do
	grep -q "shutting down" "$WORK/bad/$f.log" || fail "job 2: $f not stopped"
done

# 3. SIGTERM reaches the trainers (blocked until then), exit 128 + 15.
cat >"$WORK/wait.py" <<'PY'
import signal, sys, ferry.run
job = ferry.run.env()
signal.signal(signal.SIGTERM, lambda *_: sys.exit(f"rank {job.rank}: got SIGTERM"))
print(f"rank {job.rank} ready", flush=True)
signal.pause()
PY
(cd "$WORK" && exec "$PY" -m ferry.run --trainers 2 --log-dir "$WORK/term" \
	"$WORK/wait.py" >"$WORK/term.out" 2>"$WORK/term.err") &
bg=$!
for r in 0 1; do
	until grep -q "ready" "$WORK/term/trainer-$r.log" 2>/dev/null; do
		kill -0 "$bg" 2>/dev/null || fail "job 3 ended early"
		sleep 0.05
	done
done
kill -TERM "$bg"
rc=0
wait "$bg" || rc=$?
bg=""
[ "$rc" = 143 ] || fail "job 3 exited $rc after SIGTERM, not 143"
for r in 0 1; do
	grep -q "got SIGTERM" "$WORK/term/trainer-$r.log" ||
		fail "job 3: rank $r did not get SIGTERM"
done
grep -q "shutting down" "$WORK/term/scheduler.log" || fail "job 3: scheduler"

# 4. --scheduler: a job started by hand, its two ranks split between two
# launchers as two machines would.
"$PS" --role=scheduler --trainers=2 --servers=1 --url-file="$WORK/sched.url" \
	2>"$WORK/sched.err" &
jobs_pids=($!)
until [ -s "$WORK/sched.url" ]; do
	kill -0 "${jobs_pids[0]}" 2>/dev/null || fail "job 4: no scheduler"
	sleep 0.05
done
url=$(cat "$WORK/sched.url")
"$PS" --role=server --scheduler="$url" 2>"$WORK/server.err" &
jobs_pids+=($!)
run --scheduler "$url" --trainers 1 --rank-base 1 --world 2 \
	--log-dir "$WORK/b" "$T" >"$WORK/b.out" 2>"$WORK/b.err" &
b=$!
rc=0
run --scheduler "$url" --trainers 1 --world 2 --log-dir "$WORK/a" "$T" \
	>"$WORK/a.out" 2>"$WORK/a.err" || rc=$?
rcb=0
wait "$b" || rcb=$?
kill "${jobs_pids[@]}" 2>/dev/null || true
jobs_pids=()
if [ "$rc" != 0 ] || [ "$rcb" != 0 ]; then
	fail "job 4: launchers exited $rc, $rcb"
fi
grep -q summary "$WORK/a.out" || fail "job 4: no summary from rank 0"
grep -q "rank 1: joined a job of 2" "$WORK/b.out" || fail "job 4: rank 1"
[ ! -e "$WORK/a/scheduler.log" ] || fail "job 4: started a scheduler"

# 5. Clear errors.
rc=0
(cd "$WORK" && "$PY" -c "import ferry.run; ferry.run.env()") \
	>"$WORK/env.out" 2>&1 || rc=$?
if [ "$rc" = 0 ] || ! grep -q 'FERRY_SCHEDULER is not set' "$WORK/env.out"; then
	fail "env() outside ferry.run: $(cat "$WORK/env.out")"
fi
rc=0
run --trainers 1 --ps-server "$WORK/none" "$T" >"$WORK/nops.out" 2>&1 || rc=$?
if [ "$rc" != 1 ] ||
	! grep -q "ps-server $WORK/none is not an executable" "$WORK/nops.out"; then
	fail "missing ps-server: rc $rc, $(cat "$WORK/nops.out")"
fi
echo "ferry.run: success, failure, SIGTERM, --scheduler and errors ok"
