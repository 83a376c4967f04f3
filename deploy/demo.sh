#!/bin/sh
# Installs the dependencies, builds netfold, and runs the demo: a local fabric
# on loopback doing real aggregations, every result checked bitwise.
# Usage: deploy/demo.sh [demo arguments, e.g. --hosts 4 --faults]
set -eu
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}

deploy/install-deps.sh
[ -d "$BUILD_DIR" ] || meson setup "$BUILD_DIR"
ninja -C "$BUILD_DIR"

if [ -x "$BUILD_DIR/tools/netfold" ]; then
  exec "$BUILD_DIR/tools/netfold" demo "$@"
fi
# The end-to-end demo needs switch/, manager/ and host/ (issues 5-7). Until it
# lands, show what exists: the unit tests of the layers built so far.
echo "netfold demo is not built yet; running the unit suite instead."
exec meson test -C "$BUILD_DIR" --suite unit
