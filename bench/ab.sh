#!/usr/bin/env bash
# ab.sh — head-to-head of two builds of Ferry on the same machine, in the
# same run: the 2-trainer sync Fashion-MNIST job (fp32, and q4 both ways),
# builds alternating A, B, A, B... so that drift in the machine's speed hits
# both alike. Prints each build's median samples/s (rank 0's summary) per
# configuration and the ratio B/A. For a change that should not move speed
# (a refactor), the ratio should sit within the runs' spread.
#
#   bench/ab.sh BUILD_A BUILD_B [REPS]      # REPS per build (default 5)
#   bench/ab.sh                             # FERRY_AB_BASE (default HEAD~1)
#                                           # against this checkout
#
# Each BUILD is a CMake build directory holding ps/ps-server and
# trainer/trainer (e.g. `cmake -S . -B /tmp/a -DFERRY_TESTS=OFF` at one
# commit, `cmake -S . -B /tmp/b ...` at another). Set FERRY_AB_EPOCHS
# (default 1) for longer jobs.
#
#   bench/ab.sh --smoke     # seconds (ctest -L bench-smoke): the build in
#                           # FERRY_BUILD_DIR against itself, 1 rep of 20
#                           # steps, nothing built or installed
set -euo pipefail
cd "$(dirname "$0")/.."
smoke=0
if [ "${1:-}" = --smoke ]; then
	smoke=1 b=${FERRY_BUILD_DIR:-build}
	[ -d /usr/share/datasets/fashion-mnist ] ||
		{ echo "ab.sh: SKIP: no data set"; exit 77; }
	export FERRY_MAX_STEPS=20 # every trainer's --max-steps (env)
	set -- "$b" "$b" 1
fi
if (($# == 1)) || [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
	sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
fi
if (($# == 0)); then
	# No builds named: build this checkout (scripts/setup.sh, which also
	# installs what is missing) and FERRY_AB_BASE in a scratch worktree.
	base=${FERRY_AB_BASE:-HEAD~1}
	scripts/setup.sh
	wt=$(mktemp -d /tmp/ferry-ab-base.XXXXXX)
	git worktree add -q --detach "$wt" "$base"
	trap 'git worktree remove --force "$wt"' EXIT
	echo "ab.sh: A = $base ($(git rev-parse --short "$base")), B = this checkout" >&2
	cmake -S "$wt" -B "$wt/build" -DFERRY_TESTS=OFF >/dev/null
	cmake --build "$wt/build" -j"$(nproc)" >/dev/null
	set -- "$wt/build" "${FERRY_BUILD_DIR:-build}"
fi
A=$1 B=$2 REPS=${3:-5} EPOCHS=${FERRY_AB_EPOCHS:-1}
for b in "$A" "$B"; do
	for x in ps/ps-server trainer/trainer; do
		[ -x "$b/$x" ] || { echo "ab.sh: missing $b/$x" >&2; exit 1; }
	done
done
((smoke)) || [ -d /usr/share/datasets/fashion-mnist ] || scripts/setup.sh
RAW=$(mktemp -d /tmp/ferry-ab.XXXXXX)
: >"$RAW/runs.tsv"

# one BUILD CONFIG REP: a 2-trainer job; appends "config build sps" lines.
one() {
	local build=$1 cfg=$2 rep=$3 codec=none out
	[ "$cfg" = q4 ] && codec=q4
	out="$RAW/$cfg-$(basename "$build")-$rep"
	if FERRY_SKIP_SETUP=1 FERRY_BUILD_DIR="$build" FERRY_RUN_DIR="$out" \
		scripts/run-local.sh --epochs "$EPOCHS" --log-interval 0 \
		--codec-push "$codec" --codec-pull "$codec" >"$out.log" 2>&1; then
		grep '"rank": 0' "$out.log" | grep -o '"samples_per_s": [0-9.]*' |
			awk -v c="$cfg" -v b="$build" '{print c "\t" b "\t" $2}' >>"$RAW/runs.tsv"
	else
		echo "ab.sh: run failed: $out.log" >&2
	fi
}
for ((r = 1; r <= REPS; r++)); do
	for cfg in none q4; do
		one "$A" "$cfg" "$r"
		one "$B" "$cfg" "$r"
	done
done
python3 - "$RAW/runs.tsv" "$A" "$B" <<'EOF'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]) if l.strip()]
a, b = sys.argv[2], sys.argv[3]
print("config  build  runs  median samples/s  min..max")
for cfg in ("none", "q4"):
    med = {}
    for name, build in (("A", a), ("B", b)):
        v = sorted(float(r[2]) for r in rows if r[0] == cfg and r[1] == build)
        if not v:
            print(f"{cfg:6}  {name}      0  (no run)")
            continue
        med[name] = statistics.median(v)
        print(f"{cfg:6}  {name}  {len(v):5}  {med[name]:16.1f}  {v[0]:.0f}..{v[-1]:.0f}")
    if len(med) == 2:
        print(f"{cfg:6}  B/A = {med['B'] / med['A']:.3f}")
EOF
echo "ab.sh: raw logs in $RAW" >&2
