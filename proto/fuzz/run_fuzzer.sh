#!/bin/sh
# Runs one libFuzzer target for $NETFOLD_FUZZ_SECONDS seconds (default 5;
# 0 runs the seed corpus once) starting from a seed corpus, for
# `meson test --suite fuzz`.
# Usage: run_fuzzer.sh FUZZER SEED_DIR ARTIFACT_DIR
# New corpus entries go to a temporary directory that is removed afterwards
# (the checked-in seeds are never written); a crashing input is saved in
# ARTIFACT_DIR and its path printed by libFuzzer.
set -eu
fuzzer=$1
seeds=$2
artifacts=$3
seconds=${NETFOLD_FUZZ_SECONDS:-5}
case $seconds in
  ''|*[!0-9]*) echo "NETFOLD_FUZZ_SECONDS must be a number of seconds, got '$seconds'" >&2; exit 2 ;;
esac
[ -d "$seeds" ] || { echo "no seed corpus at $seeds" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/netfold-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
mkdir -p "$artifacts"

if [ "$seconds" -eq 0 ]; then
  set -- -runs=0
else
  set -- -max_total_time="$seconds"
fi
# -timeout: a single input taking seconds is a bug; -rss_limit_mb: keep the
# shared machine usable. -error_exitcode: libFuzzer's default for a crash
# is 77, which meson reads as "skipped": a crash must fail the test.
"$fuzzer" "$@" -timeout=10 -rss_limit_mb=1024 -print_final_stats=1 \
  -error_exitcode=1 -timeout_exitcode=1 \
  -artifact_prefix="$artifacts/$(basename "$fuzzer")-" "$work" "$seeds"
