"""The testbed's network: checks that a plan can be built (root, tools, no
testbed of the same prefix, a free management network), then creates its
namespaces, the management bridge and veths, the data veths (bridged for
the udp backend, bare for DPDK) and the tc rate limits.
"""

import ipaddress
import os
import re
import shutil

from .errors import TestbedError
from .netns import (ROOT_LINK_RE, disable_offloads, in_netns, ip, list_namespaces,
                    prepare_namespace, root_links, run)
from .state import save_state


def check_can_build(args, plan):
    if os.geteuid() != 0:
        raise TestbedError("the testbed needs root (network namespaces, veths, DPDK)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise TestbedError(f"{tool} is not installed (apt-get install iproute2)")
    prefix = plan["prefix"]
    taken = [ns for ns in list_namespaces() if ns.startswith(prefix + "-")]
    links = [name for name in root_links() if ROOT_LINK_RE(prefix).match(name)]
    if taken or links:
        raise TestbedError(
            f"a testbed with prefix '{prefix}' exists ({', '.join((taken + links)[:4])}...): "
            f"stop it with `netfold-testbed down --prefix {prefix}` or choose another --prefix")
    mgmt = ipaddress.ip_network(plan["mgmt_net"])
    p = run(["ip", "-4", "-o", "addr", "show"], check=False)
    for line in p.stdout.splitlines():
        m = re.search(r"inet (\S+)", line)
        if m and ipaddress.ip_interface(m.group(1)).network.overlaps(mgmt):
            raise TestbedError(
                f"--mgmt-net {mgmt} overlaps an address of the root namespace "
                f"({line.split()[1]} {m.group(1)}); choose another --mgmt-net")


def create_network(plan, state):
    nodes = plan["nodes"]
    mtu = str(plan["mtu"])
    prefix_len = ipaddress.ip_network(plan["data_net"]).prefixlen
    mgmt_len = ipaddress.ip_network(plan["mgmt_net"]).prefixlen
    for node in nodes:
        run(["ip", "netns", "add", node["ns"]])
        state["namespaces"].append(node["ns"])
        save_state(state)
        ip("link", "set", "lo", "up", ns=node["ns"])
        in_netns(node["ns"], lambda: prepare_namespace([]))
    # Management: a bridge in the root namespace, a veth into every namespace.
    bridge = plan["mgmt_bridge"]
    ip("link", "add", bridge, "type", "bridge", "stp_state", "0", "forward_delay", "0")
    state["root_links"].append(bridge)
    save_state(state)
    ip("addr", "add", f"{plan['mgmt_gateway']}/{mgmt_len}", "dev", bridge)
    ip("link", "set", bridge, "up")
    for node in nodes:
        ip("link", "add", node["mgmt_root_if"], "type", "veth", "peer", "name", "mgmt0",
           "netns", node["ns"])
        state["root_links"].append(node["mgmt_root_if"])
        save_state(state)
        ip("link", "set", node["mgmt_root_if"], "master", bridge, "up")
        ip("addr", "add", f"{node['mgmt_ip']}/{mgmt_len}", "dev", "mgmt0", ns=node["ns"])
        ip("link", "set", "mgmt0", "up", ns=node["ns"])
    # Data: one veth per link, created straight between the two namespaces.
    by_name = {n["name"]: n for n in nodes}
    for link in plan["links"]:
        a, b = by_name[link["a"]], by_name[link["b"]]
        ip("link", "add", link["if_a"], "netns", a["ns"], "mtu", mtu, "type", "veth",
           "peer", "name", link["if_b"], "netns", b["ns"], "mtu", mtu)
    for node in nodes:
        ns = node["ns"]
        ifs = [p["if"] for p in node["ports"]]
        if not plan.get("offloads", False):
            in_netns(ns, lambda ifs=ifs: disable_offloads(ifs))
        if node["kind"] == "host":
            ip("addr", "add", f"{node['data_ip']}/{prefix_len}", "dev", "eth0", ns=ns)
            ip("link", "set", "eth0", "up", ns=ns)
            # UD multicast results arrive on the data interface.
            ip("route", "add", "224.0.0.0/4", "dev", "eth0", ns=ns)
        elif plan["backend"] == "udp":
            # The kernel-socket switch: its ports in a Linux bridge that carries
            # the switch's address, so ping and MPI's TCP cross it as with DPDK.
            ip("link", "add", "br0", "mtu", mtu, "type", "bridge", "stp_state", "0",
               "forward_delay", "0", "mcast_snooping", "0", ns=ns)
            for port in ifs:
                ip("link", "set", port, "master", "br0", "up", ns=ns)
            ip("addr", "add", f"{node['data_ip']}/{prefix_len}", "dev", "br0", ns=ns)
            ip("link", "set", "br0", "up", ns=ns)
            ip("route", "add", "224.0.0.0/4", "dev", "br0", ns=ns)
        else:
            # DPDK owns these ends through net_af_packet: up, no address.
            for port in ifs:
                ip("link", "set", port, "up", ns=ns)
    for link in plan["links"]:
        if not link["rate"]:
            continue
        bps = link["rate_bps"]
        # A burst of at least three frames, else 4 ms at the rate.
        burst = max(3 * plan["mtu"], int(bps / 8 * 0.004))
        for side in ("a", "b"):
            run(["tc", "-n", by_name[link[side]]["ns"], "qdisc", "replace", "dev",
                 link[f"if_{side}"], "root", "tbf", "rate", link["rate"], "burst", str(burst),
                 "latency", "50ms"])
