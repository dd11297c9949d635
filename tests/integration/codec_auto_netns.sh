#!/usr/bin/env bash
# codec_auto_netns.sh — codec "auto" over emulated mixed links (issue 14):
# network namespaces (bench/links/ferry_job.sh), one server, trainer 0's
# link shaped to 1gbit and trainer 1's to 20mbit, --codec-push auto
# --codec-pull auto --link-budget 4, 150 sync steps. Asserts, from both
# trainers' summaries ("links" of the JSON line), that the slow trainer's
# push codec is further down the ladder (more compressed) than the fast
# trainer's, and that both finished every step.
#
#   codec_auto_netns.sh BUILD_DIR [DATA_DIR]  (the build with trainer/ and ps/;
#                       data: $FERRY_DATA_DIR or the Fashion-MNIST default)
# Exit 0 pass, 1 fail, 77 skip (no root / no namespaces / no data).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${1:?usage: $0 BUILD_DIR [DATA_DIR]}
DATA=${2:-${FERRY_DATA_DIR:-/usr/share/datasets/fashion-mnist}}
if [ ! -e "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -e "$DATA/train-images-idx3-ubyte" ]; then
	echo "codec_auto_netns: SKIP: no Fashion-MNIST in $DATA" >&2
	exit 77
fi
if ! "$ROOT/bench/links/netsim.sh" check; then
	echo "codec_auto_netns: SKIP: network namespaces unavailable (needs root)" >&2
	exit 77
fi
WORK=$(mktemp -d /tmp/codec-auto-netns.XXXXXX)
# The push ladder of clients/src/codec_auto.c, least lossy first.
LADDER=(none fp16 q8 q4 q2 topk:0.05+q8 topk:0.01+q8)
rung() {
	local i
	for i in "${!LADDER[@]}"; do
		[ "${LADDER[$i]}" = "$1" ] && { echo "$i"; return; }
	done
	echo -1
}
# push_codec FILE: the codec_push of the (one) link in FILE's summary.
push_codec() {
	grep -o '"links": \[{"server": "[^"]*", "codec_push": "[^"]*"' "$1" |
		sed 's/.*"codec_push": "//; s/"$//'
}
FERRY_JOB_RUN_DIR=$WORK "$ROOT/bench/links/ferry_job.sh" --build "$BUILD" \
	--rate none --rate-of 0=1gbit --rate-of 1=20mbit --name "cant$$" -- \
	--codec-push=auto --codec-pull=auto --link-budget=4 --max-steps=150 \
	--log-interval=0 --seed=1 --data="$DATA" \
	>"$WORK/trainer-0.out"
rc=$?
if ((rc != 0)); then
	echo "codec_auto_netns: FAIL: the job failed ($rc); logs in $WORK" >&2
	exit 1
fi
fast=$(push_codec "$WORK/trainer-0.out") slow=$(push_codec "$WORK/trainer-1.out")
echo "codec_auto_netns: 1gbit trainer pushes $fast, 20mbit trainer pushes $slow"
for r in 0 1; do
	if ! grep -q '"steps": 150,' "$WORK/trainer-$r.out"; then
		echo "codec_auto_netns: FAIL: trainer $r did not run 150 steps; logs in $WORK" >&2
		exit 1
	fi
done
if (($(rung "$fast") < 0 || $(rung "$slow") <= $(rung "$fast"))); then
	echo "codec_auto_netns: FAIL: the slow link's push ($slow) is not more compressed than the fast one's ($fast); logs in $WORK" >&2
	exit 1
fi
rm -rf "$WORK"
