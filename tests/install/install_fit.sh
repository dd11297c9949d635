#!/usr/bin/env bash
# install_fit.sh BUILD_DIR SOURCE_DIR [CFLAGS]: the first "Done when" of
# issue 16, end to end. Installs the build into a temporary prefix, builds
# examples/fit.c against that prefix three ways (cc with pkg-config; a
# tiny CMake project with find_package(Ferry), once with Ferry::ferry and
# once with Ferry::ferry_static), then runs both ranks of each build
# against a live job of the installed ps-server and checks that both print
# "w = 3.0000". On the way it checks the installed files, the SONAME and
# that ferry.pc, ferry.h and ferry_version() agree on the version. CFLAGS (e.g. the sanitizer flags of the build) are added to
# every compile and link.
set -euo pipefail
BUILD=$1 SRC=$2 EXTRA=${3:-}
WORK=$(mktemp -d /tmp/ferry-install.XXXXXX)
# shellcheck source=tests/install/job.sh
. "$SRC/tests/install/job.sh"
trap 'job_stop; rm -rf "$WORK"' EXIT
P=$WORK/prefix

cmake --install "$BUILD" --prefix "$P" >"$WORK/install.log" ||
	job_fail "cmake --install"
for f in include/ferry/ferry.h bin/ps-server bin/trainer; do
	[ -e "$P/$f" ] || job_fail "$f not installed"
done
pc=$(find "$P" -name ferry.pc) && [ -n "$pc" ] || job_fail "no ferry.pc"
libdir=$(dirname "$(dirname "$pc")")
for f in libferry.so libferry.a cmake/Ferry/FerryConfig.cmake \
	cmake/Ferry/FerryConfigVersion.cmake; do
	[ -e "$libdir/$f" ] || job_fail "$libdir/$f not installed"
done
soname=$(readelf -d "$libdir/libferry.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ -e "$libdir/$soname" ] || job_fail "SONAME $soname not installed"

# 1. pkg-config, exactly as a user types it.
export PKG_CONFIG_PATH=$libdir/pkgconfig
[ "$(pkg-config --variable=prefix ferry)" = "$P" ] ||
	job_fail "ferry.pc prefix is $(pkg-config --variable=prefix ferry)"
cp "$SRC/examples/fit.c" "$WORK/fit.c"
# shellcheck disable=SC2046,SC2086
(cd "$WORK" && cc $EXTRA $(pkg-config --cflags --libs ferry) fit.c \
	-o fit-pkgconfig) 2>"$WORK/cc.log" || job_fail "cc with pkg-config"

# The three versions must agree: ferry.pc's, the header's macros and the
# string the installed library returns.
cat >"$WORK/version.c" <<'C'
#include <ferry/ferry.h>
#include <stdio.h>
int
main(void)
{
	printf("%d.%d.%d %s %d\n", FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR,
	    FERRY_VERSION_PATCH, ferry_version(), FERRY_VERSION_NUMBER);
	return 0;
}
C
# shellcheck disable=SC2046,SC2086
(cd "$WORK" && cc $EXTRA $(pkg-config --cflags --libs ferry) version.c \
	-o version) 2>"$WORK/cc.log" || job_fail "cc version.c"
LD_LIBRARY_PATH=$libdir "$WORK/version" >"$WORK/version.out" ||
	job_fail "version.c exited $?"
v=$(pkg-config --modversion ferry)
IFS=. read -r ma mi pa <<<"$v"
[ "$(cat "$WORK/version.out")" = "$v $v $((ma * 10000 + mi * 100 + pa))" ] ||
	job_fail "versions differ: ferry.pc $v; header, ferry_version()," \
		"number: $(cat "$WORK/version.out")"

# 2. find_package(Ferry), shared and static.
mkdir -p "$WORK/proj"
cat >"$WORK/proj/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.16)
project(fit_user C)
find_package(Ferry 1.0 REQUIRED)
add_executable(fit-cmake ../fit.c)
target_link_libraries(fit-cmake PRIVATE Ferry::ferry)
add_executable(fit-static ../fit.c)
target_link_libraries(fit-static PRIVATE Ferry::ferry_static)
CM
{ cmake -S "$WORK/proj" -B "$WORK/proj/build" -DCMAKE_PREFIX_PATH="$P" \
	-DCMAKE_C_FLAGS="$EXTRA" && cmake --build "$WORK/proj/build"; } \
	>"$WORK/cmake.log" 2>&1 || job_fail "find_package(Ferry) project"
readelf -d "$WORK/proj/build/fit-static" | grep -q 'libferry\.so' &&
	job_fail "fit-static links libferry.so"

# 3. Each build: both ranks against a live job of the installed server.
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for exe in "$WORK/fit-pkgconfig" "$WORK/proj/build/fit-cmake" \
	"$WORK/proj/build/fit-static"; do
	name=$(basename "$exe")
	job_start "$P/bin/ps-server" 2
	"$exe" "$SCHED" 1 >"$WORK/$name-1.out" 2>"$WORK/$name-1.log" & r1=$!
	"$exe" "$SCHED" 0 >"$WORK/$name-0.out" 2>"$WORK/$name-0.log" ||
		job_fail "$name rank 0 exited $?"
	wait $r1 || job_fail "$name rank 1 exited $?"
	job_check "$name rank 0" "$WORK/$name-0.out" "rank 0: w = 3.0000"
	job_check "$name rank 1" "$WORK/$name-1.out" "rank 1: w = 3.0000"
	echo "$name: $(cat "$WORK/$name-0.out"); $(cat "$WORK/$name-1.out")"
	job_stop
done
echo "install_fit: ok"
