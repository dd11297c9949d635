#!/usr/bin/env bash
# optim.sh — the servers' optimizers against torch.optim on the same job
# (issue 13): Fashion-MNIST, MLP 784-256-128-10, 2 trainers x batch 64,
# 3 epochs, seed 42. Each configuration runs on Ferry
# (scripts/run-local.sh: scheduler, 2 servers, 2 trainers, --optimizer)
# and on PyTorch (bench/peers/torch_mlp.py --mode ddp: DDP/gloo, 2
# processes, the same torch.optim rule). Prints a table and writes
# bench/results/optim.json: per configuration and system the median test
# accuracy and samples/s over the repetitions, and each run's values.
#   adam      --optimizer adam --lr 0.001 (torch.optim.Adam, lr 1e-3)
#   momentum  --optimizer momentum --momentum 0.9 --lr 0.01
#             (torch.optim.SGD, momentum 0.9, lr 0.01)
# The target: Ferry's adam within 0.5 point of PyTorch Adam's accuracy.
#
#   bench/optim.sh [REPS]      # default 1 repetition
#
# Builds with scripts/setup.sh first (FERRY_SKIP_SETUP=1 uses what is
# built); FERRY_BUILD_DIR picks the build directory. Needs python3-torch
# for the PyTorch half (without it those rows say so).
#
#   bench/optim.sh --smoke     # seconds (ctest -L bench-smoke): 20 steps
#                              # per configuration and system, what is
#                              # built, the JSON in the temp directory
set -euo pipefail
cd "$(dirname "$0")/.."
smoke=0 steps=()
if [ "${1:-}" = --smoke ]; then
	smoke=1 steps=(--max-steps 20)
	[ -d /usr/share/datasets/fashion-mnist ] ||
		{ echo "optim.sh: SKIP: no data set"; exit 77; }
	export FERRY_SKIP_SETUP=1
	set -- 1
fi
REPS=${1:-1}
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || { echo "optim.sh: REPS must be a positive integer" >&2; exit 2; }
[ "${FERRY_SKIP_SETUP:-0}" = 1 ] || scripts/setup.sh
PY=/usr/bin/python3
RAW=$(mktemp -d /tmp/ferry-optim.XXXXXX)
OUT=bench/results/optim.json
((!smoke)) || OUT=$RAW/optim.json
mkdir -p bench/results
: >"$RAW/runs.jsonl"
configs=("adam|--optimizer adam --lr 0.001|--optimizer adam --lr 0.001"
	"momentum|--optimizer momentum --momentum 0.9 --lr 0.01|--optimizer momentum --momentum 0.9 --lr 0.01")

# record NAME SYSTEM REP FILE: rank 0's summary line of FILE as a run.
record() {
	grep -h '"summary"' "$4" | $PY -c '
import json, sys
s = [json.loads(l)["summary"] for l in sys.stdin]
r0 = [x for x in s if x.get("rank", 0) == 0][0]
print(json.dumps({"config": sys.argv[1], "system": sys.argv[2],
                  "rep": int(sys.argv[3]), "test_acc": r0["test_acc"],
                  "samples_per_s": sum(x["samples_per_s"] for x in s),
                  "steps": r0["steps"]}))' "$1" "$2" "$3" >>"$RAW/runs.jsonl"
}

for ((rep = 1; rep <= REPS; rep++)); do
	for c in "${configs[@]}"; do
		IFS='|' read -r name fflags tflags <<<"$c"
		echo "optim.sh: $name, rep $rep: ferry" >&2
		# shellcheck disable=SC2086 # the flags are words
		if FERRY_SKIP_SETUP=1 FERRY_RUN_DIR="$RAW/ferry-$name-$rep" \
			scripts/run-local.sh --epochs 3 $fflags --log-interval 200 "${steps[@]}" \
			>"$RAW/ferry-$name-$rep.out" 2>&1; then
			record "$name" ferry "$rep" "$RAW/ferry-$name-$rep.out"
		else
			echo "optim.sh: ferry $name failed: see $RAW/ferry-$name-$rep.out" >&2
			((!smoke)) || exit 1
		fi
		echo "optim.sh: $name, rep $rep: torch" >&2
		# shellcheck disable=SC2086
		if $PY -c 'import torch' 2>/dev/null &&
			timeout 1800 $PY bench/peers/torch_mlp.py --mode ddp --world 2 \
				--epochs 3 --port $((29500 + RANDOM % 2000)) $tflags "${steps[@]}" \
				--log-interval 200 >"$RAW/torch-$name-$rep.out" 2>&1; then
			record "$name" torch "$rep" "$RAW/torch-$name-$rep.out"
		else
			echo "optim.sh: torch $name failed or no torch: see $RAW/torch-$name-$rep.out" >&2
		fi
	done
done

$PY - "$RAW/runs.jsonl" "$OUT" "$REPS" <<'PYEOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
res = {"reps": int(sys.argv[3]), "runs": runs, "configs": {}}
for cfg in ("adam", "momentum"):
    row = {}
    for sysname in ("ferry", "torch"):
        rr = [r for r in runs if r["config"] == cfg and r["system"] == sysname]
        if rr:
            row[sysname] = {"test_acc": statistics.median(r["test_acc"] for r in rr),
                            "samples_per_s": statistics.median(r["samples_per_s"] for r in rr)}
    if "ferry" in row and "torch" in row:
        row["acc_diff_points"] = 100 * (row["ferry"]["test_acc"] - row["torch"]["test_acc"])
    res["configs"][cfg] = row
json.dump(res, open(sys.argv[2], "w"), indent=1)
print("| config | Ferry acc | torch.optim acc | diff (points) | Ferry samples/s | torch samples/s |")
print("|---|---|---|---|---|---|")
for cfg, row in res["configs"].items():
    f, t = row.get("ferry", {}), row.get("torch", {})
    print(f"| {cfg} | {f.get('test_acc', 'n/a')} | {t.get('test_acc', 'n/a')} | "
          f"{row.get('acc_diff_points', float('nan')):+.2f} | {f.get('samples_per_s', 0):.0f} | "
          f"{t.get('samples_per_s', 0):.0f} |")
PYEOF
echo "optim.sh: wrote $OUT; raw logs in $RAW" >&2
