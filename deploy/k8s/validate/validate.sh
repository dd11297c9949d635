#!/usr/bin/env bash
# validate.sh: check deploy/k8s offline (no cluster, no Docker): render each
# overlay, then yamllint, a tsc type check against kubernetes-types, the
# JSON schemas of kubernetes-models and Ferry's own rules; every case in bad/
# must be rejected. See docs/k8s-validation.md and validate.mjs.
#
#   deploy/k8s/validate/validate.sh [-v]
#
# Needs node (>= 18), npm and yamllint (Debian: nodejs npm yamllint). The npm
# packages are pinned in package-lock.json and installed with `npm ci` when
# node_modules is missing or older than the lock. FERRY_BUILD_DIR (default
# build/) locates ps-server and trainer for the ConfigMap key check;
# FERRY_K8S_KUBECTL=0 skips the cross-check against `kubectl kustomize`.
set -euo pipefail
cd "$(dirname "$0")"
for tool in node npm yamllint; do
	command -v "$tool" >/dev/null || {
		echo "validate.sh: $tool not found (apt-get install nodejs npm yamllint)" >&2
		exit 2
	}
done
stamp=node_modules/.package-lock.json
if [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ]; then
	npm ci --no-audit --no-fund --loglevel=error >&2
fi
exec node validate.mjs "$@"
