#!/bin/sh
# Installs netfold into a temporary DESTDIR, builds examples/hello_netfold.c
# against the installed header and library through pkg-config (nothing from
# the source tree), and runs it against a fabric started by the installed
# `netfold up`. Usage: installed_library_test.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1
src=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/netfold-install.XXXXXX")
state="$tmp/state"
cleanup() {
  if [ -x "$tmp/bin/netfold" ]; then "$tmp/bin/netfold" down --state-dir "$state" >/dev/null 2>&1 || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

DESTDIR="$tmp/root" meson install -C "$build" --no-rebuild --quiet
prefix=$(meson introspect "$build" --buildoptions | /usr/bin/python3 -c \
  'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"][0])')
libdir=$(meson introspect "$build" --buildoptions | /usr/bin/python3 -c \
  'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="libdir"][0])')
root="$tmp/root$prefix"
pcdir="$root/$libdir/pkgconfig"
[ -f "$pcdir/netfold.pc" ] || { echo "FAIL: no netfold.pc installed in $pcdir"; exit 1; }
[ -f "$root/include/netfold/netfold.h" ] || { echo "FAIL: netfold/netfold.h not installed"; exit 1; }
for b in netfold netfold-managerd netfold-switchd; do
  [ -x "$root/bin/$b" ] || { echo "FAIL: $b not installed"; exit 1; }
done
mkdir -p "$tmp/bin"
cp "$root/bin/netfold" "$root/bin/netfold-managerd" "$root/bin/netfold-switchd" "$tmp/bin/"

flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --define-variable=prefix="$root" --cflags --libs netfold)
# -I/-L only from pkg-config: the source tree is not on any path.
cc -std=c99 -Wall -Wextra -Werror "$src/examples/hello_netfold.c" $flags -o "$tmp/hello_netfold"
cat > "$tmp/hello.cc" <<'CPP'
#include <netfold/netfold.hpp>
int main() { return netfold::DtypeOf<float>() == NETFOLD_DTYPE_FP32 ? 0 : 1; }
CPP
c++ -std=c++20 -Wall -Werror "$tmp/hello.cc" $flags -o "$tmp/hello_cc"
"$tmp/hello_cc"

up=$("$tmp/bin/netfold" up --hosts 1 --state-dir "$state")
manager=$(echo "$up" | sed -n 's/^export NETFOLD_MANAGER=//p')
[ -n "$manager" ] || { echo "FAIL: netfold up printed no manager:"; echo "$up"; exit 1; }
credential=$(echo "$up" | sed -n 's/^export NETFOLD_CREDENTIAL_FILE=//p')
[ -n "$credential" ] || { echo "FAIL: netfold up printed no credential file:"; echo "$up"; exit 1; }
ca=$(echo "$up" | sed -n 's/^export NETFOLD_TLS_CA=//p')
out=$(NETFOLD_MANAGER="$manager" NETFOLD_CREDENTIAL_FILE="$credential" NETFOLD_TLS_CA="$ca" \
      LD_LIBRARY_PATH="$root/$libdir" \
      timeout 60 "$tmp/hello_netfold")
echo "$out"
echo "$out" | grep -q "ok" || { echo "FAIL: the example did not succeed"; exit 1; }
LD_LIBRARY_PATH="$root/$libdir" ldd "$tmp/hello_netfold" | grep -q "$root/$libdir/libnetfold.so" || {
  echo "FAIL: the example did not run against the installed library"; ldd "$tmp/hello_netfold"; exit 1; }

# The init spec's fields win over the environment: a spec that names the
# local address runs whatever NETFOLD_LOCAL_ADDRESS says.
sed '/NETFOLD_INIT_SPEC_INITIALIZER;/a spec.local_address = "127.0.0.1";' \
  "$src/examples/hello_netfold.c" > "$tmp/hello_address.c"
grep -q 'spec.local_address' "$tmp/hello_address.c" || { echo "FAIL: could not set the spec's address"; exit 1; }
cc -std=c99 -Wall -Wextra -Werror "$tmp/hello_address.c" $flags -o "$tmp/hello_address"
out=$(NETFOLD_MANAGER="$manager" NETFOLD_CREDENTIAL_FILE="$credential" NETFOLD_TLS_CA="$ca" \
      NETFOLD_LOCAL_ADDRESS=not-an-address LD_LIBRARY_PATH="$root/$libdir" \
      timeout 60 "$tmp/hello_address" 2>&1) || true
echo "$out" | grep -q "ok" || { echo "FAIL: NETFOLD_LOCAL_ADDRESS won over the spec:"; echo "$out"; exit 1; }

# From the build tree, not installed, as README.md says.
flags=$(PKG_CONFIG_PATH="$build/meson-uninstalled" pkg-config --cflags --libs netfold-uninstalled)
cc -std=c99 -Wall -Wextra -Werror "$src/examples/hello_netfold.c" $flags \
  -Wl,-rpath,"$(cd "$build" && pwd)/host" -o "$tmp/hello_tree"
out=$(NETFOLD_MANAGER="$manager" NETFOLD_CREDENTIAL_FILE="$credential" NETFOLD_TLS_CA="$ca" \
      timeout 60 "$tmp/hello_tree")
echo "$out" | grep -q "ok" || { echo "FAIL: the example built against the tree did not succeed"; exit 1; }
echo "PASS: built and ran against the installed libnetfold via pkg-config, and against the tree"
