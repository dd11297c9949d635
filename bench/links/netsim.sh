#!/usr/bin/env bash
# netsim.sh — emulate slow links on one Linux machine: every "host" is a
# network namespace with one veth link into a bridge namespace (a switch).
# Each link can be shaped (tc tbf, both directions) to a bandwidth, and a
# small TCP relay (delay_relay.py) adds latency to real traffic, since
# netem is not available everywhere.
#
#   netsim.sh up NAME HOST[:RATE]...   create NAME-br and one ns per HOST,
#                                      host i gets 10.$NETSIM_SUBNET.0.(i+1)/24;
#                                      RATE like 100mbit, 1gbit (default none)
#   netsim.sh shape NAME HOST RATE     (re)shape HOST's link; RATE "none" clears
#   netsim.sh exec NAME HOST CMD...    run CMD inside HOST's namespace
#   netsim.sh ip NAME HOST             print HOST's address
#   netsim.sh relay NAME HOST PORT TO_IP:TO_PORT DELAY_MS
#                                      start, inside HOST, a TCP relay on PORT
#                                      that forwards to TO_IP:TO_PORT and delays
#                                      every byte DELAY_MS each way; prints its
#                                      pid (stop it with kill)
#   netsim.sh down NAME                remove every namespace of NAME
#   netsim.sh list                     list netsim namespaces
#   netsim.sh check                    exit 0 if namespaces can be made here
#   netsim.sh --smoke                  up, shape, exec, ip, relay and down a
#                                      two-host network (ctest -L bench-smoke)
#
# Example (2 trainers, 1 server host at 100 Mbit/s, 5 ms added one way):
#   netsim.sh up lab srv:100mbit t0:100mbit t1:100mbit
#   netsim.sh exec lab srv ps-server --role=scheduler --listen=tcp://10.77.0.1:7000 &
#   netsim.sh relay lab srv 7100 10.77.0.1:7001 5
#   netsim.sh exec lab t0 trainer --scheduler=tcp://10.77.0.1:7000 ...
#   netsim.sh down lab
#
# Needs root (CAP_NET_ADMIN) and iproute2; when it cannot create a
# namespace it says so and exits 77 (the "skip" code of automake/ctest).
# Environment: NETSIM_SUBNET (default 77), NETSIM_BURST (tbf burst, bytes,
# as given; default max(128 KiB, rate/250)).
set -euo pipefail

SUBNET=${NETSIM_SUBNET:-77}
HERE=$(cd "$(dirname "$0")" && pwd)
SKIP=77

die() { echo "netsim: $*" >&2; exit 1; }

can_netns() {
	[ "$(id -u)" = 0 ] || { echo "netsim: skipped: needs root (CAP_NET_ADMIN) for network namespaces" >&2; return 1; }
	command -v ip >/dev/null || { echo "netsim: skipped: iproute2 (ip) not installed" >&2; return 1; }
	command -v tc >/dev/null || { echo "netsim: skipped: tc (iproute2) not installed" >&2; return 1; }
	local probe="netsim-probe-$$"
	ip netns add "$probe" 2>/dev/null || { echo "netsim: skipped: cannot create network namespaces here" >&2; return 1; }
	ip netns del "$probe"
}

# rate_bits 100mbit -> 100000000
rate_bits() {
	local r=${1,,} n u
	n=${r%%[a-z]*}; u=${r#"$n"}
	case "$u" in
	gbit) echo $((n * 1000000000)) ;;
	mbit) echo $((n * 1000000)) ;;
	kbit) echo $((n * 1000)) ;;
	bit | "") echo "$n" ;;
	*) die "rate '$1': use bit, kbit, mbit or gbit" ;;
	esac
}

# tbf_on NS DEV RATE: shape DEV's egress inside NS (RATE none: clear).
tbf_on() {
	local ns=$1 dev=$2 rate=$3
	ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null || true
	[ "$rate" = none ] && return 0
	local bits burst
	bits=$(rate_bits "$rate")
	# Default: 4 ms of line rate, at least 128 KiB (a GSO segment and
	# then some); an explicit NETSIM_BURST is taken as it is (slow links
	# whose idle time must not bank seconds of traffic).
	if [ -n "${NETSIM_BURST:-}" ]; then
		burst=$NETSIM_BURST
	else
		burst=$((bits / 8 / 250))
		((burst < 131072)) && burst=131072
	fi
	ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" \
		burst "$burst" latency 100ms
}

hosts_of() { # hosts_of NAME: host names in creation order
	local f="/run/netsim/$1.hosts"
	[ -f "$f" ] || die "no netsim network '$1' (run: netsim.sh up $1 ...)"
	cat "$f"
}

host_index() { # host_index NAME HOST
	local i=0 h
	for h in $(hosts_of "$1"); do
		[ "$h" = "$2" ] && { echo "$i"; return 0; }
		i=$((i + 1))
	done
	die "network '$1' has no host '$2'"
}

cmd_up() {
	local name=$1; shift
	(($#)) || die "up: name at least one HOST"
	can_netns || exit $SKIP
	[ -f "/run/netsim/$name.hosts" ] && cmd_down "$name"
	mkdir -p /run/netsim
	local br="$name-br" i=0 spec h rate
	ip netns add "$br"
	ip -n "$br" link set lo up
	ip -n "$br" link add br0 type bridge
	ip -n "$br" link set br0 up
	: >"/run/netsim/$name.hosts"
	for spec in "$@"; do
		h=${spec%%:*}; rate=none
		[[ "$spec" == *:* ]] && rate=${spec#*:}
		[[ "$h" =~ ^[a-zA-Z0-9_]+$ ]] || die "host '$h': letters, digits, _ only"
		ip netns add "$name-$h"
		ip -n "$name-$h" link set lo up
		ip link add "ns$$-$i" type veth peer name "nb$$-$i"
		ip link set "ns$$-$i" netns "$name-$h"
		ip link set "nb$$-$i" netns "$br"
		ip -n "$name-$h" link set "ns$$-$i" name eth0
		ip -n "$br" link set "nb$$-$i" name "p$i"
		ip -n "$br" link set "p$i" master br0
		ip -n "$br" link set "p$i" up
		ip -n "$name-$h" addr add "10.$SUBNET.0.$((i + 1))/24" dev eth0
		ip -n "$name-$h" link set eth0 up
		echo "$h" >>"/run/netsim/$name.hosts"
		cmd_shape "$name" "$h" "$rate"
		i=$((i + 1))
	done
}

cmd_shape() { # shape NAME HOST RATE: both directions of HOST's link
	local name=$1 h=$2 rate=$3 i
	i=$(host_index "$name" "$h")
	tbf_on "$name-$h" eth0 "$rate"
	tbf_on "$name-br" "p$i" "$rate"
}

cmd_down() {
	local name=$1 h
	if [ -f "/run/netsim/$name.hosts" ]; then
		for h in $(cat "/run/netsim/$name.hosts"); do
			# End what still runs inside (relays, servers) first.
			for p in $(ip netns pids "$name-$h" 2>/dev/null); do
				kill "$p" 2>/dev/null || true
			done
			ip netns del "$name-$h" 2>/dev/null || true
		done
		rm -f "/run/netsim/$name.hosts"
	fi
	ip netns del "$name-br" 2>/dev/null || true
}

cmd_relay() { # relay NAME HOST PORT TO DELAY_MS
	local name=$1 h=$2 port=$3 to=$4 ms=$5
	hosts_of "$name" >/dev/null
	ip netns exec "$name-$h" /usr/bin/python3 "$HERE/delay_relay.py" \
		--listen "0.0.0.0:$port" --to "$to" --delay-ms "$ms" \
		</dev/null >/dev/null 2>"/run/netsim/$name-$h-relay-$port.log" &
	echo $!
}

case "${1:-}" in
up) shift; (($#)) || die "usage: up NAME HOST[:RATE]..."; cmd_up "$@" ;;
down) shift; (($# == 1)) || die "usage: down NAME"; cmd_down "$1" ;;
shape) shift; (($# == 3)) || die "usage: shape NAME HOST RATE"; cmd_shape "$@" ;;
exec)
	shift; (($# >= 3)) || die "usage: exec NAME HOST CMD..."
	name=$1 h=$2; shift 2
	host_index "$name" "$h" >/dev/null
	exec ip netns exec "$name-$h" "$@" ;;
ip)
	shift; (($# == 2)) || die "usage: ip NAME HOST"
	echo "10.$SUBNET.0.$(($(host_index "$1" "$2") + 1))" ;;
relay) shift; (($# == 5)) || die "usage: relay NAME HOST PORT TO_IP:PORT DELAY_MS"; cmd_relay "$@" ;;
list) ls /run/netsim/*.hosts 2>/dev/null | sed 's#.*/##; s#\.hosts$##' || true ;;
check) can_netns || exit $SKIP ;;
smoke | --smoke)
	can_netns || exit $SKIP
	n="nsm$$"
	trap 'cmd_down "$n" >/dev/null 2>&1 || true' EXIT
	cmd_up "$n" a:100mbit b
	cmd_shape "$n" b 1gbit
	ipb="10.$SUBNET.0.$(($(host_index "$n" b) + 1))"
	ip netns exec "$n-b" ip -4 addr | grep -q "inet $ipb/" ||
		die "smoke: host b does not hold $ipb"
	rp=$(cmd_relay "$n" a 7999 "$ipb:7998" 1)
	kill "$rp"
	cmd_down "$n"
	trap - EXIT
	echo "netsim: smoke ok" ;;
-h | --help | help | "") sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
*) die "unknown command '$1' (see --help)" ;;
esac
