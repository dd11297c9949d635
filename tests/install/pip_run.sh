#!/usr/bin/env bash
# pip_run.sh BUILD_DIR SOURCE_DIR PYTHON: issue 29's "Done when" for the
# package, end to end, as a user with no checkout on any path would do it:
# `cmake --install` into a temporary prefix, a fresh
# `python3 -m venv --system-site-packages`, `pip install ./python` (from a
# copy of python/, with pip's index pointed at a dead port: nothing may be
# downloaded), then, from a folder outside the checkout, `python3 -m
# ferry.run --trainers 2` of examples/torch_cnn.py (tiny: 5 steps of 32)
# when the tree has it (and torch and Fashion-MNIST are there), else of
# run_trainer.py. The launcher must exit 0 with rank 0's JSON summary as
# its last line, having found libferry through pkg-config and ps-server
# beside it. Also checks
# the package `cmake --install` put in the prefix finds its libferry alone.
# Exits 77 (skipped) without venv/ensurepip or NumPy.
set -euo pipefail
BUILD=$1 SRC=$2 PY=$3
"$PY" -c "import venv, ensurepip" 2>/dev/null ||
	{ echo "SKIP: $PY has no venv/ensurepip (apt-get install python3-venv)"; exit 77; }
"$PY" -c "import numpy" 2>/dev/null || { echo "SKIP: $PY has no numpy"; exit 77; }
WORK=$(mktemp -d /tmp/ferry-pip.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail() {
	echo "FAIL: $*" >&2
	for f in "$WORK"/*.log "$WORK"/*.out "$WORK"/logs/*.log; do
		[ -s "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }
	done
	exit 1
}
# Nothing of the checkout or the build may leak in.
unset PYTHONPATH FERRY_LIB FERRY_PS_SERVER FERRY_SCHEDULER FERRY_RANK \
	FERRY_TRAINERS FERRY_LOG_DIR FERRY_MODE PKG_CONFIG_PATH PYTHONHOME
P=$WORK/prefix
cmake --install "$BUILD" --prefix "$P" >"$WORK/install.log" 2>&1 ||
	fail "cmake --install"
pc=$(find "$P" -name ferry.pc)
[ -n "$pc" ] || fail "no ferry.pc"

# The package cmake --install wrote finds its own libferry (_prefix.py),
# with no pkg-config and no loader path.
[ -e "$P/lib/python3/dist-packages/ferry/_prefix.py" ] ||
	fail "cmake --install wrote no ferry/_prefix.py"
(cd "$WORK" && PYTHONPATH=$P/lib/python3/dist-packages "$PY" -c \
	'import ferry, sys; print(ferry.library_path())') >"$WORK/cm.out" 2>&1 ||
	fail "import the installed package"
grep -q "^$P/" "$WORK/cm.out" || fail "installed package loaded $(cat "$WORK/cm.out")"

# pip, offline: the index is a closed port, so any download fails.
mkdir -p "$WORK/src" "$WORK/run"
cp -r "$SRC/python" "$WORK/src/python"
find "$WORK/src/python" -name __pycache__ -prune -exec rm -rf {} +
"$PY" -m venv --system-site-packages "$WORK/venv" >"$WORK/venv.log" 2>&1 ||
	fail "python3 -m venv"
(cd "$WORK/src" && PIP_INDEX_URL=http://127.0.0.1:9/ PIP_RETRIES=0 \
	PIP_DISABLE_PIP_VERSION_CHECK=1 "$WORK/venv/bin/pip" install ./python) \
	>"$WORK/pip.log" 2>&1 || fail "pip install ./python"
VPY=$WORK/venv/bin/python3
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
(cd "$WORK/run" && "$VPY" -c \
	'import ferry; print(ferry.__file__); print(ferry.library_path())') \
	>"$WORK/where.out" 2>&1 || fail "import ferry from the venv"
grep -q "^$WORK/venv/" "$WORK/where.out" || fail "ferry not from the venv"
grep -q "^$P/" "$WORK/where.out" || fail "libferry not from the prefix"

# The job: ferry.run finds ps-server beside the libferry it loaded.
# The script runs from a copy, so that nothing it finds beside itself (a
# checkout's python/ on sys.path) can stand in for the installed package.
if [ -e "$SRC/examples/torch_cnn.py" ] && [ -d /usr/share/datasets/fashion-mnist ] &&
	"$PY" -c "import torch" 2>/dev/null; then
	cp -r "$SRC/examples" "$WORK/run/examples"
	script=examples/torch_cnn.py args=(--max-steps 5 --batch 32)
else
	cp "$SRC/tests/install/run_trainer.py" "$WORK/run/train.py"
	script=train.py args=(--steps 5)
fi
rc=0
(cd "$WORK/run" && OMP_NUM_THREADS=1 "$VPY" -m ferry.run --trainers 2 \
	--log-dir "$WORK/logs" "$script" "${args[@]}") >"$WORK/run.out" \
	2>"$WORK/run.log" || rc=$?
[ "$rc" = 0 ] || fail "ferry.run of $script exited $rc"
tail -n 1 "$WORK/run.out" | "$PY" -c '
import json, sys
line = sys.stdin.read()
sys.exit(0 if isinstance(json.loads(line).get("summary"), dict) else "no summary: " + line)' ||
	fail "the last stdout line is no JSON summary"
grep -q "^ferry.run: logs in $WORK/logs" "$WORK/run.log" || fail "log folder"
echo "pip install ./python + ferry.run of $script: ok"
