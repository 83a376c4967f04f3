#!/bin/sh
# The torch.distributed backends netfold and gloo, all_reduce at each size
# on 4 and 8 ranks (docs/performance.md, "PyTorch: netfold against gloo").
# Starts a fabric of its own (netfold up, in a private state directory) and
# always stops it.
#
#   bench/torch/run_torch_bench.sh [RANKS] [SIZES] [SECONDS] [--gloo-only]
#   bench/torch/run_torch_bench.sh 4,8 8,65536,1048576,16777216 1
#
# Environment: BUILD_DIR (default build); TORCH_BENCH_WAIT=future: each
# call async_op=True and a wait on its future (DDP's way). Prints the lines of
# torch_allreduce_bench.py (ratio = netfold / gloo, same run); with
# --gloo-only, the control run: jobs of gloo alone.
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$here/build}
ranks=${1:-4,8}
sizes=${2:-8,65536,1048576,16777216}
seconds=${3:-1}
only=${4:-}
max_ranks=$(echo "$ranks" | tr ',' '\n' | sort -n | tail -n 1)
# 77: "skipped" to meson (torch_bench_smoke_test), a failure to anyone else.
ls "$build"/host/torch/netfold_torch*.so >/dev/null 2>&1 || {
  echo "run_torch_bench: netfold_torch is not built in $build (docs/pytorch.md)" >&2; exit 77; }
state=$(mktemp -d "${TMPDIR:-/tmp}/netfold-torch-bench.XXXXXX")
cleanup() {
  "$build/tools/netfold" down --state-dir "$state" >/dev/null 2>&1 || true
  rm -rf "$state"
}
trap cleanup EXIT INT TERM
up=$("$build/tools/netfold" up --hosts "$max_ranks" --state-dir "$state")
NETFOLD_MANAGER=$(echo "$up" | sed -n 's/^export NETFOLD_MANAGER=//p')
NETFOLD_CREDENTIAL_FILE=$(echo "$up" | sed -n 's/^export NETFOLD_CREDENTIAL_FILE=//p')
NETFOLD_TLS_CA=$(echo "$up" | sed -n 's/^export NETFOLD_TLS_CA=//p')
export NETFOLD_MANAGER NETFOLD_CREDENTIAL_FILE NETFOLD_TLS_CA
export PYTHONPATH="$build/host/torch${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1
for n in $(echo "$ranks" | tr ',' ' '); do
  logs="$state/torchrun-$n"
  # --redirects 1 --tee 1: torch 1.13's torchrun cannot parse its default
  # "0" under Python 3.11 (docs/pytorch.md).
  timeout 1800 /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node "$n" \
    --redirects 1 --tee 1 --log_dir "$logs" "$here/bench/torch/torch_allreduce_bench.py" \
    --sizes "$sizes" --seconds "$seconds" --wait "${TORCH_BENCH_WAIT:-blocking}" $only 2>/dev/null | sed -n 's/^\[default0\]://p' | grep '^torch_bench'
done
