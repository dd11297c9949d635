#!/usr/bin/env bash
# k8s_validate.sh: ctest wrapper for deploy/k8s/validate/validate.sh.
# Exit 0 on pass, non-zero on failure. Without npm, node or yamllint it
# prints a SKIP line and exits 0, except under CI (CI set), where a missing
# tool is a failure.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
missing=()
for tool in node npm yamllint; do
	command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
	if [ -z "${CI:-}" ]; then
		echo "SKIP k8s_validate: ${missing[*]} not installed (apt-get install nodejs npm yamllint)"
		exit 0
	fi
	echo "FAIL k8s_validate: ${missing[*]} not installed and CI is set" >&2
	exit 1
fi
exec "$ROOT/deploy/k8s/validate/validate.sh" "$@"
