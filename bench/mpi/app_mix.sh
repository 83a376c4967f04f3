#!/bin/bash
# The application mix (bench/mpi/app_mix.cc) on netfold and on Open MPI
# alone, the variants alternated (docs/performance.md):
#
#   bench/mpi/app_mix.sh [BUILD_DIR] [ITERATIONS] [ROUNDS] [RANKS]
#
# Defaults: build, 1500 iterations, 2 rounds, 8 ranks. VARIANTS (default
# "netfold netfold-tcp netfold-min2 ompi ompi-tcp") names what runs, in
# this order each round:
#   netfold       libnetfold_mpi.so preloaded, its defaults, on a fresh
#                 `netfold up --hosts RANKS` (Open MPI's shared memory
#                 carries what stays on MPI)
#   netfold-tcp   the same, Open MPI over TCP (--mca btl tcp,self)
#   netfold-min2  the same as netfold, NETFOLD_MPI_MIN_COMM_SIZE=2
#   ompi          Open MPI alone (shared memory); ompi-tcp: over TCP
# MPIRUN_ARGS: more mpirun arguments for every job (split on spaces, e.g.
# "-x NETFOLD_MPI_RETRY_AFTER=100").
# FAULT=1: in the netfold variants leaf0 is cut (netfold fault leaf0
# down=1) 6 s after the job starts and healed 5 s later. A job still
# running after DEADLINE_S (default 300) is reported HUNG, with every
# rank's stacks in $STACKS_DIR (default /tmp) if gdb is installed, and
# killed. One line per job:
#   VARIANT ROUND loop T s digest D [FAILOVER]   (or HUNG, or FAILED with the exit code)
# FAILOVER: the netfold variants' failover lines of NETFOLD_MPI_STATS=1
# (bytes reduced again, recoveries joined while waiting in another).
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
iterations=${2:-1500}
rounds=${3:-2}
np=${4:-8}
variants=${VARIANTS:-netfold netfold-tcp netfold-min2 ompi ompi-tcp}
deadline=${DEADLINE_S:-300}
netfold=$build/tools/netfold
state=""
cleanup() {
  if [ -n "$state" ]; then
    NETFOLD_STATE_DIR=$state "$netfold" down >/dev/null 2>&1
    rm -rf "$state"
    state=""
  fi
}
trap cleanup EXIT

run() {  # VARIANT ROUND
  local variant=$1 round=$2 env=() mca=() out pid
  case $variant in
    netfold | netfold-tcp | netfold-min2)
      state=$(mktemp -d /tmp/netfold-app.XXXXXX)
      chmod 700 "$state"
      NETFOLD_STATE_DIR=$state "$netfold" up --hosts "$np" >"$state/up.out" 2>&1 ||
        { echo "$variant $round FAILED: netfold up: $(tail -1 "$state/up.out")"; cleanup; return; }
      env=(-x NETFOLD_MANAGER="$(sed -n 's/^export NETFOLD_MANAGER=//p' "$state/up.out")"
           -x NETFOLD_CREDENTIAL_FILE="$state/credential" -x NETFOLD_TLS_CA="$state/ca.pem"
           -x LD_PRELOAD="$build/host/mpi/libnetfold_mpi.so" -x NETFOLD_MPI_STATS=1)
      [ "$variant" = netfold-min2 ] && env+=(-x NETFOLD_MPI_MIN_COMM_SIZE=2)
      [ "$variant" = netfold-tcp ] && mca=(--mca btl tcp,self) ;;
    ompi) ;;
    ompi-tcp) mca=(--mca btl tcp,self) ;;
    *) echo "unknown variant $variant" >&2; exit 2 ;;
  esac
  out=$(mktemp /tmp/netfold-app-out.XXXXXX)
  # shellcheck disable=SC2086 # MPIRUN_ARGS is split on purpose
  setsid mpirun --allow-run-as-root --oversubscribe -np "$np" "${mca[@]}" "${env[@]}" ${MPIRUN_ARGS:-} \
    "$build/bench/mpi/app_mix" "$iterations" >"$out" 2>&1 &
  pid=$!
  local started=$SECONDS faulted=0
  while kill -0 "$pid" 2>/dev/null && [ $((SECONDS - started)) -lt "$deadline" ]; do
    if [ "${FAULT:-0}" = 1 ] && [ -n "$state" ]; then
      if [ $faulted = 0 ] && [ $((SECONDS - started)) -ge 6 ]; then
        NETFOLD_STATE_DIR=$state "$netfold" fault leaf0 down=1 >/dev/null 2>&1; faulted=1
      elif [ $faulted = 1 ] && [ $((SECONDS - started)) -ge 11 ]; then
        NETFOLD_STATE_DIR=$state "$netfold" fault leaf0 none >/dev/null 2>&1; faulted=2
      fi
    fi
    sleep 1
  done
  if kill -0 "$pid" 2>/dev/null; then
    local stacks=${STACKS_DIR:-/tmp}/app-mix-stacks.$variant.$round.$$
    if command -v gdb >/dev/null; then
      for p in $(pgrep -s "$pid" -x app_mix); do
        gdb -batch -ex "thread apply all bt 30" -p "$p" >>"$stacks" 2>&1
      done
    fi
    kill -- -"$pid" 2>/dev/null; sleep 1; kill -9 -- -"$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    echo "$variant $round HUNG after $deadline s (stacks: $stacks)"
  elif wait "$pid"; then
    echo "$variant $round $(grep '^loop' "$out") $(sed -n 's/^ *failover: //p' "$out" | tr '\n' ' ')"
  else
    echo "$variant $round FAILED (exit $?): $(tail -3 "$out" | tr '\n' ' ')"
  fi
  rm -f "$out"
  cleanup
}

for round in $(seq "$rounds"); do
  for v in $variants; do run "$v" "$round"; done
done
