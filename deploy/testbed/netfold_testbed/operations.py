"""The subcommands that use a testbed that is up: status, exec, ping,
counters, fault and mpirun.
"""

import ipaddress
import json
import os
import shlex
import shutil

from .daemons import ROCE_PORT, alive
from .errors import TestbedError
from .icmp import icmp_ping
from .netns import in_netns, list_namespaces, run
from .state import credential_file, require_state, tls_ca_file


def node_of(state, name):
    for n in state["plan"]["nodes"]:
        if n["name"] == name or n["ns"] == name:
            return n
    names = ", ".join(n["name"] for n in state["plan"]["nodes"])
    raise TestbedError(f"no host or switch '{name}' in the testbed (there are: {names})")


def cmd_status(args):
    state = require_state(args)
    plan = state["plan"]
    existing = set(list_namespaces())
    print(f"testbed '{state['prefix']}': backend {plan['backend']}, topology "
          f"{plan['topology_file']}, data {plan['data_net']}, management {plan['mgmt_net']}, "
          f"state {state['state_dir']}")
    procs = {p["name"]: p for p in state["processes"]}
    m = procs.get("manager")
    print(f"  manager {state['manager']}  pid {m['pid'] if m else '-'} "
          f"{'running' if m and alive(m['pid']) else 'NOT RUNNING'}")
    for n in plan["nodes"]:
        ns_state = "ok" if n["ns"] in existing else "MISSING"
        line = f"  {n['kind']:<6} {n['name']:<8} ns {n['ns']} ({ns_state}) data {n['data_ip']}"
        if n["kind"] == "switch":
            p = procs.get(n["name"])
            line += (f" admin {state['admin'].get(n['name'], '-')} pid {p['pid'] if p else '-'} "
                     f"{'running' if p and alive(p['pid']) else 'NOT RUNNING'}")
        ports = ", ".join(f"{p['if']}->{p['peer']}" + (f" ({p['rate']})" if p["rate"] else "")
                          for p in n["ports"])
        print(line + f"\n           ports: {ports}")
    if state["bins"].get("cli"):
        print()
        p = run([state["bins"]["cli"], "status", "--manager", state["manager"]], check=False)
        print((p.stdout + p.stderr).rstrip())
    return 0


def host_env(state, node):
    env = dict(os.environ)
    env["NETFOLD_MANAGER"] = state["manager"]
    env["NETFOLD_CREDENTIAL_FILE"] = credential_file(state["state_dir"])
    env["NETFOLD_TLS_CA"] = tls_ca_file(state["state_dir"])
    if node["kind"] == "host":
        env["NETFOLD_HOST"] = node["name"]
        env["NETFOLD_LOCAL_ADDRESS"] = node["data_ip"]
    return env


def cmd_exec(args):
    state = require_state(args)
    node = node_of(state, args.node)
    if not args.command:
        raise TestbedError("exec: give a command, e.g. netfold-testbed exec h0 ip addr")
    os.execvpe("ip", ["ip", "netns", "exec", node["ns"]] + args.command, host_env(state, node))


def cmd_ping(args):
    state = require_state(args)
    src = node_of(state, args.src)
    try:
        dst_ip = str(ipaddress.ip_address(args.dst))
    except ValueError:
        dst_ip = node_of(state, args.dst)["data_ip"]
    if args.count < 1 or args.wait <= 0:
        raise TestbedError("ping: --count must be >= 1 and --wait > 0")
    rtts = in_netns(src["ns"], lambda: icmp_ping(dst_ip, args.count, args.wait),
                    timeout=args.count * args.wait + 10)
    summary = (f"ping {src['name']} ({src['data_ip']}) -> {args.dst} ({dst_ip}): "
               f"{len(rtts)}/{args.count} replies")
    if rtts:
        summary += f", rtt min/avg/max {min(rtts):.3f}/{sum(rtts) / len(rtts):.3f}/{max(rtts):.3f} ms"
    print(summary)
    return 0 if len(rtts) == args.count else 1


def cmd_counters(args):
    state = require_state(args)
    if args.switch == "all":
        # Every switch, in the plan's order; --json gives one object per line.
        for n in state["plan"]["nodes"]:
            if n["kind"] == "switch":
                print_counters(state, n, json_lines=args.json)
        return 0
    node = node_of(state, args.switch)
    if node["kind"] != "switch":
        raise TestbedError(f"{args.switch} is a host; counters are a switch's")
    print_counters(state, node, json_indent=args.json)
    return 0


def print_counters(state, node, json_indent=False, json_lines=False):
    p = run([state["bins"]["query"], "counters", state["admin"][node["name"]]], check=False)
    if p.returncode != 0:
        raise TestbedError(f"{node['name']}: {p.stderr.strip()}")
    counters = json.loads(p.stdout)
    if json_indent or json_lines:
        print(json.dumps(counters, indent=1 if json_indent else None))
        return
    print(f"switch {counters['name']} ({counters['backend']}, {counters['data_address']}): "
          f"messages received {counters['messages_received']}, sent {counters['messages_sent']}, "
          f"multicasts {counters['multicasts_sent']}")
    for g in counters.get("groups", []):
        print(f"  group {g['group_id']} (job {g['job_id']}): {g['operations_completed']} operations, "
              f"{g['bytes_reduced']} bytes reduced")
    for c in counters.get("backend_counters", []):
        if int(c.get("count", 0)) and c["name"].startswith(("bridge.", "link.", "frame.")):
            print(f"  {c['name']} {c['count']}")


def cmd_fault(args):
    """SwitchAdmin.SetLinkFault on a running switch: seeded loss, duplication,
    reordering, corruption, delay, rate or down=1 toward one peer or all."""
    state = require_state(args)
    node = node_of(state, args.switch)
    if node["kind"] != "switch":
        raise TestbedError(f"{args.switch} is a host; faults are set on a switch's peers")
    peer = args.peer
    if peer not in ("all", "default") and ":" not in peer:
        peer_node = node_of(state, peer)  # a host or switch name: its RoCE endpoint
        if peer_node["kind"] == "host":
            raise TestbedError(
                f"--peer {peer}: a host's RoCE port is chosen when its job starts; give its "
                f"ip:port (the switch's counters list its peers) or all")
        peer = f"{peer_node['data_ip']}:{ROCE_PORT}"
    p = run([state["bins"]["query"], "fault", state["admin"][node["name"]], peer,
             args.direction, args.impairment], check=False)
    if p.returncode != 0:
        raise TestbedError(p.stderr.strip())
    for link in json.loads(p.stdout).get("links", []):
        print(f"{node['name']} peer {link.get('peer')}: send {link.get('send') or 'none'}, "
              f"receive {link.get('receive') or 'none'}")
    return 0


def mpirun_argv(state, args):
    plan = state["plan"]
    hosts = [n for n in plan["nodes"] if n["kind"] == "host"]
    if args.hosts:
        hosts = [node_of(state, h) for h in args.hosts.split(",")]
        if any(h["kind"] != "host" for h in hosts):
            raise TestbedError("--hosts lists hosts of the topology, not switches")
    per_host = getattr(args, "ranks_per_host", 1) or 1
    if per_host < 1:
        raise TestbedError(f"--ranks-per-host {per_host}: at least 1")
    np_ = args.np or len(hosts) * per_host
    if np_ < 1 or np_ > len(hosts) * per_host:
        raise TestbedError(f"-np {np_}: {per_host} rank(s) per host namespace, and there are "
                           f"{len(hosts)} (each rank is a host of the topology)")
    hosts = hosts[:(np_ + per_host - 1) // per_host]
    hostfile = os.path.join(state["state_dir"], "hostfile")
    with open(hostfile, "w") as f:
        f.write("".join(f"{h['ns']} slots={per_host}\n" for h in hosts))
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise TestbedError("mpirun: give the program, e.g. netfold-testbed mpirun -- ./app")
    argv = ["mpirun"]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    # Several ranks per host: ranks r*N .. r*N+N-1 on the r-th host.
    argv += ["-np", str(np_), "--hostfile", hostfile, "--map-by", "slot" if per_host > 1 else "node",
             # Launch: orted in each namespace through `ip netns exec`, one
             # level (no tree spawn), back to mpirun over the management net.
             "--mca", "plm_rsh_agent", state["bins"]["rsh_agent"],
             "--mca", "plm_rsh_no_tree_spawn", "1",
             # orted stays attached to its netns-rsh: if a daemon fails to
             # start, mpirun sees it and aborts instead of waiting forever.
             "--leave-session-attached",
             "--mca", "oob_tcp_if_include", plan["mgmt_net"],
             # Every "host" is a namespace of this one machine, but the
             # hostfile gives each its own slots: Open MPI would think it
             # has a core per rank and spin in every wait, starving the
             # other ranks and the kernel's forwarding on the shared cores.
             "--mca", "mpi_yield_when_idle", "1",
             # MPI's own traffic crosses the emulated switches.
             "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
             "--mca", "btl_tcp_if_include", plan["data_net"],
             "-x", f"NETFOLD_MANAGER={state['manager']}",
             "-x", f"NETFOLD_CREDENTIAL_FILE={credential_file(state['state_dir'])}",
             "-x", f"NETFOLD_TLS_CA={tls_ca_file(state['state_dir'])}"]
    interposer = args.interposer or state["bins"].get("interposer", "")
    if not args.no_preload:
        if not interposer:
            raise TestbedError("libnetfold_mpi.so not found: build it or pass --interposer "
                               "(or --no-preload to run without it)")
        argv += ["-x", f"LD_PRELOAD={interposer}"]
    for e in args.env or []:
        argv += ["-x", e]
    for extra in args.mpirun_arg or []:
        argv += shlex.split(extra)
    return argv + command


def cmd_mpirun(args):
    state = require_state(args)
    argv = mpirun_argv(state, args)
    env = dict(os.environ)
    env["NETFOLD_TESTBED_STATE_DIR"] = state["state_dir"]
    if args.print:
        print(f"NETFOLD_TESTBED_STATE_DIR={shlex.quote(state['state_dir'])} {shlex.join(argv)}")
        return 0
    if shutil.which("mpirun") is None:
        raise TestbedError("mpirun is not installed (apt-get install openmpi-bin)")
    os.execvpe("mpirun", argv, env)
