#!/bin/sh
# Installs every Debian 12 package netfold needs to build, test and benchmark.
# Idempotent and non-interactive: packages already present are left alone.
# Usage: sudo deploy/install-deps.sh   (or as root)
set -eu

PACKAGES="
  build-essential g++ meson ninja-build pkg-config git
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  protobuf-compiler libprotobuf-dev libgrpc++-dev protobuf-compiler-grpc
  zlib1g-dev libyaml-cpp-dev libhwy-dev
  dpdk-dev libdpdk-dev
  libibverbs-dev librdmacm-dev rdma-core ibverbs-utils
  openmpi-bin libopenmpi-dev
  tshark python3-scapy python3-numpy python3-matplotlib python3-yaml
  clang iproute2 nftables procps psmisc
"

missing=""
for p in $PACKAGES; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing="$missing $p"
  fi
done

if [ -z "$missing" ]; then
  echo "install-deps: all packages already installed"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi

echo "install-deps: installing:$missing"
export DEBIAN_FRONTEND=noninteractive
# Answer wireshark's "allow non-root capture" question up front.
echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing
echo "install-deps: done"
