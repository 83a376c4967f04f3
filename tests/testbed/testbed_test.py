#!/usr/bin/python3
"""The netns testbed end to end (suite testbed, docs/testbed.md).

For each backend (dpdk with net_af_packet, then udp with Linux bridges) it
builds deploy/topologies/testbed_two_level.yaml with netfold-testbed (a
spine over two leaves, 8 host namespaces), then checks:

  1. ping between hosts on different leaves, and to the switches, through
     the emulated switches (and, with dpdk, that the spine's DPDK bridge
     forwarded frames: the traffic really crossed the user-space switch);
  2. an MPI job across the 8 host namespaces with libnetfold_mpi.so
     preloaded (tests/mpi/mpi_collectives: every result checked bitwise
     against a reference each rank computes, NETFOLD_MPI_ENABLE=1 so that a
     fabric failure is an error, not a silent fallback) exits 0 with 0
     failed checks and reports offloaded collectives; with the udp
     backend also 2 and 4 ranks in each of two host namespaces
     (--ranks-per-host), through the interposer's node hierarchy, which
     must leave the hosts' other ranks' links idle (checked in the job);
  3. the switches' own counters (SwitchAdmin GetCounters) show the
     aggregation: messages received on every switch, results multicast by
     the spine, operations reduced there;
  4. `down` leaves no namespace, link or process behind.

Exit status: 0 passed, 1 failed, 77 skipped (not root, no DPDK build, no
net_af_packet, no mpirun, ...), with the reason printed. Everything it
makes carries the prefix ntb<pid>; `down` runs in a finally block, and a
reaper process runs it if this process dies (SIGKILL); leftovers of dead
earlier runs are removed first.
"""

import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

SKIP = 77
UP_TIMEOUT = 90         # seconds for `up` (its own waits are 30 s each)
MPI_TIMEOUT = 240       # seconds for one MPI job
DOWN_TIMEOUT = 60


class Failure(Exception):
    pass


class Killed(BaseException):
    pass


def say(message):
    print(f"[testbed_test {time.strftime('%H:%M:%S')}] {message}", flush=True)


def skip(reason):
    print(f"SKIP: {reason}", flush=True)
    sys.exit(SKIP)


def run(argv, timeout, check=True, env=None):
    say("$ " + " ".join(argv))
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env,
                           stdin=subprocess.DEVNULL,
                           start_new_session=True)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        raise Failure(f"`{' '.join(argv)}` did not finish within {timeout} s:\n{out[-3000:]}")
    if check and p.returncode != 0:
        raise Failure(f"`{' '.join(argv)}` exited {p.returncode}:\n{p.stdout[-3000:]}\n"
                      f"{p.stderr[-3000:]}")
    return p


def check_prerequisites(args):
    if os.geteuid() != 0:
        skip("needs root (network namespaces, veths, DPDK)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            skip(f"{tool} is not installed (iproute2)")
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        skip(f"no network namespace support: {probe.stderr.strip()}")
    try:
        import yaml  # noqa: F401  (the tool needs it)
    except ImportError:
        skip("python3-yaml is not installed (deploy/install-deps.sh)")
    if args.dpdk != "yes":
        skip("netfold-switchd was built without DPDK (install libdpdk-dev, rebuild)")
    if not glob.glob("/usr/lib/*/librte_net_af_packet.so*") and \
            not glob.glob("/usr/lib/*/dpdk/*/librte_net_af_packet.so*") and \
            not glob.glob("/usr/local/lib*/**/librte_net_af_packet.so*", recursive=True):
        skip("DPDK's net_af_packet driver (librte_net_af_packet.so) is not installed")
    if not args.mpi_program:
        skip("netfold was built without MPI (no libnetfold_mpi.so, no mpi_collectives)")
    if shutil.which("mpirun") is None:
        skip("mpirun is not installed (openmpi-bin)")


def start_reaper(tool, prefix):
    """A process in its own session that runs `down` once this one is gone,
    however it ends. Returns the write end of its pipe (keep it open)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        while os.read(r, 1):
            pass
        subprocess.run([tool, "down", "--prefix", prefix], timeout=DOWN_TIMEOUT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os._exit(0)
    os.close(r)
    return w, pid


def remove_leftovers(tool):
    """Testbeds of earlier runs of this test whose process is gone."""
    p = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    pids = set()
    for line in p.stdout.splitlines():
        m = re.match(r"^ntb(\d+)-", line)
        if m:
            pids.add(int(m.group(1)))
    for pid in sorted(pids):
        if not os.path.exists(f"/proc/{pid}"):
            say(f"removing the leftovers of a dead run (pid {pid})")
            subprocess.run([tool, "down", "--prefix", f"ntb{pid}"], timeout=DOWN_TIMEOUT,
                           capture_output=True)


def counters(tool, prefix, switch):
    p = run([tool, "counters", "--prefix", prefix, switch, "--json"], timeout=30)
    return json.loads(p.stdout)


def backend_counter(c, name):
    for entry in c.get("backend_counters", []):
        if entry["name"] == name:
            return int(entry.get("count", 0))
    return 0


def ours_left(prefix):
    p = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    left = [l.split()[0] for l in p.stdout.splitlines() if l.startswith(prefix + "-")]
    p = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True)
    left += [l.split(":")[1].strip().split("@")[0] for l in p.stdout.splitlines()
             if re.match(rf"^\d+: {prefix}(m\d+|br)[@:]", l)]
    return left


def run_backend(args, backend, prefix, mgmt_net, state_dir):
    tool = args.tool
    t0 = time.monotonic()
    up = run([tool, "up", args.topology, "--backend", backend, "--prefix", prefix,
              "--mgmt-net", mgmt_net, "--state-dir", state_dir, "--build-dir", args.build_dir,
              "--multicast-octet", str(100 + os.getpid() % 150)], timeout=UP_TIMEOUT)
    say(f"{backend}: up in {time.monotonic() - t0:.1f} s\n{up.stdout.rstrip()}")
    with open(os.path.join(state_dir, "testbed.json")) as f:
        state = json.load(f)
    hosts = [n for n in state["plan"]["nodes"] if n["kind"] == "host"]
    switches = [n["name"] for n in state["plan"]["nodes"] if n["kind"] == "switch"]
    if len(hosts) != 8 or len(switches) != 3:
        raise Failure(f"expected 8 hosts and 3 switches, the testbed has {len(hosts)} and "
                      f"{len(switches)}")
    first, last = hosts[0], hosts[-1]
    if first["switch"] == last["switch"]:
        raise Failure(f"{first['name']} and {last['name']} share a leaf: the ping would not "
                      "cross the spine")
    spine = next(s for s in switches if all(h["switch"] != s for h in hosts))

    before = {s: counters(tool, prefix, s) for s in switches}
    for s in switches:
        if before[s]["backend"] != backend:
            raise Failure(f"switch {s} runs backend '{before[s]['backend']}', not {backend}")

    # 1. Ping across the switches: host to host over both leaves and the
    # spine, and to a switch's own address (answered by the DPDK port itself
    # or the kernel in the switch namespace).
    for src, dst in ((first["name"], last["name"]), (last["name"], first["name"]),
                     (first["name"], spine), (last["name"], first["switch"])):
        p = run([tool, "ping", "--prefix", prefix, src, dst, "-c", "3", "-W", "2"], timeout=30,
                check=False)
        say(p.stdout.strip() or p.stderr.strip())
        if p.returncode != 0:
            raise Failure(f"{backend}: ping {src} -> {dst} failed: {p.stdout}{p.stderr}")
    if backend == "dpdk":
        mid = counters(tool, prefix, spine)
        forwarded = backend_counter(mid, "bridge.forwarded") - \
            backend_counter(before[spine], "bridge.forwarded")
        replies = backend_counter(mid, "frame.icmp_echo_replies")
        say(f"dpdk: {spine}'s bridge forwarded {forwarded} frames during the pings; "
            f"it answered {replies} echo requests itself")
        if forwarded < 6 or replies < 3:
            raise Failure(f"the pings did not cross {spine}'s DPDK bridge (forwarded {forwarded}, "
                          f"echo replies {replies})")

    # 2. MPI across the host namespaces, through the fabric.
    t1 = time.monotonic()
    mpi = run([tool, "mpirun", "--prefix", prefix, "-np", "8",
               "-x", "NETFOLD_MPI_ENABLE=1", "-x", "NETFOLD_MPI_STATS=1",
               "-x", "NETFOLD_TIMEOUT_MS=30000",
               "--mpirun-arg", "--mca op ^avx",   # Open MPI's own int8/16 sum bug (docs/mpi.md)
               "--", args.mpi_program, args.mpi_scenario], timeout=MPI_TIMEOUT, check=False)
    output = mpi.stdout + mpi.stderr
    say(f"{backend}: MPI job ({args.mpi_scenario}, 8 ranks) exited {mpi.returncode} in "
        f"{time.monotonic() - t1:.1f} s:\n" + "\n".join(output.strip().splitlines()[-25:]))
    m = re.search(r"mpi_collectives \w+: (\d+) checks, (\d+) failed", output)
    if mpi.returncode != 0 or not m:
        raise Failure(f"{backend}: the MPI job failed (exit {mpi.returncode})")
    if int(m.group(1)) == 0 or int(m.group(2)) != 0:
        raise Failure(f"{backend}: {m.group(0)}")
    offloaded = {k: int(v) for k, v in re.findall(r"offloaded (\w+)\s+(\d+)", output)}
    if offloaded.get("allreduce", 0) == 0:
        raise Failure(f"{backend}: no allreduce went through the fabric ({offloaded})")
    if re.search(r"fallback: (no fabric|fabric error|group not created)", output):
        raise Failure(f"{backend}: the interposer fell back to MPI for a fabric reason")

    # 2b. Several ranks per host namespace (udp backend: one is enough): the
    # interposer's node hierarchy, 2 and 4 ranks on each of two hosts under
    # different leaves; only a host's leader uses its link. The two leaders'
    # communicator has two ranks: on the fabric with NETFOLD_MPI_MIN_COMM_SIZE=2.
    if backend == "udp":
        for per_host in (2, 4):
            t2 = time.monotonic()
            h = run([tool, "mpirun", "--prefix", prefix, "--hosts", f"{first['name']},{last['name']}",
                     "--ranks-per-host", str(per_host),
                     "-x", "NETFOLD_MPI_ENABLE=1", "-x", "NETFOLD_MPI_STATS=1",
                     "-x", "NETFOLD_MPI_MIN_COMM_SIZE=2",
                     "-x", f"NETFOLD_TEST_RANKS_PER_HOST={per_host}",
                     "--", args.mpi_program, "hierarchy", "quick"], timeout=MPI_TIMEOUT,
                    check=False)
            out = h.stdout + h.stderr
            say(f"{backend}: {per_host} ranks per host exited {h.returncode} in "
                f"{time.monotonic() - t2:.1f} s:\n" + "\n".join(out.strip().splitlines()[-12:]))
            m = re.search(r"mpi_collectives \w+: (\d+) checks, (\d+) failed", out)
            if h.returncode != 0 or not m or int(m.group(2)) != 0:
                raise Failure(f"{backend}: the job with {per_host} ranks per host failed")
            if f"node hierarchy allreduce" not in out:
                raise Failure(f"{backend}: {per_host} ranks per host did not use the node hierarchy")

    # 3. The switches did the reducing.
    after = {s: counters(tool, prefix, s) for s in switches}
    for s in switches:
        got = int(after[s]["messages_received"]) - int(before[s]["messages_received"])
        say(f"{backend}: {s} received {got} aggregation messages, sent "
            f"{int(after[s]['messages_sent']) - int(before[s]['messages_sent'])}, multicast "
            f"{int(after[s]['multicasts_sent']) - int(before[s]['multicasts_sent'])}")
        if got <= 0:
            raise Failure(f"{backend}: switch {s} received no aggregation message")
    # Every offloaded allreduce's result left a group root by multicast (at
    # least once per operation; the interposer counts each rank's call).
    multicast = {s: int(after[s]["multicasts_sent"]) - int(before[s]["multicasts_sent"])
                 for s in switches}
    if multicast[spine] <= 0 or sum(multicast.values()) < offloaded["allreduce"] // 8:
        raise Failure(f"{backend}: the switches multicast {multicast} results for "
                      f"{offloaded['allreduce']} offloaded allreduces (summed over 8 ranks)")
    if backend == "dpdk":
        fwd = backend_counter(after[spine], "bridge.forwarded") - \
            backend_counter(before[spine], "bridge.forwarded")
        if fwd < 100:
            raise Failure(f"MPI's TCP did not cross {spine}'s DPDK bridge (forwarded {fwd})")
        say(f"dpdk: {spine}'s bridge forwarded {fwd} frames in all (MPI's TCP included)")

    # 4. Down, and nothing of ours is left.
    run([tool, "down", "--prefix", prefix, "--state-dir", state_dir], timeout=DOWN_TIMEOUT)
    left = ours_left(prefix)
    if left:
        raise Failure(f"{backend}: down left {left}")
    stray = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline_has(p, state_dir)]
    if stray:
        raise Failure(f"{backend}: processes of the testbed still run after down: {stray}")
    say(f"{backend}: passed in {time.monotonic() - t0:.1f} s")


def _cmdline_has(pid, text):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return text.encode() in f.read()
    except OSError:
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tool", required=True)
    parser.add_argument("--topology", required=True)
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--dpdk", choices=["yes", "no"], required=True)
    parser.add_argument("--mpi-program", default="")
    parser.add_argument("--mpi-scenario", default=os.environ.get("NETFOLD_TESTBED_SCENARIO",
                                                                 "sweep"))
    parser.add_argument("--backends", default="dpdk,udp")
    args = parser.parse_args()
    check_prerequisites(args)

    def on_signal(signum, _frame):
        raise Killed(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    prefix = f"ntb{os.getpid()}"
    mgmt_net = f"10.79.{os.getpid() % 250}.0/24"
    state_dir = f"/run/netfold-testbed/{prefix}"
    remove_leftovers(args.tool)
    reaper_pipe, reaper_pid = start_reaper(args.tool, prefix)
    t0 = time.monotonic()
    status = 1
    try:
        for backend in args.backends.split(","):
            run_backend(args, backend, prefix, mgmt_net, state_dir)
        status = 0
        say(f"PASSED: {args.backends} in {time.monotonic() - t0:.1f} s")
    except Failure as e:
        say(f"FAILED: {e}")
        for log in sorted(glob.glob(os.path.join(state_dir, "*.log"))):
            with open(log, errors="replace") as f:
                lines = f.readlines()[-12:]
            say(f"--- {log} (last lines)\n" + "".join(lines).rstrip())
        # What each switch counted (drops with their reasons, QP retries):
        # the fabric is still up until the finally block.
        for port_file in sorted(glob.glob(os.path.join(state_dir, "*.admin_port"))):
            switch = os.path.basename(port_file)[:-len(".admin_port")]
            try:
                p = subprocess.run([args.tool, "counters", "--prefix", prefix, switch, "--json"],
                                   capture_output=True, text=True, timeout=30)
                say(f"--- {switch}'s counters\n" + (p.stdout.strip() or p.stderr.strip()))
            except subprocess.TimeoutExpired:
                say(f"--- {switch}'s counters: no answer within 30 s")
    except (Killed, KeyboardInterrupt):
        say("interrupted: cleaning up")
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        subprocess.run([args.tool, "down", "--prefix", prefix, "--state-dir", state_dir],
                       timeout=DOWN_TIMEOUT, capture_output=True)
        left = ours_left(prefix)
        if left:
            say(f"FAILED: cleanup left {left}")
            status = 1
        os.close(reaper_pipe)   # the reaper runs down once more (a no-op) and exits
        os.waitpid(reaper_pid, 0)
        if status == 0:
            shutil.rmtree(state_dir, ignore_errors=True)
        else:
            say(f"logs kept in {state_dir}")
    return status


if __name__ == "__main__":
    sys.exit(main())
