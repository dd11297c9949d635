#!/usr/bin/env bash
# security.sh — what signing every request, or mutual TLS, costs end to
# end: the 2-trainer sync Fashion-MNIST job of scripts/run-local.sh,
# plain, with --secret and with --tls (docs/security.md), alternating
# plain, signed, tls, plain, signed, tls... on one build so that drift in
# the machine's speed hits every mode alike. Prints each mode's median
# samples/s (rank 0's summary) and the ratios signed/plain and tls/plain.
# For the transport alone (1 MiB push-pull goodput, same run):
# bench/transport with --transports tcp,tcp+signed,tls.
#
#   bench/security.sh [REPS]     # REPS per mode (default 5)
#   FERRY_SEC_EPOCHS=E           # epochs per job (default 1)
#   FERRY_SEC_MODES="plain tls"  # the modes to run (default all three)
#   bench/security.sh --smoke    # seconds (ctest -L bench-smoke): 1 run
#                                # per mode of 20 steps, what is built
set -euo pipefail
cd "$(dirname "$0")/.."
smoke=0
if [ "${1:-}" = --smoke ]; then
	smoke=1
	[ -d /usr/share/datasets/fashion-mnist ] ||
		{ echo "security.sh: SKIP: no data set"; exit 77; }
	export FERRY_MAX_STEPS=20 # every trainer's --max-steps (env)
	set -- 1
fi
REPS=${1:-5} EPOCHS=${FERRY_SEC_EPOCHS:-1}
read -r -a MODES <<<"${FERRY_SEC_MODES:-plain signed tls}"
((smoke)) || scripts/setup.sh >/dev/null
RAW=$(mktemp -d /tmp/ferry-sec.XXXXXX)
: >"$RAW/runs.tsv"
for ((r = 1; r <= REPS; r++)); do
	for mode in "${MODES[@]}"; do
		out="$RAW/$mode-$r"
		flags=()
		[ "$mode" = signed ] && flags=(--secret)
		[ "$mode" = tls ] && flags=(--tls)
		if FERRY_SKIP_SETUP=1 FERRY_RUN_DIR="$out" scripts/run-local.sh \
			--epochs "$EPOCHS" --log-interval 0 "${flags[@]}" \
			>"$out.log" 2>&1; then
			grep '"rank": 0' "$out.log" |
				grep -o '"samples_per_s": [0-9.]*' |
				awk -v m="$mode" '{print m "\t" $2}' >>"$RAW/runs.tsv"
		else
			echo "security.sh: run failed: $out.log" >&2
			((!smoke)) || exit 1
		fi
	done
done
python3 - "$RAW/runs.tsv" <<'PY'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]) if l.strip()]
med = {}
print("mode    runs  median samples/s  min..max")
for m in ("plain", "signed", "tls"):
    v = sorted(float(r[1]) for r in rows if r[0] == m)
    if v:
        med[m] = statistics.median(v)
        print(f"{m:6}  {len(v):4}  {med[m]:16.1f}  {v[0]:.0f}..{v[-1]:.0f}")
for m in ("signed", "tls"):
    if m in med and "plain" in med:
        print(f"{m}/plain = {med[m] / med['plain']:.3f}")
PY
echo "security.sh: raw logs in $RAW" >&2
