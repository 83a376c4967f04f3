"""Commands and network namespaces: running ip/tc with a deadline, running a
Python function inside a namespace (setns in a forked child), and listing
what exists (namespaces, their processes, the root namespace's links).
"""

import ctypes
import errno
import json
import os
import re
import select
import shlex
import signal
import socket
import struct
import subprocess
import time

from .errors import TestbedError

CLONE_NEWNET = 0x40000000
SIOCETHTOOL = 0x8946
ETHTOOL_STXCSUM, ETHTOOL_STSO, ETHTOOL_SGSO = 0x17, 0x1F, 0x24
COMMAND_TIMEOUT = 20        # seconds, any ip/tc command


def run(argv, check=True, timeout=COMMAND_TIMEOUT):
    """Runs argv; returns CompletedProcess. TestbedError if it fails and check."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise TestbedError(f"{argv[0]} is not installed (deploy/install-deps.sh)")
    except subprocess.TimeoutExpired:
        raise TestbedError(f"`{shlex.join(argv)}` did not finish within {timeout} s")
    if check and p.returncode != 0:
        raise TestbedError(f"`{shlex.join(argv)}` failed: {(p.stderr or p.stdout).strip()}")
    return p


def ip(*args, ns=None, check=True):
    argv = ["ip"] + (["-n", ns] if ns else []) + list(args)
    return run(argv, check=check)


_libc = None


def _setns(ns):
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"setns {ns}: {os.strerror(e)}")
    finally:
        os.close(fd)


def in_netns(ns, fn, timeout=COMMAND_TIMEOUT):
    """Runs fn() in a child process that entered namespace ns; returns its
    JSON-serialisable result. No threads here, so fork is safe."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            _setns(ns)
            out = {"ok": fn()}
        except BaseException as e:  # reported to the parent
            out = {"error": str(e) or type(e).__name__}
            code = 1
        try:
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(code)
    os.close(w)
    data = b""
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                raise TestbedError(f"a helper in namespace {ns} did not finish within {timeout} s")
            ready, _, _ = select.select([r], [], [], left)
            if ready:
                chunk = os.read(r, 65536)
                if not chunk:
                    break
                data += chunk
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    try:
        out = json.loads(data.decode() or "{}")
    except ValueError:
        out = {}
    if "ok" not in out:
        raise TestbedError(f"in namespace {ns}: {out.get('error', 'the helper died')}")
    return out["ok"]


def _sysctl_write(path, value):
    with open(path, "w") as f:
        f.write(value)


def disable_offloads(ifnames):
    """As `ethtool -K IF tx off tso off gso off`: a user-space switch forwards
    frames as the kernel handed them, so they must carry finished checksums
    and no GSO super-frames (docs/dpdk.md)."""
    fd = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for name in ifnames:
            for cmd in (ETHTOOL_STXCSUM, ETHTOOL_STSO, ETHTOOL_SGSO):
                value = ctypes.create_string_buffer(struct.pack("II", cmd, 0))
                ifreq = struct.pack("16sP", name.encode(), ctypes.addressof(value))
                try:
                    import fcntl
                    fcntl.ioctl(fd.fileno(), SIOCETHTOOL, ifreq)
                except OSError as e:
                    if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                        raise
    finally:
        fd.close()
    return True


def prepare_namespace(ifnames):
    """Inside a fresh namespace: IPv6 off (no router solicitations, DAD or
    MLD noise on the links), offloads off on the data interfaces."""
    for key in ("all", "default"):
        _sysctl_write(f"/proc/sys/net/ipv6/conf/{key}/disable_ipv6", "1")
    return disable_offloads(ifnames)


def list_namespaces():
    p = run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in p.stdout.splitlines() if line.strip()]


def namespace_pids(ns):
    p = run(["ip", "netns", "pids", ns], check=False)
    return [int(x) for x in p.stdout.split() if x.isdigit()]


def root_links():
    p = run(["ip", "-o", "link", "show"], check=False)
    names = []
    for line in p.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


def ROOT_LINK_RE(prefix):
    return re.compile(rf"^{re.escape(prefix)}(m\d+|br)$")
