#!/usr/bin/env bash
# setup.sh — install Ferry's Debian dependencies (idempotent, quiet when
# everything is there) and build into build/.
#
#   scripts/setup.sh            # install what is missing, configure, build
#   FERRY_BUILD_DIR=dir ...     # build somewhere else
#   FERRY_CMAKE_ARGS="..."      # extra configure flags (e.g. -DFERRY_WERROR=ON)
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(build-essential cmake pkg-config libnng-dev libprotobuf-c-dev
      protobuf-c-compiler libopenblas-dev check zlib1g-dev libgcrypt20-dev
      libssl-dev
      dataset-fashion-mnist yamllint python3-numpy python3-torch
      python3-venv python3-pip python3-setuptools)

missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing+=("$p")
done
if ((${#missing[@]})); then
	echo "setup: installing ${missing[*]}" >&2
	SUDO=""
	if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
		--no-install-recommends "${missing[@]}" >/dev/null
fi

# Node.js and npm only serve the offline Kubernetes manifest check. Some
# machines carry a newer Node.js from elsewhere whose packages conflict
# with Debian's npm: install Debian's only when there is no npm at all,
# and never fail the set-up over it (the check then says it skipped).
if ! command -v npm >/dev/null 2>&1; then
	SUDO=""
	if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
		--no-install-recommends nodejs npm >/dev/null 2>&1 ||
		echo "setup: could not install nodejs/npm; the Kubernetes" \
			"manifest check will be skipped" >&2
fi

BUILD=${FERRY_BUILD_DIR:-build}
# A cache without a build system is a configure that failed (a library
# that was missing then): configure again rather than build nothing.
if [ ! -f "$BUILD/CMakeCache.txt" ] ||
	{ [ ! -f "$BUILD/Makefile" ] && [ ! -f "$BUILD/build.ninja" ]; }; then
	cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		${FERRY_CMAKE_ARGS:-} >/dev/null
elif [ -n "${FERRY_CMAKE_ARGS:-}" ]; then
	cmake -S . -B "$BUILD" ${FERRY_CMAKE_ARGS} >/dev/null
fi
cmake --build "$BUILD" -j"$(nproc)" 2>&1 | grep -Ev '^\[|^(gmake|make)' || true
test -x "$BUILD/ps/ps-server" && test -x "$BUILD/trainer/trainer" || {
	echo "setup: build failed (ps-server or trainer missing)" >&2
	exit 1
}
