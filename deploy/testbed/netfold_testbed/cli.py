"""The command line: one subcommand per action, each with its options, and
main(), which runs it and turns a TestbedError into a message and exit 1.
"""

import argparse
import os
import sys

from . import __doc__ as TOOL_DOC  # the overview in __init__.py
from .errors import TestbedError, log
from .lifecycle import cmd_down, cmd_up
from .operations import cmd_counters, cmd_exec, cmd_fault, cmd_mpirun, cmd_ping, cmd_status
from .state import RUN_DIR
from .topology import DEFAULT_PREFIX

DEFAULT_DATA_NET = "10.77.0.0/16"
DEFAULT_MGMT_NET = "10.78.0.0/16"
DEFAULT_MTU = 4200          # a 4096-byte RoCE MTU plus headers


def main(argv):
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--prefix", default=os.environ.get("NETFOLD_TESTBED_PREFIX", DEFAULT_PREFIX),
                        help="names of namespaces (PREFIX-NAME) and root links (default "
                             f"$NETFOLD_TESTBED_PREFIX or {DEFAULT_PREFIX})")
    common.add_argument("--state-dir", help=f"configs, logs, pids (default {RUN_DIR}/PREFIX)")
    parser = argparse.ArgumentParser(prog="netfold-testbed", description=TOOL_DOC.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command_name", required=True)

    up = sub.add_parser("up", parents=[common], help="build the testbed and start the daemons")
    up.add_argument("topology", help="the manager's topology YAML (deploy/topologies/)")
    up.add_argument("--backend", choices=["dpdk", "udp"], default="dpdk")
    up.add_argument("--offloads", choices=["auto", "on", "off"], default="auto",
                    help="the data veths' checksum, TSO and GSO offloads, as a NIC's: "
                         "auto = on with --backend udp, off with dpdk (which needs them off)")
    up.add_argument("--rate", action="append", metavar="LINK=RATE",
                    help="tc tbf on both ends of a link: HOST, SWITCH:SWITCH, SWITCH:HOST or "
                         "all, e.g. h0=100mbit (repeatable)")
    up.add_argument("--faults", default="", metavar="IMPAIRMENT",
                    help="seeded impairment on every switch peer (docs/transport.md)")
    up.add_argument("--data-net", default=DEFAULT_DATA_NET)
    up.add_argument("--mgmt-net", default=DEFAULT_MGMT_NET)
    up.add_argument("--mtu", type=int, default=DEFAULT_MTU)
    up.add_argument("--multicast-octet", type=int, default=77,
                    help="the manager's multicast prefix is 239.N")
    up.add_argument("--dpdk-memory", type=int, default=256, help="EAL -m per switch, MB")
    up.add_argument("--build-dir", help="where the binaries are (default $NETFOLD_BUILD_DIR, "
                                        "else the repository's build/)")
    up.add_argument("--log-level", default="warning",
                    choices=["error", "warning", "info", "debug", "trace"])
    up.add_argument("--timeout", type=float, default=30.0, help="seconds for each start-up wait")
    up.set_defaults(fn=cmd_up)

    down = sub.add_parser("down", parents=[common], help="stop and delete everything")
    down.set_defaults(fn=cmd_down)
    status = sub.add_parser("status", parents=[common], help="namespaces, daemons, manager view")
    status.set_defaults(fn=cmd_status)

    ex = sub.add_parser("exec", parents=[common],
                        help="run a command in a namespace, with NETFOLD_* set for hosts")
    ex.add_argument("node")
    ex.add_argument("command", nargs=argparse.REMAINDER)
    ex.set_defaults(fn=cmd_exec)

    ping = sub.add_parser("ping", parents=[common], help="ICMP echo between namespaces")
    ping.add_argument("src")
    ping.add_argument("dst", help="a host or switch name, or an IPv4 address")
    ping.add_argument("-c", "--count", type=int, default=3)
    ping.add_argument("-W", "--wait", type=float, default=1.0, help="seconds per reply")
    ping.set_defaults(fn=cmd_ping)

    counters = sub.add_parser("counters", parents=[common],
                              help="a switch's counters (SwitchAdmin GetCounters)")
    counters.add_argument("switch", help="a switch's name, or all (every switch)")
    counters.add_argument("--json", action="store_true",
                          help="the answer as JSON (with all: one object per line)")
    counters.set_defaults(fn=cmd_counters)

    fault = sub.add_parser("fault", parents=[common],
                           help="set link faults on a running switch (SwitchAdmin.SetLinkFault)")
    fault.add_argument("switch")
    fault.add_argument("impairment", help="docs/transport.md syntax, e.g. drop=0.05,seed=3; "
                                          "down=1; none clears")
    fault.add_argument("--peer", default="all",
                       help="all (default), default, a switch name, or a peer's ip:port")
    fault.add_argument("--direction", choices=["both", "send", "receive"], default="both")
    fault.set_defaults(fn=cmd_fault)

    mpi = sub.add_parser("mpirun", parents=[common],
                         help="mpirun across the host namespaces with libnetfold_mpi.so")
    mpi.add_argument("-np", "--np", type=int, default=0, help="ranks (default: every host)")
    mpi.add_argument("--hosts", help="comma-separated hosts, in rank order")
    mpi.add_argument("--ranks-per-host", type=int, default=1, metavar="N",
                     help="N ranks in each host namespace, ranks r*N .. r*N+N-1 on the r-th "
                          "host (they share its link; the interposer's node hierarchy, "
                          "docs/mpi.md)")
    mpi.add_argument("-x", "--env", action="append", metavar="NAME=VALUE",
                     help="an environment variable for the ranks (repeatable)")
    mpi.add_argument("--mpirun-arg", action="append", metavar="ARGS",
                     help="more mpirun arguments, e.g. '--mca btl_base_verbose 30'")
    mpi.add_argument("--interposer", help="libnetfold_mpi.so (default: the build's)")
    mpi.add_argument("--no-preload", action="store_true", help="plain MPI, no interposer")
    mpi.add_argument("--print", action="store_true", help="print the command instead")
    mpi.add_argument("command", nargs=argparse.REMAINDER)
    mpi.set_defaults(fn=cmd_mpirun)

    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except TestbedError as e:
        log(str(e))
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `... | head`
        sys.stderr.close()
        return 0
