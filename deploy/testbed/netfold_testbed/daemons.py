"""The daemons: finding the binaries, writing netfold-managerd's and each
netfold-switchd's config, starting them with a log each and waiting until the
manager sees every switch up, asking them over their APIs (testbed_query),
and stopping processes (SIGTERM, then SIGKILL).
"""

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time

from .errors import TestbedError
from .netns import run
from .state import credential_file, make_credential, save_state, tls_ca_file

ROCE_PORT = 4791
SWITCHD_DEFAULT_CAPACITY = {"trees": 64, "groups": 4096, "slots": 65536, "qps": 4096}
AF_PACKET_GEOMETRY = "blocksz=8192,framesz=8192,framecnt=256"
STOP_GRACE = 5              # seconds between SIGTERM and SIGKILL
# deploy/testbed: netns-rsh is here, the repository's build/ two levels up.
TOOL_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def find_binaries(args):
    candidates = []
    if args.build_dir:
        candidates.append(args.build_dir)
    elif os.environ.get("NETFOLD_BUILD_DIR"):
        candidates.append(os.environ["NETFOLD_BUILD_DIR"])
    else:
        candidates.append(os.path.join(TOOL_DIR, "..", "..", "build"))
    found = {}
    wanted = {
        "managerd": ("manager/netfold-managerd", "netfold-managerd"),
        "switchd": ("switch/netfold-switchd", "netfold-switchd"),
        "cli": ("tools/netfold", "netfold"),
        "interposer": ("host/mpi/libnetfold_mpi.so", None),
        "query": ("tests/testbed/testbed_query", None),
    }
    for key, (rel, on_path) in wanted.items():
        path = ""
        for d in candidates:
            p = os.path.realpath(os.path.join(d, rel))
            if os.access(p, os.X_OK if not p.endswith(".so") else os.R_OK):
                path = p
                break
        if not path and on_path:
            path = shutil.which(on_path) or ""
        found[key] = path
    for key, what in (("managerd", "netfold-managerd"), ("switchd", "netfold-switchd"),
                      ("query", "tests/testbed/testbed_query")):
        if not found[key]:
            raise TestbedError(
                f"cannot find {what}: build it (ninja -C BUILD) and pass --build-dir "
                f"(or set NETFOLD_BUILD_DIR); looked in {', '.join(candidates)}"
                + (" and $PATH" if key != "query" else ""))
    found["rsh_agent"] = os.path.join(TOOL_DIR, "netns-rsh")
    return found


def write_switch_config(plan, state, node, manager_address, args):
    sd = state["state_dir"]
    name = node["name"]
    cfg = [
        "# Written by netfold-testbed up: the switch's config (docs/switch.md).",
        f"name: {json.dumps(name)}",
        f"data_address: {node['data_ip']}:{ROCE_PORT}",
        f"backend: {plan['backend']}",
        f"admin_address: {node['mgmt_ip']}:0",
        f"manager: {manager_address}",
        f"credential_file: {json.dumps(credential_file(sd))}",
        f"tls_dir: {json.dumps(sd)}",
        f"log_level: {args.log_level}",
        f"data_port_file: {json.dumps(os.path.join(sd, name + '.data_port'))}",
        f"admin_port_file: {json.dumps(os.path.join(sd, name + '.admin_port'))}",
    ]
    declared = plan["capacities"].get(name, {})
    extra = {k: int(declared[k]) for k in SWITCHD_DEFAULT_CAPACITY
             if k in declared and int(declared[k]) > SWITCHD_DEFAULT_CAPACITY[k]}
    if extra:
        cfg.append("capacity: {" + ", ".join(f"{k}: {v}" for k, v in extra.items()) + "}")
    if args.faults:
        cfg.append("link_faults:")
        cfg.append(f"  - {{peer: default, direction: both, impairment: {json.dumps(args.faults)}}}")
    if plan["backend"] == "dpdk":
        # One EAL per switch process: no shared files, a file prefix of its
        # own anyway, little memory, lcore 0 only (the data-plane thread is
        # not pinned: DpdkRuntime restores its affinity), no busy polling.
        eal = (f"--no-huge --no-shconf --no-pci -m {args.dpdk_memory} -l 0 --no-telemetry "
               f"--log-level=*:warning --file-prefix={plan['prefix']}-{name}")
        cfg += ["dpdk:", f"  eal_args: {json.dumps(eal)}", "  links:"]
        for i, port in enumerate(node["ports"]):
            device = f"net_af_packet{i},iface={port['if']},{AF_PACKET_GEOMETRY}"
            if port["rate"]:
                device += ",qdisc_bypass=0"   # else tc's tbf never sees the frames
            cfg.append(f"    - device: {json.dumps(device)}   # to {port['peer']}")
        cfg += [f"  prefix_length: {ipaddress.ip_network(plan['data_net']).prefixlen}",
                "  busy_poll: false",
                "  bridge: true",
                "  mbuf_data_size: 8192"]
    path = os.path.join(sd, f"{name}.yaml")
    with open(path, "w") as f:
        f.write("\n".join(cfg) + "\n")
    return path


def spawn(state, name, argv):
    logfile = os.path.join(state["state_dir"], f"{name}.log")
    with open(logfile, "w") as out:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)
    state["processes"].append({"name": name, "pid": p.pid, "argv": argv, "log": logfile})
    save_state(state)
    return p


def tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError:
        return "(no log)"


def wait_port_file(path, proc, what, logfile, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                text = f.read().strip()
            if text.isdigit() and int(text) > 0:
                return int(text)
        except OSError:
            pass
        if proc.poll() is not None:
            raise TestbedError(f"{what} exited with status {proc.returncode} while starting; "
                               f"{logfile} says:\n{tail(logfile)}")
        time.sleep(0.05)
    raise TestbedError(f"{what} did not report its port within {timeout} s; {logfile}:\n"
                       f"{tail(logfile)}")


def query(bins, what, address, timeout=5.0):
    """The JSON answer of testbed_query (tests/testbed/testbed_query.cc):
    `counters` of a switch's admin API, `manager` status. None if the call
    failed."""
    p = run([bins["query"], what, address, "--timeout_ms", str(int(timeout * 1000))],
            check=False, timeout=timeout + 5)
    if p.returncode != 0:
        return None
    return json.loads(p.stdout)


def manager_switch_states(bins, manager):
    """{switch: state} as the manager sees them (UP, RECONCILING, ...)."""
    status = query(bins, "manager", manager, timeout=2.0)
    if status is None:
        return None
    return {s["name"]: s.get("state", "UNKNOWN") for s in status.get("switches", [])}


def make_tls_files(plan, state):
    """A new CA and server certificate for this testbed (docs/security.md, "TLS
    on the control plane"): ca.pem, server.pem, server.key in the state
    directory, for the addresses the manager and the switches' admin APIs
    listen on. The daemons take the directory (tls_dir:); testbed_query,
    netfold status and the ranks find ca.pem beside the credential."""
    cli = state["bins"].get("cli")
    if not cli:
        raise TestbedError("cannot find netfold (tools/netfold), which makes the fabric's TLS "
                           "files: build it (ninja -C BUILD) and pass --build-dir")
    hosts = [plan["mgmt_gateway"]] + [n["mgmt_ip"] for n in plan["nodes"]
                                      if n["kind"] == "switch"]
    run([cli, "certs", "--out", state["state_dir"], "--hosts", ",".join(hosts), "--force"])
    # testbed_query and netfold status (this process's children) trust it.
    os.environ["NETFOLD_TLS_CA"] = tls_ca_file(state["state_dir"])


def start_processes(plan, state, args):
    bins = state["bins"]
    sd = state["state_dir"]
    mport_file = os.path.join(sd, "manager.port")
    manager_cfg = os.path.join(sd, "manager.yaml")
    make_credential(sd)
    make_tls_files(plan, state)
    with open(manager_cfg, "w") as f:
        f.write("# Written by netfold-testbed up (docs/manager.md).\n"
                f"listen: {plan['mgmt_gateway']}:0\n"
                f"topology: {json.dumps(plan['topology_file'])}\n"
                f"state_dir: {json.dumps(os.path.join(sd, 'manager-state'))}\n"
                f"log_level: {args.log_level}\n"
                f"multicast_prefix: \"239.{args.multicast_octet}\"\n"
                f"credential_file: {json.dumps(credential_file(sd))}\n"
                f"tls_dir: {json.dumps(sd)}\n")
    manager = spawn(state, "manager", [bins["managerd"], f"--config={manager_cfg}",
                                       f"--port_file={mport_file}"])
    port = wait_port_file(mport_file, manager, "netfold-managerd",
                          os.path.join(sd, "manager.log"), args.timeout)
    state["manager"] = f"{plan['mgmt_gateway']}:{port}"
    save_state(state)
    procs = {}
    for node in plan["nodes"]:
        if node["kind"] != "switch":
            continue
        cfg = write_switch_config(plan, state, node, state["manager"], args)
        procs[node["name"]] = spawn(state, node["name"],
                                    ["ip", "netns", "exec", node["ns"], bins["switchd"],
                                     f"--config={cfg}"])
    for name, proc in procs.items():
        logfile = os.path.join(sd, f"{name}.log")
        port = wait_port_file(os.path.join(sd, f"{name}.admin_port"), proc,
                              f"netfold-switchd {name}", logfile, args.timeout)
        node = next(n for n in plan["nodes"] if n["name"] == name)
        state["admin"][name] = f"{node['mgmt_ip']}:{port}"
    save_state(state)
    deadline = time.monotonic() + args.timeout
    states = None
    while time.monotonic() < deadline:
        states = manager_switch_states(bins, state["manager"])
        if states and all(states.get(n) == "UP" for n in procs):
            return
        for name, proc in procs.items():
            if proc.poll() is not None:
                logfile = os.path.join(sd, f"{name}.log")
                raise TestbedError(f"netfold-switchd {name} exited with status {proc.returncode}; "
                                   f"{logfile} says:\n{tail(logfile)}")
        time.sleep(0.2)
    raise TestbedError(f"the manager does not see every switch up after {args.timeout} s "
                       f"({states}); logs in {sd}")


def write_host_env(plan, state):
    env_dir = os.path.join(state["state_dir"], "env")
    os.makedirs(env_dir, exist_ok=True)
    for node in plan["nodes"]:
        if node["kind"] == "host":
            with open(os.path.join(env_dir, node["ns"]), "w") as f:
                f.write(f"NETFOLD_HOST={node['name']}\n"
                        f"NETFOLD_LOCAL_ADDRESS={node['data_ip']}\n"
                        f"NETFOLD_MANAGER={state['manager']}\n"
                        f"NETFOLD_CREDENTIAL_FILE={credential_file(state['state_dir'])}\n"
                        f"NETFOLD_TLS_CA={tls_ca_file(state['state_dir'])}\n")


def process_matches(pid, needles):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return all(n in cmdline for n in needles)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def stop_pids(pids, grace=STOP_GRACE):
    pids = [p for p in set(pids) if p > 1 and p != os.getpid()]
    for p in pids:
        try:
            os.kill(p, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        for p in pids:  # reap our own children (up's failure path)
            try:
                os.waitpid(p, os.WNOHANG)
            except OSError:
                pass
        time.sleep(0.05)
    left = [p for p in pids if alive(p)]
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return left
