#!/usr/bin/python3
"""rxe_vm_test: libnetfold's verbs transport against Soft-RoCE, in a VM.

This project's machines have no RDMA device and no kernel modules, but
Debian's kernel has rdma_rxe. So the test boots that kernel (the package
deploy/install-deps.sh unpacks into /var/cache/netfold/rxe-kernel) under
qemu, with this machine's root file system as the VM's, read-only through
9p with a tmpfs overlay on top: the VM runs the very binaries of the build
directory. Inside (this script with --inner):

  root namespace                           namespace "sw"
  rxe0 on veth0 10.77.0.1  <--- veth --->  veth1 10.77.0.2
  netfold-managerd 10.77.0.1:47910         netfold-switchd leaf0 10.77.0.2:4791
  ranks h0, h1: NETFOLD_TRANSPORT=verbs     (backend udp, ip_identification: solve)

(rdma_rxe's UDP socket lives in the root namespace of a 6.1 kernel, so the
ranks stay there and the switch moves out.) It runs verbs_leaf_link_test
(the device test) and verbs_fabric_test (the full sweep of collectives,
results by multicast and over RC, NETFOLD_ALGORITHM=innetwork), prints the
switch's and the device's counters, and reports back on the serial console.

  rxe_vm_test.py --build build [--kernel-dir DIR] [--timeout 900]

Exit status: 0 passed, 1 failed, 77 skipped (no qemu, busybox or kernel
package: the reason is printed). Every wait has a deadline; the VM is
killed at --timeout and powers itself off otherwise.
"""

import argparse
import glob
import gzip
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77
DEFAULT_KERNEL_DIR = "/var/cache/netfold/rxe-kernel"
MODULES = ["virtio_pci", "9pnet_virtio", "9p", "overlay", "veth", "crc32_generic",
           "rdma_rxe", "rdma_ucm"]
EXIT_MARK = "NETFOLD-VM-EXIT"
ANSI_ESCAPE = re.compile(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|[@-Z\\-_]|c)")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
HOST_IP, SWITCH_IP = "10.77.0.1", "10.77.0.2"
MANAGER = f"{HOST_IP}:47910"
SLOT_BYTES = 976  # 40 + 976 fits rxe's 1024-byte path MTU on a 1500-byte veth

INIT = """#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev
for m in $(cat /modules/order); do insmod /modules/$m || echo "insmod $m failed"; done
mkdir -p /lower /rw; mount -t tmpfs tmpfs /rw; mkdir -p /rw/upper /rw/work
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot /lower || echo "9p mount failed"
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot || echo "overlay failed"
for d in proc sys dev; do mount --bind /$d /newroot/$d; done
mount -t tmpfs tmpfs /newroot/run; mkdir -p /newroot/run/netns
chroot /newroot /usr/bin/python3 {script} --inner --build {build}
echo {mark} $?
poweroff -f
"""


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(SKIP)


def find_kernel(kernel_dir):
    images = sorted(glob.glob(os.path.join(kernel_dir, "boot", "vmlinuz-*")))
    if not images:
        skip(f"no kernel in {kernel_dir}/boot (deploy/install-deps.sh unpacks Debian's "
             "linux-image package there)")
    version = os.path.basename(images[-1])[len("vmlinuz-"):]
    modules = os.path.join(kernel_dir, "lib", "modules", version)
    if not os.path.exists(os.path.join(modules, "modules.dep")):
        skip(f"{modules}/modules.dep is missing (run depmod -b {kernel_dir} {version})")
    return images[-1], modules


def module_closure(modules_dir):
    deps = {}
    with open(os.path.join(modules_dir, "modules.dep")) as f:
        for line in f:
            key, _, rest = line.partition(":")
            deps[key] = rest.split()
    by_name = {os.path.basename(k).split(".ko")[0].replace("-", "_"): k for k in deps}
    order = []

    def visit(path):
        if path in order:
            return
        for d in reversed(deps[path]):
            visit(d)
        order.append(path)

    for name in MODULES:
        if name not in by_name:
            skip(f"the kernel package has no module {name}")
        visit(by_name[name])
    return order


def cpio_newc(entries):
    """A gzip'd newc cpio archive of (name, mode, data) entries."""
    out = io.BytesIO()
    for ino, (name, mode, data) in enumerate(entries + [("TRAILER!!!", 0, b"")], start=1):
        name_bytes = name.encode() + b"\0"
        header = "070701" + "".join(f"{v:08x}" for v in (
            ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name_bytes), 0))
        out.write(header.encode() + name_bytes)
        out.write(b"\0" * ((4 - (110 + len(name_bytes)) % 4) % 4))
        out.write(data)
        out.write(b"\0" * ((4 - len(data) % 4) % 4))
    return gzip.compress(out.getvalue(), compresslevel=1)


def build_initramfs(modules_dir, script, build, path):
    busybox = shutil.which("busybox")
    with open(busybox, "rb") as f:
        bb = f.read()  # busybox-static: nothing else exists before the 9p mount
    dirs = ["bin", "dev", "proc", "sys", "newroot", "modules", "lower", "rw"]
    entries = [(d, 0o040755, b"") for d in dirs]
    entries.append(("bin/busybox", 0o100755, bb))
    order = module_closure(modules_dir)
    names = []
    for rel in order:
        with open(os.path.join(modules_dir, rel), "rb") as f:
            entries.append((f"modules/{os.path.basename(rel)}", 0o100644, f.read()))
        names.append(os.path.basename(rel))
    entries.append(("modules/order", 0o100644, ("\n".join(names) + "\n").encode()))
    init = INIT.format(script=script, build=build, mark=EXIT_MARK)
    entries.append(("init", 0o100755, init.encode()))
    with open(path, "wb") as f:
        f.write(cpio_newc(entries))


def outer(args):
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        skip("qemu-system-x86_64 is not installed (Debian: qemu-system-x86)")
    if shutil.which("busybox") is None:
        skip("busybox is not installed (Debian: busybox-static)")
    build = os.path.abspath(args.build)
    for rel in ("host/link/verbs_leaf_link_test", "tests/verbs/verbs_fabric_test",
                "switch/netfold-switchd", "manager/netfold-managerd", "tests/host/fabric_rank"):
        if not os.access(os.path.join(build, rel), os.X_OK):
            skip(f"{build}/{rel} is not built")
    kernel, modules = find_kernel(args.kernel_dir)
    script = os.path.abspath(__file__)
    with tempfile.TemporaryDirectory(prefix="netfold-rxe-vm-") as tmp:
        initrd = os.path.join(tmp, "initrd.gz")
        build_initramfs(modules, script, build, initrd)
        argv = [qemu, "-accel", "tcg", "-cpu", "max", "-m", "2048", "-smp", "2", "-nographic", "-no-reboot",
                "-kernel", kernel, "-initrd", initrd,
                "-append", "console=ttyS0 panic=-1 loglevel=4",
                "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,"
                           "multidevs=remap",
                "-nic", "none"]
        print(f"booting {os.path.basename(kernel)} under qemu (TCG); the VM's console follows",
              flush=True)
        start = time.monotonic()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        status = None
        try:
            deadline = start + args.timeout
            for raw in proc.stdout:
                line = raw.decode(errors="replace").rstrip("\r\n")
                # The firmware's and gtest's terminal escapes, and any other
                # control character: the test log is text (and XML).
                line = CONTROL.sub("", ANSI_ESCAPE.sub("", line))
                print(line, flush=True)
                if line.startswith(EXIT_MARK):
                    status = int(line.split()[1])
                if time.monotonic() > deadline:
                    print(f"FAIL: the VM did not finish within {args.timeout} s")
                    break
        finally:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
        print(f"VM ran {time.monotonic() - start:.0f} s")
        if status is None:
            print("FAIL: the VM ended without reporting a result")
            return 1
        return 0 if status == 0 else 1


def sh(*argv, check=True, ns=None, timeout=30):
    if ns is not None:
        argv = ("ip", "netns", "exec", ns) + argv
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


TOPOLOGY = f"""name: rxe-vm
defaults:
  capacity: {{trees: 8, groups: 16, slots: 128, slot_bytes: {SLOT_BYTES}, qps: 64}}
switches:
  - {{name: leaf0, tier: 0}}
hosts:
  - {{name: h0, switch: leaf0}}
  - {{name: h1, switch: leaf0}}
"""

SWITCH_CONFIG = f"""name: leaf0
data_address: {SWITCH_IP}:4791
manager: {MANAGER}
admin_address: {SWITCH_IP}:47920
log_level: info
capacity: {{trees: 8, groups: 16, slots: 128, slot_bytes: {SLOT_BYTES}, qps: 64}}
transport: {{path_mtu: 1024, ip_identification: solve}}
"""

# Liveness is not what this test checks, and the VM's vCPUs are threads of
# a host that runs the rest of the suite beside it: with the defaults (a
# switch dead after 2 s without a heartbeat) a VM starved while the testbed
# test ran alongside lost its switch in the middle of the sweep (the switch
# took 7 s to register that run). The manager here waits longer.
MANAGER_CONFIG = """heartbeat_interval_ms: 500
switch_timeout_ms: 10000
host_timeout_ms: 15000
"""


def inner(args):
    build = args.build
    sh("ip", "link", "set", "lo", "up")
    sh("ip", "link", "add", "veth0", "type", "veth", "peer", "name", "veth1")
    sh("ip", "netns", "add", "sw")
    sh("ip", "link", "set", "veth1", "netns", "sw")
    sh("ip", "addr", "add", f"{HOST_IP}/24", "dev", "veth0")
    sh("ip", "link", "set", "veth0", "up")
    sh("ip", "-n", "sw", "addr", "add", f"{SWITCH_IP}/24", "dev", "veth1")
    sh("ip", "-n", "sw", "link", "set", "veth1", "up")
    sh("ip", "-n", "sw", "link", "set", "lo", "up")
    sh("ip", "-n", "sw", "route", "add", "224.0.0.0/4", "dev", "veth1")
    sh("rdma", "link", "add", "rxe0", "type", "rxe", "netdev", "veth0")
    print(sh("rdma", "link", "show"), flush=True)
    with open("/tmp/topology.yaml", "w") as f:
        f.write(TOPOLOGY)
    with open("/tmp/switchd.yaml", "w") as f:
        f.write(SWITCH_CONFIG)
    with open("/tmp/manager.yaml", "w") as f:
        f.write(MANAGER_CONFIG)
    # The fabric credential (docs/security.md): the daemons, netfold status
    # and the ranks read the file this names.
    fd = os.open("/tmp/credential", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    os.environ["NETFOLD_CREDENTIAL_FILE"] = "/tmp/credential"
    # The control plane over TLS, as netfold up runs it: a CA for this fabric
    # and a certificate for the manager's and the switch's admin addresses.
    sh(f"{build}/tools/netfold", "certs", "--out", "/tmp/tls", "--hosts", f"{HOST_IP},{SWITCH_IP}")
    os.environ["NETFOLD_TLS_CA"] = "/tmp/tls/ca.pem"
    logs = {"manager": open("/tmp/manager.log", "w"), "switch": open("/tmp/switch.log", "w")}
    procs = [
        subprocess.Popen([f"{build}/manager/netfold-managerd", "--topology", "/tmp/topology.yaml",
                          "--listen", MANAGER, "--log_level", "info", "--tls_dir", "/tmp/tls",
                          "--config", "/tmp/manager.yaml"],
                         stdout=logs["manager"], stderr=subprocess.STDOUT),
        subprocess.Popen(["ip", "netns", "exec", "sw", f"{build}/switch/netfold-switchd",
                          "--config", "/tmp/switchd.yaml", "--tls_dir", "/tmp/tls"],
                         stdout=logs["switch"], stderr=subprocess.STDOUT),
    ]
    failed = []
    try:
        deadline = time.monotonic() + 30
        while True:
            status = subprocess.run([f"{build}/tools/netfold", "status", "--manager", MANAGER],
                                    capture_output=True, text=True, timeout=30).stdout
            if "leaf0" in status and " up" in status:
                break
            if time.monotonic() > deadline:
                print(status)
                raise RuntimeError("the switch did not register with the manager within 60 s")
            time.sleep(0.5)
        env = dict(os.environ, NETFOLD_TEST_VERBS_MANAGER=MANAGER,
                   NETFOLD_TEST_VERBS_ADDRESS=HOST_IP, NETFOLD_TEST_VERBS_SLOT_BYTES=str(SLOT_BYTES))
        for test in ("host/link/verbs_leaf_link_test", "tests/verbs/verbs_fabric_test"):
            print(f"=== {test}", flush=True)
            r = subprocess.run([f"{build}/{test}"], env=env, timeout=600)
            if r.returncode != 0:
                failed.append(test)
        print("=== the switch's counters", flush=True)
        subprocess.run([f"{build}/tools/netfold", "status", "--manager", MANAGER, "--switch",
                        "leaf0"], timeout=30)
        print("=== the device's counters", flush=True)
        subprocess.run(["rdma", "statistic", "show", "link", "rxe0/1"], timeout=30)
    except Exception as e:  # noqa: BLE001 - report anything, then clean up
        print(f"FAIL: {e}")
        failed.append("setup")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        if failed:
            for name, f in logs.items():
                f.close()
                print(f"=== {name} log (tail)")
                with open(f"/tmp/{name}.log") as log:
                    print("".join(log.readlines()[-40:]))
    print("FAILED: " + ", ".join(failed) if failed else "PASSED", flush=True)
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", required=True, help="the meson build directory")
    parser.add_argument("--kernel-dir", default=os.environ.get("NETFOLD_RXE_KERNEL",
                                                               DEFAULT_KERNEL_DIR))
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    return inner(args) if args.inner else outer(args)


if __name__ == "__main__":
    sys.exit(main())
