#!/bin/bash
# A/B of libnetfold's progress thread on the fast path (docs/performance.md,
# "libnetfold's progress thread"): 8-byte and 1 MiB allreduces under mpirun,
# variants alternating in every round.
#
#   build/tools/netfold up --hosts 8      # prints NETFOLD_MANAGER=..., NETFOLD_CREDENTIAL_FILE=...
#   NETFOLD_MANAGER=... NETFOLD_CREDENTIAL_FILE=... bench/mpi/progress_ab.sh [BASE_LIBNETFOLD_MPI] [ROUNDS] [RANKS]
#
# Variants: base (another build's libnetfold_mpi.so, if given), thread (this
# build, default), off (this build, NETFOLD_PROGRESS_THREAD=0). Prints per
# round and variant: size,avg_us,p50_us for each size.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$here/build}
base=${1:-}
rounds=${2:-5}
np=${3:-8}
: "${NETFOLD_MANAGER:?start a fabric with netfold up and export NETFOLD_MANAGER}"
: "${NETFOLD_CREDENTIAL_FILE:?export the NETFOLD_CREDENTIAL_FILE netfold up printed}"
lib=$build/host/mpi/libnetfold_mpi.so
variants="thread off"
[ -n "$base" ] && variants="base $variants"
for round in $(seq "$rounds"); do
  for v in $variants; do
    use=$lib pt=1
    [ "$v" = base ] && use=$base
    [ "$v" = off ] && pt=0
    res=$(timeout 300 mpirun --allow-run-as-root --oversubscribe -np "$np" \
            -x NETFOLD_MANAGER -x NETFOLD_CREDENTIAL_FILE -x LD_PRELOAD="$use" -x NETFOLD_MPI_ENABLE=1 -x NETFOLD_MPI_MIN_COMM_SIZE=2 \
            -x NETFOLD_SLOTS=32 -x NETFOLD_SLOT_BYTES=4032 -x NETFOLD_PROGRESS_THREAD=$pt \
            "$build/bench/mpi/collective_bench" allreduce 8,1048576 1.0 2>/dev/null |
          grep -E '^[0-9]+,' | cut -d, -f1,3,4 | tr '\n' ' ')
    echo "round $round $v: $res"
  done
done
