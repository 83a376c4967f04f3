#!/bin/bash
# A/B of two ways to start the fabric (docs/performance.md, "One process for
# the switches"): collective_bench OP SIZES under mpirun, each round starting
# a fresh private fabric (netfold up, its state in a new directory) with
# FLAGS_A, then with FLAGS_B, so that both see the same machine.
#
#   bench/mpi/fabric_ab.sh OP SIZES ROUNDS "FLAGS_A" "FLAGS_B" [RANKS]
#   bench/mpi/fabric_ab.sh allreduce 8,16384,1048576 3 "--switch-processes one" "--switch-processes each"
#
# Prints per round, variant and size: "a|b SIZE avg_us p50_us". BUILD_DIR
# (default build/) names the build whose netfold and libnetfold_mpi.so run.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${BUILD_DIR:-$here/build}" && pwd)
op=${1:?OP}
sizes=${2:?SIZES}
rounds=${3:?ROUNDS}
flags_a=${4:-}
flags_b=${5:-}
np=${6:-8}
state=""
cleanup() {
  [ -n "$state" ] && NETFOLD_STATE_DIR=$state "$build/tools/netfold" down >/dev/null 2>&1
  [ -n "$state" ] && rm -rf "$state"
  state=""
}
trap cleanup EXIT
for round in $(seq "$rounds"); do
  for v in a b; do
    flags=$flags_a
    [ "$v" = b ] && flags=$flags_b
    state=$(mktemp -d /tmp/netfold-ab.XXXXXX)
    chmod 700 "$state"
    # shellcheck disable=SC2086  # the flags are words
    manager=$(NETFOLD_STATE_DIR=$state timeout 60 "$build/tools/netfold" up --hosts "$np" $flags 2>&1 |
              sed -n 's/^export NETFOLD_MANAGER=//p')
    if [ -z "$manager" ]; then
      echo "fabric_ab: netfold up $flags failed" >&2
      cleanup
      exit 1
    fi
    timeout 600 mpirun --allow-run-as-root --oversubscribe -np "$np" \
        -x NETFOLD_MANAGER="$manager" -x NETFOLD_CREDENTIAL_FILE="$state/credential" \
        -x NETFOLD_TLS_CA="$state/ca.pem" -x LD_PRELOAD="$build/host/mpi/libnetfold_mpi.so" \
        -x NETFOLD_MPI_ENABLE=1 -x NETFOLD_MPI_MIN_COMM_SIZE=2 "$build/bench/mpi/collective_bench" "$op" "$sizes" 2 2>/dev/null |
      grep -E '^[0-9]+,' | awk -F, -v v="$v" '{printf "%s %s %s %s\n", v, $1, $3, $4}'
    cleanup
  done
done
