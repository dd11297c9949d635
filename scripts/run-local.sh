#!/usr/bin/env bash
# run-local.sh — train Fashion-MNIST on a local Ferry cluster: one
# scheduler, M servers and T trainers on loopback, free ports chosen at run
# time. Prints rank 0's progress and every trainer's summary, and stops
# every process it started, also on Ctrl-C or failure.
#
#   scripts/run-local.sh [--servers M] [--trainers T|MIN:MAX] [--epochs E] [--http]
#                        [--slow-rank R] [--secret] [--tls] [flags]
#   scripts/run-local.sh --model dlrm [--ctr-rows N] [...] [flags]
#
# --model dlrm trains the DLRM-style CTR model instead (docs/operations.md,
# "CTR jobs"), one epoch unless --epochs says otherwise: without --data it
# first makes a small synthetic set with ferry-ctrgen (--ctr-rows N rows,
# default 200000, vocabularies at 1% of full size) in the run dir's ctr/,
# kept for the next run with the same FERRY_RUN_DIR, and trains on it with
# row-wise Adagrad tables; the last line names the AUC and the data's
# ceiling (the generator's own model's AUC).
#
# --trainers MIN:MAX makes the job elastic: the scheduler takes up to MAX
# trainers, MIN are started here (their batches come from the scheduler's
# data leases), and the script prints the command that adds one more
# (a trainer without --rank: it is given the lowest free one) while the
# job runs; Ctrl-C on such a trainer, or SIGTERM, is a graceful leave.
#
# --slow-rank R gives the trainers' --slow-ms to rank R only (one
# straggler, for benchmarks); without it every trainer gets it.
#
# --secret signs every request and reply with a throw-away per-job key
# (written to the run dir, passed to every process as --secret-file;
# docs/security.md). --secret-file FILE uses FILE instead.
#
# --tls runs the job over mutual TLS: a throw-away CA and one certificate
# per member (CN=ferry-scheduler, ferry-server, ferry-trainer-R) are
# made with openssl (scripts/tls-certs.sh) in the run dir's tls/, and
# every process gets --tls-cert, --tls-key and --tls-ca (docs/security.md).
#
# --http gives every process its HTTP endpoints on a free loopback port
# (--http-listen=127.0.0.1:0) and prints each one's URLs (/metrics,
# /healthz, /readyz, /debug/state) once it serves; curl them during the
# run (docs/operations.md, "Metrics and health").
#
# Further flags go to whichever program knows them: ps-server's options
# (see `build/ps/ps-server --help`) to the scheduler and servers, all
# others to the trainers (see `build/trainer/trainer --help`).
# Logs of every process are kept in $FERRY_RUN_DIR (default: a temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."

servers=2 trainers=2 epochs= http=0 slow_rank= secret=0 tls=0
model=mlp ctr_rows=200000 have_data=0
server_flags=() trainer_flags=()
# FERRY_SKIP_SETUP=1 runs what is built (benchmarks that call this often).
[ "${FERRY_SKIP_SETUP:-0}" = 1 ] || scripts/setup.sh
BUILD=${FERRY_BUILD_DIR:-build}
PS="$BUILD/ps/ps-server" TR="$BUILD/trainer/trainer"
CTRGEN="$BUILD/trainer/ferry-ctrgen"
ps_opts=$("$PS" --help | sed -n 's/^  --\([a-z-]*\).*/\1/p')

while (($#)); do
	case "$1" in
	--servers) servers=$2; shift 2 ;;
	--servers=*) servers=${1#*=}; shift ;;
	--trainers) trainers=$2; shift 2 ;;
	--trainers=*) trainers=${1#*=}; shift ;;
	--epochs) epochs=$2; shift 2 ;;
	--epochs=*) epochs=${1#*=}; shift ;;
	--http) http=1; shift ;;
	--slow-rank) slow_rank=$2; shift 2 ;;
	--slow-rank=*) slow_rank=${1#*=}; shift ;;
	--secret) secret=1; shift ;;
	--tls) tls=1; shift ;;
	--secret-file) secret_file=$2; shift 2 ;;
	--secret-file=*) secret_file=${1#*=}; shift ;;
	--ctr-rows) ctr_rows=$2; shift 2 ;;
	--ctr-rows=*) ctr_rows=${1#*=}; shift ;;
	--*)
		name=${1#--}; name=${name%%=*}
		# Normalise to --name=value so values can be rewritten per rank.
		if [[ "$1" == *=* ]]; then arg=("$1"); shift
		elif (($# > 1)) && [[ "$2" != --* ]]; then arg=("$1=$2"); shift 2
		else arg=("$1"); shift; fi
		if grep -qx -- "$name" <<<"$ps_opts"; then
			server_flags+=("${arg[@]}")
		else
			trainer_flags+=("${arg[@]}")
		fi
		case "${arg[0]}" in
		--model=*) model=${arg[0]#*=} ;;
		--data=*) have_data=1 ;;
		esac ;;
	*) echo "run-local: unexpected argument '$1'" >&2; exit 2 ;;
	esac
done
# The MLP trains 3 epochs by default, a CTR job reads its data once.
[ -n "$epochs" ] || { [ "$model" = dlrm ] && epochs=1 || epochs=3; }
for v in servers trainers epochs ctr_rows; do
	[[ "${!v}" =~ ^[1-9][0-9]*$ ]] ||
		[[ $v == trainers && "${!v}" =~ ^[1-9][0-9]*:[1-9][0-9]*$ ]] || {
		or=""
		[[ $v != trainers ]] || or=" or MIN:MAX"
		echo "run-local: --$v must be a positive integer$or, got '${!v}'" >&2
		exit 2
	}
done

RUN=${FERRY_RUN_DIR:-$(mktemp -d /tmp/ferry-run.XXXXXX)}
mkdir -p "$RUN"
# A reused run dir must not hand out an old URL.
rm -f "$RUN/scheduler.url" "$RUN"/*.http
if [ "$model" = dlrm ] && ((!have_data)); then
	# A small synthetic CTR set, made once per run dir (and size).
	CTR=$RUN/ctr
	if ! grep -qs "\"rows\":$ctr_rows," "$CTR/meta.json"; then
		echo "ferry: making $ctr_rows CTR samples in $CTR"
		"$CTRGEN" --out "$CTR" --rows "$ctr_rows" --vocab-scale 0.01 \
			--format bin
	fi
	# Defaults first: the command line's flags come after and win.
	trainer_flags=("--data=$CTR/train.bin" "--test-data=$CTR/test.bin"
		--batch=256 --optimizer=adagrad --lr=0.02 --table-lr=0.05
		--log-interval=50 --eval-rows=5000 "${trainer_flags[@]}")
fi
if ((secret)) && [ -z "${secret_file:-}" ]; then
	secret_file=$RUN/job.key
	(umask 077 && head -c 32 /dev/urandom | base64 >"$secret_file")
fi
if [ -n "${secret_file:-}" ]; then
	server_flags+=("--secret-file=$secret_file")
	trainer_flags+=("--secret-file=$secret_file")
fi
# --trainers MIN:MAX: the scheduler gets both, MIN trainers start here.
tspec=$trainers tmax=$trainers
if [[ $trainers == *:* ]]; then
	trainers=${tspec%%:*} tmax=${tspec##*:}
fi
if ((tls)); then
	# The servers share one certificate (CN=ferry-server): the
	# scheduler assigns their indices in the order they register.
	names=(scheduler server)
	for ((r = 0; r < tmax; r++)); do names+=("trainer-$r"); done
	scripts/tls-certs.sh "$RUN/tls" "${names[@]}"
fi
# tls_flags NAME: the certificate flags of process NAME under --tls.
tls_flags() {
	((tls)) && echo "--tls-cert=$RUN/tls/$1.pem" \
		"--tls-key=$RUN/tls/$1.key" "--tls-ca=$RUN/tls/ca.pem"
	return 0
}
# http_flags NAME: the endpoint flags of process NAME under --http.
http_flags() {
	((http)) && echo "--http-listen=127.0.0.1:0" \
		"--http-url-file=$RUN/$1.http"
	return 0
}
pids=()
cleanup() {
	trap - EXIT INT TERM
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'echo "run-local: interrupted" >&2; exit 130' INT TERM

wait_file() { # wait_file PATH PID: until PATH exists or PID died
	for _ in $(seq 200); do
		[ -s "$1" ] && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}

"$PS" --role=scheduler --trainers="$tspec" --servers="$servers" \
	--url-file="$RUN/scheduler.url" $(http_flags scheduler) \
	$(tls_flags scheduler) \
	"${server_flags[@]}" 2>"$RUN/scheduler.log" &
pids+=($!)
wait_file "$RUN/scheduler.url" $! || {
	echo "run-local: scheduler failed to start:" >&2
	cat "$RUN/scheduler.log" >&2; exit 1
}
SCHED=$(cat "$RUN/scheduler.url")
echo "ferry: scheduler at $SCHED; $servers servers, $tspec trainers," \
	"$epochs epochs; logs in $RUN"
if [ "$tspec" != "$trainers" ]; then
	echo "ferry: elastic job: add a trainer with" \
		"$TR --scheduler=$SCHED --epochs=$epochs [the same flags]"
fi
for ((m = 0; m < servers; m++)); do
	"$PS" --role=server --scheduler="$SCHED" $(http_flags "server-$m") \
		$(tls_flags server) \
		"${server_flags[@]}" 2>"$RUN/server-$m.log" &
	pids+=($!)
done
tpids=()
# rank_flags R: the trainer flags without --slow-ms unless R is the
# --slow-rank (or none was named).
rank_flags() {
	for f in "${trainer_flags[@]}"; do
		case "$f" in
		--slow-ms=*) [ -z "$slow_rank" ] || [ "$slow_rank" = "$1" ] &&
			echo "$f" ;;
		*) echo "$f" ;;
		esac
	done
	return 0
}
for ((r = 0; r < trainers; r++)); do
	mapfile -t my_flags < <(rank_flags "$r")
	if ((r == 0)); then
		"$TR" --scheduler="$SCHED" --rank=0 --epochs="$epochs" \
			$(http_flags trainer-0) $(tls_flags trainer-0) \
			"${my_flags[@]}" \
			2>"$RUN/trainer-0.log" |
			tee "$RUN/trainer-0.out" &
	else
		# Ranks > 0 write their own curve and step-times files,
		# never rank 0's.
		rflags=()
		for f in "${my_flags[@]}"; do
			case "$f" in
			--curve=*) rflags+=("--curve=$RUN/curve-$r.csv") ;;
			--step-times=*) rflags+=("--step-times=$RUN/step-times-$r.csv") ;;
			*) rflags+=("$f") ;;
			esac
		done
		"$TR" --scheduler="$SCHED" --rank="$r" --epochs="$epochs" \
			$(http_flags "trainer-$r") $(tls_flags "trainer-$r") \
			"${rflags[@]}" \
			>"$RUN/trainer-$r.out" \
			2>"$RUN/trainer-$r.log" &
	fi
	tpids+=($!)
	pids+=($!)
done
if ((http)); then
	# Each process writes its URL once serving (trainers after loading
	# the data): wait a little for each, in start order.
	names=(scheduler)
	for ((m = 0; m < servers; m++)); do names+=("server-$m"); done
	for ((r = 0; r < trainers; r++)); do names+=("trainer-$r"); done
	echo "ferry: endpoints (/metrics /healthz /readyz /debug/state):"
	for n in "${names[@]}"; do
		for _ in $(seq 200); do
			[ -s "$RUN/$n.http" ] && break
			sleep 0.05
		done
		if [ -s "$RUN/$n.http" ]; then
			u=$(cat "$RUN/$n.http")
			printf '  %-10s %s/metrics %s/healthz %s/readyz %s/debug/state\n' \
				"$n" "$u" "$u" "$u" "$u"
		else
			printf '  %-10s (no endpoint yet; see %s)\n' "$n" \
				"$RUN/$n.log"
		fi
	done
fi
status=0
for ((r = 0; r < trainers; r++)); do
	wait "${tpids[$r]}" || status=$?
done
if ((status != 0)); then
	echo "run-local: a trainer failed (exit $status); its log:" >&2
	for ((r = 0; r < trainers; r++)); do
		tail -5 "$RUN/trainer-$r.log" >&2 || true
	done
	exit "$status"
fi
echo "ferry: summaries"
for ((r = 1; r < trainers; r++)); do
	grep '"summary"' "$RUN/trainer-$r.out" || true
done
if [ "$model" = dlrm ]; then
	auc=$(grep -o '"auc": [0-9.]*' "$RUN/trainer-0.out" | tail -1)
	ceiling=
	if [ -n "${CTR:-}" ]; then
		ceiling=$(grep -o '"auc_ceiling":[0-9.]*' "$CTR/meta.json")
		ceiling=" (data ceiling ${ceiling#*:})"
	fi
	echo "ferry: dlrm auc ${auc#*: }$ceiling"
fi
