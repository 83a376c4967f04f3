"""`up` and `down`: building a testbed from a topology (tearing down what was
built if anything fails or a signal comes) and tearing one down by its state
file and by its names, idempotently.
"""

import os
import shutil
import signal
import time

from .daemons import find_binaries, process_matches, start_processes, stop_pids, write_host_env
from .errors import Interrupted, TestbedError, log
from .netns import ROOT_LINK_RE, ip, list_namespaces, namespace_pids, root_links, run
from .network import check_can_build, create_network
from .state import RUN_DIR, default_state_dir, load_state, save_state, state_path
from .topology import DEFAULT_PREFIX, PREFIX_RE, build_plan, load_topology


def cmd_up(args):
    if not PREFIX_RE.match(args.prefix):
        raise TestbedError(f"--prefix '{args.prefix}': 1..10 characters, a lowercase letter then "
                           "lowercase letters or digits (interface names are at most 15)")
    if not (1280 <= args.mtu <= 8000):
        raise TestbedError("--mtu must be 1280..8000 (af_packet frames are 8192 bytes)")
    if not (1 <= args.multicast_octet <= 254):
        raise TestbedError("--multicast-octet must be 1..254")
    topo = load_topology(args.topology)
    plan = build_plan(topo, args)
    bins = find_binaries(args)
    if args.backend == "dpdk" and args.mtu + 64 > 8192:
        raise TestbedError("--mtu too large for the DPDK geometry")
    check_can_build(args, plan)
    state_dir = os.path.abspath(args.state_dir or os.path.join(RUN_DIR, args.prefix))
    os.makedirs(state_dir, exist_ok=True)
    os.makedirs(RUN_DIR, exist_ok=True)
    if state_dir != os.path.join(RUN_DIR, args.prefix):
        with open(os.path.join(RUN_DIR, f"{args.prefix}.dir"), "w") as f:
            f.write(state_dir + "\n")
    for stale in os.listdir(state_dir):
        if stale.endswith((".port", ".admin_port", ".data_port")) or stale == "testbed.json":
            os.remove(os.path.join(state_dir, stale))
    shutil.rmtree(os.path.join(state_dir, "manager-state"), ignore_errors=True)
    state = {"prefix": args.prefix, "state_dir": state_dir, "ready": False, "plan": plan,
             "bins": bins, "namespaces": [], "root_links": [], "processes": [], "admin": {},
             "manager": "", "started": time.time()}
    save_state(state)

    def on_signal(signum, _frame):
        raise Interrupted(signum)

    # Ctrl-C, kill and a closed terminal all tear down what was built so far.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, on_signal)
    t0 = time.monotonic()
    try:
        create_network(plan, state)
        start_processes(plan, state, args)
        write_host_env(plan, state)
        state["ready"] = True
        save_state(state)
    except BaseException as e:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        if isinstance(e, (KeyboardInterrupt, Interrupted)):
            log("interrupted: tearing down what was built")
        elif isinstance(e, TestbedError):
            log(f"up failed: {e}")
            log("tearing down what was built")
        else:
            log(f"up failed: {type(e).__name__}: {e}; tearing down what was built")
        teardown(args.prefix, state_dir, quiet=True)
        if isinstance(e, (KeyboardInterrupt, Interrupted)):
            return 130
        if not isinstance(e, TestbedError):
            raise
        return 1
    switches = [n for n in plan["nodes"] if n["kind"] == "switch"]
    hosts = [n for n in plan["nodes"] if n["kind"] == "host"]
    print(f"netfold testbed '{args.prefix}' up in {time.monotonic() - t0:.1f} s: "
          f"{len(switches)} switches ({args.backend}, offloads "
          f"{'on' if plan['offloads'] else 'off'}), {len(hosts)} hosts, "
          f"topology {plan['topology_file']}")
    print(f"  manager        {state['manager']}   (logs and configs in {state_dir})")
    for n in switches:
        print(f"  switch {n['name']:<8} ns {n['ns']:<14} data {n['data_ip']:<12} "
              f"admin {state['admin'][n['name']]}")
    for n in hosts:
        print(f"  host   {n['name']:<8} ns {n['ns']:<14} data {n['data_ip']:<12} "
              f"on {n['switch']}")
    p = "" if args.prefix == DEFAULT_PREFIX else f" --prefix {args.prefix}"
    print(f"\nnext: netfold-testbed{p} ping {hosts[0]['name']} {hosts[-1]['name']}\n"
          f"      netfold-testbed{p} mpirun -- ./app\n"
          f"      netfold-testbed{p} down")
    return 0


def teardown(prefix, state_dir, quiet=False):
    """Stops every process and deletes every namespace, veth and bridge of
    the prefix. Idempotent; works from the state file and by name."""
    state = None
    try:
        state = load_state(state_dir) if state_dir else None
    except TestbedError:
        state = None
    namespaces = [ns for ns in list_namespaces() if ns.startswith(prefix + "-")]
    pids = []
    # Our daemons: every one was started with a config or port file in the
    # state directory, so its command line names it (a recorded pid that was
    # reused by another program does not, and is left alone). Then anything
    # still in our namespaces: MPI ranks, orteds, shells from exec.
    recorded = {p["pid"] for p in (state or {}).get("processes", [])}
    if state_dir:
        needles = [state_dir.rstrip("/") + "/", "netfold-"]
        for entry in os.listdir("/proc"):
            if entry.isdigit() and process_matches(int(entry), needles):
                pids.append(int(entry))
        pids += [p for p in recorded if process_matches(p, needles)]
    for ns in namespaces:
        pids += namespace_pids(ns)
    killed = stop_pids(pids)
    if killed and not quiet:
        log(f"killed {len(killed)} process(es) that ignored SIGTERM: {killed}")
    removed = 0
    for name in root_links():
        if ROOT_LINK_RE(prefix).match(name):
            if ip("link", "del", name, check=False).returncode == 0:
                removed += 1
    for ns in namespaces:
        if run(["ip", "netns", "del", ns], check=False).returncode == 0:
            removed += 1
    left = [ns for ns in list_namespaces() if ns.startswith(prefix + "-")]
    left += [n for n in root_links() if ROOT_LINK_RE(prefix).match(n)]
    if state_dir and os.path.exists(state_path(state_dir)):
        os.replace(state_path(state_dir), state_path(state_dir) + ".down")
    pointer = os.path.join(RUN_DIR, f"{prefix}.dir")
    if os.path.exists(pointer):
        os.remove(pointer)
    if left:
        raise TestbedError(f"could not delete: {', '.join(left)}")
    if not quiet:
        print(f"netfold testbed '{prefix}' down: {len(set(pids))} process(es) stopped, "
              f"{removed} namespace(s)/link(s) deleted"
              + (f"; logs kept in {state_dir}" if state_dir and os.path.isdir(state_dir) else ""))
    return 0


def cmd_down(args):
    if not PREFIX_RE.match(args.prefix):
        raise TestbedError(f"--prefix '{args.prefix}' is not a testbed prefix")
    if os.geteuid() != 0:
        raise TestbedError("down needs root")
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
    return teardown(args.prefix, os.path.abspath(args.state_dir or default_state_dir(args.prefix)))
