#!/bin/sh
# Installs every Debian 12 package netfold needs to build, test and benchmark.
# Idempotent and non-interactive: packages already present are left alone.
# Usage: sudo deploy/install-deps.sh   (or as root)
set -eu

PACKAGES="
  build-essential g++ meson ninja-build pkg-config git
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  protobuf-compiler libprotobuf-dev libgrpc++-dev protobuf-compiler-grpc libssl-dev
  zlib1g-dev libisal-dev libyaml-cpp-dev libhwy-dev libsodium-dev
  dpdk-dev libdpdk-dev
  libibverbs-dev librdmacm-dev rdma-core ibverbs-utils
  openmpi-bin libopenmpi-dev
  libtorch-dev python3-torch pybind11-dev
  tshark python3-scapy python3-numpy python3-matplotlib python3-yaml python3-mpi4py
  clang iproute2 nftables procps psmisc
  qemu-system-x86 busybox-static kmod
"

# Soft-RoCE for tests/verbs/rxe_vm_test.py: Debian's kernel (it has
# rdma_rxe) unpacked, not installed, into $RXE_KERNEL_DIR, booted under qemu.
RXE_KERNEL_DIR=/var/cache/netfold/rxe-kernel

missing=""
for p in $PACKAGES; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing="$missing $p"
  fi
done

if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive

if [ -z "$missing" ]; then
  echo "install-deps: all packages already installed"
else
  echo "install-deps: installing:$missing"
  # Answer wireshark's "allow non-root capture" question up front.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
  $SUDO apt-get update -q
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -q --no-install-recommends $missing
fi

# The kernel for the Soft-RoCE VM test. Failing here only makes that test
# skip (with the reason), so it does not stop the installation.
if ! ls "$RXE_KERNEL_DIR"/boot/vmlinuz-* >/dev/null 2>&1; then
  image=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/.*Depends: \(linux-image-[0-9].*\)/\1/p' | head -n 1)
  tmp=$(mktemp -d)
  if [ -n "$image" ] && (cd "$tmp" && $SUDO apt-get download -q "$image" >/dev/null 2>&1); then
    $SUDO mkdir -p "$RXE_KERNEL_DIR"
    $SUDO dpkg-deb -x "$tmp"/"$image"_*.deb "$RXE_KERNEL_DIR"
    version=${image#linux-image-}
    $SUDO depmod -b "$RXE_KERNEL_DIR" "$version"
    echo "install-deps: unpacked $image into $RXE_KERNEL_DIR (Soft-RoCE VM test)"
  else
    echo "install-deps: warning: could not download Debian's kernel image; the Soft-RoCE VM test will skip"
  fi
  rm -rf "$tmp"
fi
echo "install-deps: done"
