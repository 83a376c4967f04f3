#!/bin/bash
# Several MPI jobs at once on one fabric (docs/performance.md, "Data planes"):
# a fresh private fabric (netfold up FLAGS, its state in a new directory),
# then JOBS mpiruns of RANKS ranks each started together, each a
# collective_bench OP SIZE loop for SECONDS, the interposer preloaded.
#
#   bench/mpi/side_by_side.sh JOBS RANKS OP SIZE SECONDS "FLAGS"
#   bench/mpi/side_by_side.sh 2 4 allreduce 1048576 4 "--hosts 8 --planes 2"
#
# Prints one line per job: "job N SIZE avg_us p50_us". BUILD_DIR (default
# build/) names the build whose netfold and libnetfold_mpi.so run;
# MPI_LIB overrides the interposer (another build's, for an A/B).
# NETFOLD_CHANNELS, if set, reaches the ranks (docs/host.md, "Channels").
# THREADS=1: also the CPU each thread of the switches' processes took over
# 3 s from the middle of the run ("thread TID:NAME ticks", 100 ticks a second;
# each data plane is a thread), for SECONDS of at least 8.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${BUILD_DIR:-$here/build}" 2>/dev/null && pwd) || {
  echo "side_by_side.sh: no build directory ${BUILD_DIR:-$here/build}" >&2
  exit 2
}
jobs=${1:?JOBS}
np=${2:?RANKS}
op=${3:?OP}
size=${4:?SIZE}
secs=${5:?SECONDS}
flags=${6:-}
lib=${MPI_LIB:-$build/host/mpi/libnetfold_mpi.so}
state=$(mktemp -d "${TMPDIR:-/tmp}/netfold-sbs.XXXXXX")
pids=()
status=0
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  NETFOLD_STATE_DIR=$state "$build/tools/netfold" down >/dev/null 2>&1
  if [ "$status" = 0 ]; then rm -rf "$state"; else echo "logs kept in $state" >&2; fi
}
trap cleanup EXIT
# shellcheck disable=SC2086  # FLAGS is a list of flags
if ! timeout 60 "$build/tools/netfold" up --state-dir "$state" $flags >"$state/up.out" 2>&1; then
  cat "$state/up.out" >&2
  status=1
  exit 1
fi
unset NETFOLD_MANAGER NETFOLD_CREDENTIAL_FILE NETFOLD_TLS_CA  # the fabric's alone
eval "$(grep '^export' "$state/up.out")"
for j in $(seq "$jobs"); do
  timeout $((secs + 120)) mpirun --allow-run-as-root --oversubscribe -np "$np" \
    -x NETFOLD_MANAGER -x NETFOLD_CREDENTIAL_FILE -x NETFOLD_TLS_CA \
    -x LD_PRELOAD="$lib" -x NETFOLD_MPI_ENABLE=1 -x NETFOLD_MPI_MIN_COMM_SIZE=2 ${NETFOLD_CHANNELS:+-x NETFOLD_CHANNELS} \
    "$build/bench/mpi/collective_bench" "$op" "$size" "$secs" >"$state/job$j.out" 2>&1 &
  pids+=($!)
done
if [ "${THREADS:-0}" = 1 ]; then
  sleep $((secs / 2))
  ticks() {  # TID:name utime+stime of every thread of every switch process
    for pid in $(pgrep -f "$build/switch/netfold-switchd"); do
      for t in /proc/"$pid"/task/*; do
        awk -v t="$(basename "$t"):$(tr -d ' ' <"$t/comm" 2>/dev/null)" \
          '{ print t, $14 + $15 }' "$t/stat" 2>/dev/null
      done
    done | sort
  }
  ticks >"$state/t0"
  sleep 3
  ticks >"$state/t1"
  join "$state/t0" "$state/t1" | awk '$3 > $2 { printf "thread %s %d ticks\n", $1, $3 - $2 }'
fi
for p in "${pids[@]}"; do wait "$p" || status=1; done
pids=()
for j in $(seq "$jobs"); do
  awk -F, -v j="$j" '/^[0-9]+,/ { printf "job %d %s %s %s\n", j, $1, $3, $4 }' "$state/job$j.out"
  grep -Eq '^[0-9]+,' "$state/job$j.out" || { echo "job $j failed:" >&2; tail -5 "$state/job$j.out" >&2; status=1; }
done
exit $status
