#!/usr/bin/env bash
# config_file.sh PS_SERVER TRAINER — both binaries read a real --config
# file: --print-config shows each value with its source (file:line, env,
# flag, default) in the documented precedence; a scheduler started from a
# file only listens where the file says; a bad line stops each binary with
# exit code 2 and FILE:LINE; FERRY_CONFIG names the file too.
set -u
PS=$1
TR=$2
dir=$(mktemp -d /tmp/ferry-config-test.XXXXXX)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
# expect_line FILE LINE: FILE holds exactly LINE as one of its lines.
expect_line() {
	grep -qxF -- "$2" "$1" || {
		cat "$1" >&2
		fail "no line '$2' in $1"
	}
}
unset FERRY_CONFIG FERRY_TRAINERS FERRY_SERVERS FERRY_LOG_LEVEL \
	FERRY_BATCH FERRY_LR FERRY_EPOCHS FERRY_DATA FERRY_URL_FILE \
	FERRY_ROLE FERRY_LISTEN FERRY_STALL_WARN_MS

# ---- ps-server: precedence, with all four sources ------------------------
cat >"$dir/ps.conf" <<CONF
# scheduler of the test job
role = scheduler
listen = tcp://127.0.0.1:0

trainers = 3
servers = 2
url-file = $dir/sched.url
stall-warn-ms = 2500
CONF
FERRY_SERVERS=4 "$PS" --config "$dir/ps.conf" --trainers 5 --print-config \
	>"$dir/ps.out" 2>"$dir/ps.err" || fail "ps-server --print-config: $?"
expect_line "$dir/ps.out" "role = scheduler  # file $dir/ps.conf:2"
expect_line "$dir/ps.out" "trainers = 5  # flag"
expect_line "$dir/ps.out" "servers = 4  # env FERRY_SERVERS"
expect_line "$dir/ps.out" "stall-warn-ms = 2500  # file $dir/ps.conf:8"
expect_line "$dir/ps.out" "contexts = 256  # default"
expect_line "$dir/ps.out" "config = $dir/ps.conf  # flag"
[ "$(grep -c ' = .*  # ' "$dir/ps.out")" = "$(wc -l <"$dir/ps.out")" ] ||
	fail "ps-server --print-config: a line without its source"

# ---- ps-server: the file is what it runs with ----------------------------
"$PS" --config "$dir/ps.conf" 2>"$dir/sched.log" &
pid=$!
for _ in $(seq 100); do
	[ -s "$dir/sched.url" ] && break
	sleep 0.1
done
grep -q '^tcp://127\.0\.0\.1:[1-9]' "$dir/sched.url" ||
	fail "the scheduler did not write the url-file named in its config"
kill "$pid"
wait "$pid"
pid=

# ---- ps-server: a bad line, and FERRY_CONFIG --------------------------------
printf 'role = scheduler\ntrainers = 0\n' >"$dir/bad.conf"
FERRY_CONFIG="$dir/bad.conf" "$PS" 2>"$dir/bad.err"
rc=$?
[ "$rc" = 2 ] || fail "ps-server with a bad file: exit $rc, wanted 2"
expect_line "$dir/bad.err" \
	"ps-server: $dir/bad.conf:2: trainers = 0: out of range (allowed 1..4096)"
"$PS" --config "$dir/missing.conf" 2>"$dir/miss.err"
[ $? = 2 ] || fail "ps-server with a missing file: wanted exit 2"
grep -qF "$dir/missing.conf: cannot open the config file" "$dir/miss.err" ||
	fail "the missing file is not named: $(cat "$dir/miss.err")"

# ---- trainer: precedence, and a value it runs with ---------------------
cat >"$dir/tr.conf" <<CONF
scheduler = tcp://127.0.0.1:9
batch = 32
lr = 0.05
data = $dir/no-data-here
CONF
FERRY_LR=0.2 "$TR" --config "$dir/tr.conf" --print-config --epochs 2 \
	>"$dir/tr.out" || fail "trainer --print-config: $?"
expect_line "$dir/tr.out" "batch = 32  # file $dir/tr.conf:2"
expect_line "$dir/tr.out" "lr = 0.2  # env FERRY_LR"
expect_line "$dir/tr.out" "epochs = 2  # flag"
expect_line "$dir/tr.out" "mode = sync  # default"
# It trains from the file's --data: the missing directory is named.
"$TR" --config "$dir/tr.conf" >/dev/null 2>"$dir/tr.err"
[ $? = 1 ] || fail "trainer without data: wanted exit 1"
grep -qF "$dir/no-data-here" "$dir/tr.err" ||
	fail "the trainer did not use the file's --data: $(cat "$dir/tr.err")"
# A bad line, checked by the trainer itself (--layers) or the table.
printf 'scheduler = tcp://127.0.0.1:9\n\nlayers = 10\n' >"$dir/trbad.conf"
"$TR" --config "$dir/trbad.conf" 2>"$dir/trbad.err"
[ $? = 2 ] || fail "trainer with a bad file: wanted exit 2"
grep -qF "trainer: $dir/trbad.conf:3: --layers" "$dir/trbad.err" ||
	fail "no FILE:LINE: $(cat "$dir/trbad.err")"
printf 'batch = 64\nlisten = tcp://127.0.0.1:1\n' >"$dir/trps.conf"
"$TR" --config "$dir/trps.conf" 2>"$dir/trps.err"
[ $? = 2 ] || fail "trainer with a ps-server option: wanted exit 2"
expect_line "$dir/trps.err" "trainer: $dir/trps.conf:2: 'listen' is an option of ps-server, not of this program"
echo "config files ok"
