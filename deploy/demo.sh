#!/bin/sh
# Installs the dependencies, builds netfold, and runs the demo: a local fabric
# on loopback doing real aggregations, every result checked bitwise.
# Usage: deploy/demo.sh [demo arguments, e.g. --hosts 4 --faults]
set -eu
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}

deploy/install-deps.sh
[ -f "$BUILD_DIR/build.ninja" ] || meson setup "$BUILD_DIR"
ninja -C "$BUILD_DIR"

exec "$BUILD_DIR/tools/netfold" demo "$@"
