# lib.sh — shared by bench/placement.sh and tests/integration/placement_netns.sh
# (source it). One Ferry job over netsim.sh namespaces: hosts sch (the
# scheduler), s0 s1 (one ps-server each), t0 t1 (one trainer each).
#
# Needs: PS (ps-server), TR (trainer), NETSIM (bench/links/netsim.sh),
#        NET (netsim network name, ≤ 8 chars is safest).
# pl_up RATE_S0 RATE_S1 RATE_T     create the network (rates as netsim: 100mbit, none)
# pl_rtt D00 D01 D10 D11            per-trainer added one-way delay (ms) to each
#                                   server: trainer t dials "srvM" which its own
#                                   /etc/netns/<ns>/hosts maps to 127.0.0.1, where
#                                   a delay relay in t's namespace forwards to
#                                   server M. Call after pl_up, before pl_job.
# pl_job PLACEMENT STEPS DIR [SCHED_FLAGS...]
#                                   run one job; logs in DIR (sch.log, s*.log,
#                                   t*.out, t*.err). Returns non-zero on failure.
# pl_down                           stop everything, remove the network
# pl_step_ms DIR                    steady step ms: max over ranks of the median
#                                   step (compute + push-pull, --step-times) after
#                                   the first PL_SKIP (10) steps, during which the
#                                   start-up probes' traffic still drains from tbf's
#                                   queues and buckets; without the CSVs, (wall_s -
#                                   eval_s)/steps
# pl_slow_index DIR IP              the scheduler's index of the server registered at IP
# pl_load DIR M                     bytes the scheduler placed on server M
PL_PORT=${PL_PORT:-7100}
PL_PIDS=()
PL_NAMED=0

pl_up() {
	"$NETSIM" up "$NET" sch "s0:$1" "s1:$2" "t0:$3" "t1:$3"
	PL_SCH=$("$NETSIM" ip "$NET" sch)
	PL_S0=$("$NETSIM" ip "$NET" s0)
	PL_S1=$("$NETSIM" ip "$NET" s1)
	PL_NAMED=0
}

pl_hosts() { # pl_hosts NS SRV0_IP SRV1_IP
	mkdir -p "/etc/netns/$NET-$1"
	printf '127.0.0.1 localhost\n%s srv0\n%s srv1\n' "$2" "$3" \
		>"/etc/netns/$NET-$1/hosts"
}

pl_rtt() {
	PL_NAMED=1
	PL_DELAY=("$1" "$2" "$3" "$4")
	pl_hosts sch "$PL_S0" "$PL_S1"
	pl_hosts s0 "$PL_S0" "$PL_S1"
	pl_hosts s1 "$PL_S0" "$PL_S1"
	pl_hosts t0 127.0.0.1 127.0.0.1
	pl_hosts t1 127.0.0.1 127.0.0.1
}

pl_kill() {
	local p
	for p in "${PL_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PL_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	PL_PIDS=()
}

pl_down() {
	pl_kill
	"$NETSIM" down "$NET" >/dev/null 2>&1 || true
	rm -rf /etc/netns/"$NET"-* 2>/dev/null || true
}

pl_job() {
	local placement=$1 steps=$2 dir=$3; shift 3
	local p0 p1 ps a0 a1 rc=0 t
	mkdir -p "$dir"
	PL_PORT=$((PL_PORT + 3))
	ps=$PL_PORT p0=$((PL_PORT + 1)) p1=$((PL_PORT + 2))
	"$NETSIM" exec "$NET" sch "$PS" --role=scheduler --trainers=2 --servers=2 \
		--placement="$placement" --shard-bytes=65536 \
		--listen="tcp://$PL_SCH:$ps" "$@" 2>"$dir/sch.log" &
	PL_PIDS+=($!)
	if ((PL_NAMED)); then
		a0="tcp://srv0:$p0" a1="tcp://srv1:$p1"
		for t in 0 1; do
			PL_PIDS+=($("$NETSIM" relay "$NET" "t$t" "$p0" "$PL_S0:$p0" "${PL_DELAY[$((2 * t))]}"))
			PL_PIDS+=($("$NETSIM" relay "$NET" "t$t" "$p1" "$PL_S1:$p1" "${PL_DELAY[$((2 * t + 1))]}"))
		done
	else
		a0="tcp://$PL_S0:$p0" a1="tcp://$PL_S1:$p1"
	fi
	sleep 0.3
	# s0 first, then s1, so registration order (= server index) is usually
	# s0, s1; callers still map indices by the logged URL.
	"$NETSIM" exec "$NET" s0 "$PS" --role=server --scheduler="tcp://$PL_SCH:$ps" \
		--listen="tcp://$PL_S0:$p0" --advertise="$a0" 2>"$dir/s0.log" &
	PL_PIDS+=($!)
	sleep 0.2
	"$NETSIM" exec "$NET" s1 "$PS" --role=server --scheduler="tcp://$PL_SCH:$ps" \
		--listen="tcp://$PL_S1:$p1" --advertise="$a1" 2>"$dir/s1.log" &
	PL_PIDS+=($!)
	sleep 0.2
	local tp=()
	for t in 0 1; do
		timeout 300 "$NETSIM" exec "$NET" "t$t" "$TR" \
			--scheduler="tcp://$PL_SCH:$ps" --rank=$t --max-steps="$steps" \
			--log-interval=0 --step-times="$dir/t$t.steps.csv" \
			>"$dir/t$t.out" 2>"$dir/t$t.err" &
		tp+=($!)
	done
	for t in "${tp[@]}"; do wait "$t" || rc=1; done
	pl_kill
	grep -q '"summary"' "$dir/t0.out" && grep -q '"summary"' "$dir/t1.out" || rc=1
	return $rc
}

pl_step_ms() {
	PL_SKIP=${PL_SKIP:-10} python3 "$(dirname "${BASH_SOURCE[0]}")/steady.py" "$1"
}

pl_slow_index() { # index of the server registered at IP (any port)
	sed -n "s#.*members: server \([0-9]*\) registered at tcp://$2:.*#\1#p" "$1/sch.log" | head -1
}

pl_load() {
	sed -n "s#.*placement:   m$2 .* shards, \([0-9]*\) bytes.*#\1#p" "$1/sch.log" | tail -1
}
