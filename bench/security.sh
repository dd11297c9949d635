#!/usr/bin/env bash
# security.sh — what signing every request costs end to end: the
# 2-trainer sync Fashion-MNIST job of scripts/run-local.sh, plain and with
# --secret (docs/security.md), alternating plain, signed, plain, signed...
# on one build so that drift in the machine's speed hits both alike.
# Prints each mode's median samples/s (rank 0's summary) and the ratio
# signed/plain. For the transport alone (1 MiB push-pull goodput, same
# run): bench/transport with --transports tcp,tcp+signed.
#
#   bench/security.sh [REPS]     # REPS per mode (default 5)
#   FERRY_SEC_EPOCHS=E           # epochs per job (default 1)
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-5} EPOCHS=${FERRY_SEC_EPOCHS:-1}
scripts/setup.sh >/dev/null
RAW=$(mktemp -d /tmp/ferry-sec.XXXXXX)
: >"$RAW/runs.tsv"
for ((r = 1; r <= REPS; r++)); do
	for mode in plain signed; do
		out="$RAW/$mode-$r"
		flags=()
		[ "$mode" = signed ] && flags=(--secret)
		if FERRY_SKIP_SETUP=1 FERRY_RUN_DIR="$out" scripts/run-local.sh \
			--epochs "$EPOCHS" --log-interval 0 "${flags[@]}" \
			>"$out.log" 2>&1; then
			grep '"rank": 0' "$out.log" |
				grep -o '"samples_per_s": [0-9.]*' |
				awk -v m="$mode" '{print m "\t" $2}' >>"$RAW/runs.tsv"
		else
			echo "security.sh: run failed: $out.log" >&2
		fi
	done
done
python3 - "$RAW/runs.tsv" <<'PY'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]) if l.strip()]
med = {}
print("mode    runs  median samples/s  min..max")
for m in ("plain", "signed"):
    v = sorted(float(r[1]) for r in rows if r[0] == m)
    if v:
        med[m] = statistics.median(v)
        print(f"{m:6}  {len(v):4}  {med[m]:16.1f}  {v[0]:.0f}..{v[-1]:.0f}")
if len(med) == 2:
    print(f"signed/plain = {med['signed'] / med['plain']:.3f}")
PY
echo "security.sh: raw logs in $RAW" >&2
