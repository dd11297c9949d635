# job.sh: sourced by the tests of tests/install. Starts a live Ferry job on
# loopback (a scheduler and one server of the given ps-server binary, on
# free ports) and stops every process it started when the script exits.
#   job_start PS_SERVER TRAINERS   sets $SCHED to the scheduler's URL
#   job_check NAME FILE PATTERN    fails the test unless FILE has PATTERN
# Logs go to $WORK (a temporary directory the caller made), and a failing
# test prints them.

job_pids=()
job_stop() {
	for p in "${job_pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${job_pids[@]}"; do wait "$p" 2>/dev/null || true; done
	job_pids=()
}
job_fail() {
	echo "FAIL: $*" >&2
	for f in "$WORK"/*.log; do
		[ -s "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }
	done
	exit 1
}
job_start() {
	local ps=$1 trainers=$2 n=$((${#job_pids[@]} + 1))
	rm -f "$WORK/sched$n.url"
	"$ps" --role=scheduler --trainers="$trainers" --servers=1 \
		--url-file="$WORK/sched$n.url" 2>"$WORK/scheduler$n.log" &
	job_pids+=($!)
	for _ in $(seq 200); do
		[ -s "$WORK/sched$n.url" ] && break
		kill -0 "${job_pids[-1]}" 2>/dev/null || break
		sleep 0.05
	done
	[ -s "$WORK/sched$n.url" ] || job_fail "the scheduler did not start"
	SCHED=$(cat "$WORK/sched$n.url")
	"$ps" --role=server --scheduler="$SCHED" 2>"$WORK/server$n.log" &
	job_pids+=($!)
}
job_check() {
	grep -q -- "$3" "$2" || job_fail "$1: no '$3' in its output: $(cat "$2")"
}
