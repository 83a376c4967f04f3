#!/bin/sh
# Installs the dependencies, builds netfold and runs every test suite.
# Usage: deploy/test.sh [meson test arguments, e.g. --suite unit]
# Environment: BUILD_DIR (default build), FUZZ_BUILD_DIR (default build-fuzz),
#   NETFOLD_FUZZ_SECONDS (default 5; 0 skips the libFuzzer smoke run).
# Ends with one line "N passed, N failed[, N skipped]" counted from the logs.
set -u
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
FUZZ_SECONDS=${NETFOLD_FUZZ_SECONDS:-5}
status=0

if [ "$(id -u)" -eq 0 ] || command -v sudo >/dev/null 2>&1; then
  deploy/install-deps.sh || exit 1
fi

# A build made here for testing has line tables only (-Ddebug_info=lines:
# backtraces keep file and line), a fifth less compile time than -g; a build
# directory that exists is used as it is.
[ -f "$BUILD_DIR/build.ninja" ] || meson setup --wipe -Ddebug_info=lines "$BUILD_DIR" 2>/dev/null ||
  meson setup -Ddebug_info=lines "$BUILD_DIR" || exit 1
ninja -C "$BUILD_DIR" || exit 1
meson test -C "$BUILD_DIR" --print-errorlogs --num-processes 2 "$@" || status=1
logs="$BUILD_DIR/meson-logs/testlog.junit.xml"

# libFuzzer smoke run: the decoders under clang's fuzzer for a few seconds each.
if [ "$#" -eq 0 ] && [ "$FUZZ_SECONDS" != 0 ] && command -v clang++ >/dev/null 2>&1; then
  if [ ! -f "$FUZZ_BUILD_DIR/build.ninja" ]; then
    rm -rf "$FUZZ_BUILD_DIR"
    CXX=clang++ meson setup "$FUZZ_BUILD_DIR" -Dtests=false -Dbenchmarks=false \
      -Dfuzzers=enabled -Ddpdk=disabled -Dverbs=disabled -Dmpi=disabled || exit 1
  fi
  # Build only what the fuzz suite runs (the fuzzers and their sources),
  # not the whole project a second time.
  # (meson lists each fuzz test as: runner, fuzzer relative to the build dir, ...)
  targets=$(meson introspect "$FUZZ_BUILD_DIR" --tests | /usr/bin/python3 -c '
import json, sys
for t in json.load(sys.stdin):
    if any(s == "fuzz" or s.endswith(":fuzz") for s in t["suite"]):
        print(t["cmd"][1])
')
  # shellcheck disable=SC2086
  ninja -C "$FUZZ_BUILD_DIR" $targets || exit 1
  NETFOLD_FUZZ_SECONDS=$FUZZ_SECONDS meson test -C "$FUZZ_BUILD_DIR" --suite fuzz --no-rebuild \
    --print-errorlogs --num-processes 1 || status=1
  logs="$logs $FUZZ_BUILD_DIR/meson-logs/testlog.junit.xml"
fi

# shellcheck disable=SC2086
/usr/bin/python3 tests/summarize_junit.py $logs || status=1
exit $status
