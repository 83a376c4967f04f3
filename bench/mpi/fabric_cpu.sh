#!/bin/bash
# CPU time the fabric spends per operation, by role (docs/performance.md,
# "Where the time goes"): on a machine where every process shares two cores,
# time per operation is set by CPU work, and CPU seconds per operation hardly
# depend on what else runs, so builds can be compared on a loaded machine.
#
#   bench/mpi/fabric_cpu.sh [BUILD_DIR] [SIZE_BYTES] [SECONDS] [RANKS]
#
# Starts a private fabric of BUILD_DIR (netfold up, its state in a fresh
# directory), runs collective_bench OP (env; default allreduce) of SIZE bytes for SECONDS under
# mpirun with libnetfold_mpi.so preloaded, and prints one line:
#   build=DIR size=N ops=N ranks_ms_per_op=X switches_ms_per_op=Y wall_us_per_op=Z
# ranks: user+system CPU of all ranks (mpirun's children), switches: of
# every netfold-switchd of the fabric; both per operation, start-up excluded.
# NETFOLD_UP_FLAGS is added to netfold up's command line (e.g.
# --switch-processes each, to compare with one process for the switches).
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
size=${2:-16777216}
seconds=${3:-5}
np=${4:-8}
state=$(mktemp -d /tmp/netfold-cpu.XXXXXX)
chmod 700 "$state"
export NETFOLD_STATE_DIR=$state
cleanup() {
  "$build/tools/netfold" down >/dev/null 2>&1
  rm -rf "$state"
}
trap cleanup EXIT
manager=$(timeout 60 "$build/tools/netfold" up --hosts "$np" ${NETFOLD_UP_FLAGS:-} 2>&1 | sed -n 's/^export NETFOLD_MANAGER=//p')
[ -n "$manager" ] || { echo "fabric_cpu: netfold up failed" >&2; exit 1; }
# Only the switches of this fabric: the ones whose admin port file is in $state.
switch_pids() { pgrep -f "netfold-switchd.*--admin_port_file=$state/" ; }
ticks() {  # utime + stime of the given pids, in clock ticks
  local t=0
  for p in "$@"; do
    set -- $(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null)
    t=$((t + ${12:-0} + ${13:-0}))
  done
  echo $t
}
pids=$(switch_pids)
# Library settings to try (e.g. NETFOLD_SLOTS=4 NETFOLD_SLOT_BYTES=1024) reach the ranks.
extra=()
for v in NETFOLD_SLOTS NETFOLD_SLOT_BYTES NETFOLD_PROGRESS_THREAD NETFOLD_ALGORITHM NETFOLD_DELIVERY \
         NETFOLD_BCAST_RUN NETFOLD_REDUCE_DATA NETFOLD_RELEASED_REDUCES NETFOLD_POLL_US \
         NETFOLD_CHANNELS; do
  [ -n "${!v:-}" ] && extra+=(-x "$v=${!v}")
done
hz=$(getconf CLK_TCK)
# One mpirun: prints "ops avg_us rank_cpu_s switch_ticks".
run() {
  local secs=$1 out before after line ru rs
  out=$(mktemp)
  before=$(ticks $pids)
  /usr/bin/time -f "%U %S" -o "$out.time" timeout 600 mpirun --allow-run-as-root --oversubscribe \
    -np "$np" -x NETFOLD_MANAGER="$manager" -x NETFOLD_CREDENTIAL_FILE="$state/credential" \
    -x NETFOLD_TLS_CA="$state/ca.pem" \
    -x LD_PRELOAD="$build/host/mpi/libnetfold_mpi.so" \
    -x NETFOLD_MPI_ENABLE=1 -x NETFOLD_MPI_MIN_COMM_SIZE=2 "${extra[@]}" "$build/bench/mpi/collective_bench" "${OP:-allreduce}" "$size" "$secs" \
    >"$out" 2>/dev/null
  after=$(ticks $pids)
  line=$(grep -E "^$size," "$out" | tail -1)
  read -r ru rs <"$out.time"
  rm -f "$out" "$out.time"
  echo "$(echo "$line" | cut -d, -f2) $(echo "$line" | cut -d, -f3) $(awk -v u="$ru" -v s="$rs" 'BEGIN { print u + s }') $((after - before))"
}
# The ranks' CPU includes MPI's start-up and the benchmark's warm-up: the
# difference between a short and a long run is what the operations cost.
read -r ops0 _ cpu0 sw0 <<<"$(run 0.01)"
read -r ops1 avg cpu1 sw1 <<<"$(run "$seconds")"
[ -n "$ops1" ] && [ "${ops1:-0}" -gt "${ops0:-0}" ] || { echo "fabric_cpu: the benchmark did not run" >&2; exit 1; }
awk -v b="$build" -v s="$size" -v n0="$ops0" -v n1="$ops1" -v c0="$cpu0" -v c1="$cpu1" \
    -v w0="$sw0" -v w1="$sw1" -v hz="$hz" -v avg="$avg" 'BEGIN {
  n = n1 - n0
  printf "build=%s size=%d ops=%d ranks_ms_per_op=%.3f switches_ms_per_op=%.3f wall_us_per_op=%.1f\n",
         b, s, n, (c1 - c0) * 1000 / n, (w1 - w0) * 1000 / hz / n, avg }'
