#!/bin/bash
# The fault suite, N runs in a row with both cores kept busy by two CPU hogs
# (docs/faults.md, "Under load"): a lost chunk or a revocation under load is
# a bug, so every run must pass. Not part of `meson test` (it takes N x
# 1-2 minutes); run it after changes to the data path or the fault handling.
#
#   tests/fault/under_load.sh [RUNS] [BUILD_DIR]      # default 20, build
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
runs=${1:-20}
build=$(cd "${2:-$here/build}" && pwd)
hogs=()
cleanup() { [ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}" 2>/dev/null; }
trap cleanup EXIT
pass=0
fail=0
for i in $(seq "$runs"); do
  hogs=()
  for _ in 1 2; do
    timeout 900 sh -c 'while :; do :; done' &
    hogs+=($!)
  done
  start=$(date +%s)
  log=$(mktemp /tmp/fault-under-load.XXXXXX)
  if NETFOLD_CLI="$build/tools/netfold" timeout 900 "$build/tests/fault/fault_suite_test" >"$log" 2>&1; then
    pass=$((pass + 1))
    echo "run $i: ok ($(($(date +%s) - start)) s, load $(cut -d' ' -f1 /proc/loadavg))"
    rm -f "$log"
  else
    fail=$((fail + 1))
    echo "run $i: FAILED ($(($(date +%s) - start)) s): $log"
  fi
  cleanup
  wait 2>/dev/null
done
echo "fault_suite_test under two CPU hogs: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
