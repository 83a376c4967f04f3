"""The topology file and the plan: reads the manager's topology YAML, checks
what the testbed relies on (names, a loop-free set of links, slot sizes),
parses --rate, and derives every name and address `up` creates.
"""

import ipaddress
import os
import re

from .errors import TestbedError

DEFAULT_PREFIX = "nft"
SWITCHD_SLOT_BYTES = 4048   # the largest slot with a 4096-byte path MTU

NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,9}$")


def load_topology(path):
    """The manager's topology file (manager/topology.h). Checks what the
    testbed relies on; the manager validates the rest when it starts."""
    try:
        import yaml
    except ImportError:
        raise TestbedError("PyYAML is missing: apt-get install python3-yaml "
                           "(deploy/install-deps.sh), and run with /usr/bin/python3")
    try:
        with open(path) as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise TestbedError(f"cannot read the topology {path}: {e.strerror}")
    except yaml.YAMLError as e:
        raise TestbedError(f"{path} is not valid YAML: {e}")
    if not isinstance(doc, dict):
        raise TestbedError(f"{path}: expected a mapping with switches, links and hosts")

    def entries(key):
        value = doc.get(key) or []
        if not isinstance(value, list):
            raise TestbedError(f"{path}: '{key}' must be a list")
        return value

    defaults = (doc.get("defaults") or {}).get("capacity") or {}
    switches, hosts, links = [], [], []
    for i, s in enumerate(entries("switches")):
        if not isinstance(s, dict) or not NAME_RE.match(str(s.get("name", ""))):
            raise TestbedError(f"{path}: switches[{i}] needs a name of 1..64 [A-Za-z0-9._-]")
        capacity = dict(defaults)
        capacity.update(s.get("capacity") or {})
        switches.append({"name": str(s["name"]), "tier": int(s.get("tier", 0)),
                         "capacity": capacity})
    names = {s["name"] for s in switches}
    if len(names) != len(switches):
        raise TestbedError(f"{path}: two switches have the same name")
    for i, link in enumerate(entries("links")):
        if not isinstance(link, list) or len(link) != 2 or not all(str(e) in names for e in link):
            raise TestbedError(f"{path}: links[{i}] must be [switch, switch] of known switches")
        links.append((str(link[0]), str(link[1])))
    for i, h in enumerate(entries("hosts")):
        if not isinstance(h, dict) or not NAME_RE.match(str(h.get("name", ""))):
            raise TestbedError(f"{path}: hosts[{i}] needs a name of 1..64 [A-Za-z0-9._-]")
        if str(h.get("switch")) not in names:
            raise TestbedError(f"{path}: host {h['name']} is on unknown switch {h.get('switch')}")
        hosts.append({"name": str(h["name"]), "switch": str(h["switch"])})
    host_names = {h["name"] for h in hosts}
    if len(host_names) != len(hosts):
        raise TestbedError(f"{path}: two hosts have the same name")
    if host_names & names:
        raise TestbedError(f"{path}: {sorted(host_names & names)[0]} names both a switch and a "
                           "host; the testbed names a namespace after each")
    if not switches or not hosts:
        raise TestbedError(f"{path}: a testbed needs at least one switch and one host")
    check_loop_free(path, switches, links)
    for s in switches:
        if int(s["capacity"].get("slot_bytes", 0)) > SWITCHD_SLOT_BYTES:
            raise TestbedError(
                f"{path}: switch {s['name']} declares slot_bytes {s['capacity']['slot_bytes']}, "
                f"more than a switch can offer with a 4096-byte MTU ({SWITCHD_SLOT_BYTES}); "
                "the manager would refuse its registration")
    return {"name": str(doc.get("name", "")), "switches": switches, "links": links,
            "hosts": hosts}


def check_loop_free(path, switches, links):
    """The DPDK switch is a learning bridge without spanning tree (and the
    Linux bridges of the udp backend run without STP, to match): a loop of
    links would flood broadcasts forever. Refuse it, naming the loop."""
    parent = {s["name"]: s["name"] for s in switches}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    adjacency = {s["name"]: [] for s in switches}
    for a, b in links:
        if find(a) == find(b):
            # The loop: the tree path from b to a, closed by this link.
            route = tree_path(adjacency, b, a)
            raise TestbedError(
                f"{path} has a loop of switch links ({' - '.join(route + [b])}): the emulated "
                "switches are learning bridges without spanning tree, so the testbed only "
                "builds loop-free topologies (trees, e.g. deploy/topologies/two_level.yaml). "
                "The manager itself plans trees over any topology; use netfold up for those.")
        parent[find(a)] = find(b)
        adjacency[a].append(b)
        adjacency[b].append(a)


def tree_path(adjacency, start, goal):
    previous = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        if node == goal:
            break
        for nxt in adjacency[node]:
            if nxt not in previous:
                previous[nxt] = node
                queue.append(nxt)
    route, node = [], goal
    while node is not None:
        route.append(node)
        node = previous.get(node)
    return route[::-1]


RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|tbit)$", re.IGNORECASE)
RATE_SCALE = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}


def parse_rates(specs, topo):
    """--rate LINK=RATE: LINK is `all`, a host (its access link), or
    `A:B` (two switches, or a switch and one of its hosts). Returns
    {frozenset(endpoints) or 'all': (rate text, bits per second)}."""
    out = {}
    switches = {s["name"] for s in topo["switches"]}
    host_switch = {h["name"]: h["switch"] for h in topo["hosts"]}
    linked = {frozenset(link) for link in topo["links"]}
    linked |= {frozenset((h, s)) for h, s in host_switch.items()}
    for spec in specs:
        link, sep, rate = spec.partition("=")
        m = RATE_RE.match(rate.strip())
        if not sep or not m:
            raise TestbedError(f"--rate {spec}: expected LINK=RATE with RATE like 100mbit or 1gbit "
                               "(tc's units: bit, kbit, mbit, gbit)")
        bps = float(m.group(1)) * RATE_SCALE[m.group(2).lower()]
        if bps < 8000:
            raise TestbedError(f"--rate {spec}: the rate must be at least 8kbit")
        link = link.strip()
        if link == "all":
            key = "all"
        elif link in host_switch:
            key = frozenset((link, host_switch[link]))
        else:
            a, sep, b = link.partition(":")
            key = frozenset((a, b))
            if not sep or key not in linked:
                raise TestbedError(
                    f"--rate {spec}: no link '{link}' in the topology; name a host (its access "
                    f"link), SWITCH:SWITCH or SWITCH:HOST, or all (switches: "
                    f"{', '.join(sorted(switches))})")
        out[key] = (rate.strip(), bps)
    return out


def build_plan(topo, args):
    """Names and addresses of everything `up` creates, deterministic from the
    topology and the options."""
    prefix = args.prefix
    try:
        data_net = ipaddress.IPv4Network(args.data_net, strict=True)
        mgmt_net = ipaddress.IPv4Network(args.mgmt_net, strict=True)
    except ValueError as e:
        raise TestbedError(f"--data-net/--mgmt-net: {e} (expected a network like 10.77.0.0/16)")
    if data_net.overlaps(mgmt_net):
        raise TestbedError(f"--data-net {data_net} and --mgmt-net {mgmt_net} overlap")
    nodes = [dict(name=s["name"], kind="switch") for s in topo["switches"]]
    nodes += [dict(name=h["name"], kind="host", switch=h["switch"]) for h in topo["hosts"]]
    if len(nodes) + 2 > data_net.num_addresses or len(nodes) + 2 > mgmt_net.num_addresses:
        raise TestbedError(f"{len(nodes)} namespaces do not fit in {data_net} / {mgmt_net}")
    if len(nodes) > 9999:
        raise TestbedError("at most 9999 switches and hosts")
    rates = parse_rates(args.rate or [], topo)
    for i, node in enumerate(nodes):
        node["ns"] = f"{prefix}-{node['name']}"
        node["data_ip"] = str(data_net[1 + i])
        node["mgmt_ip"] = str(mgmt_net[2 + i])
        node["mgmt_root_if"] = f"{prefix}m{i}"
        node["ports"] = []
    by_name = {n["name"]: n for n in nodes}
    links = []

    def add_link(a, b):
        na, nb = by_name[a], by_name[b]
        ifa = f"p{len(na['ports'])}" if na["kind"] == "switch" else "eth0"
        ifb = f"p{len(nb['ports'])}" if nb["kind"] == "switch" else "eth0"
        rate = rates.get(frozenset((a, b)), rates.get("all"))
        link = {"a": a, "b": b, "if_a": ifa, "if_b": ifb,
                "rate": rate[0] if rate else "", "rate_bps": rate[1] if rate else 0}
        na["ports"].append({"if": ifa, "peer": b, "rate": link["rate"]})
        nb["ports"].append({"if": ifb, "peer": a, "rate": link["rate"]})
        links.append(link)

    for a, b in topo["links"]:
        add_link(a, b)
    for h in topo["hosts"]:
        add_link(h["switch"], h["name"])
    # A NIC's offloads on the data veths: with kernel-socket switches the
    # kernel finishes checksums and segments where a NIC would; a DPDK
    # switch reads raw frames and needs them finished (docs/testbed.md).
    offloads = getattr(args, "offloads", "auto")
    if args.backend == "dpdk" and offloads == "on":
        raise TestbedError("--offloads on needs --backend udp: a DPDK switch reads raw frames "
                           "and needs finished checksums and no GSO super-frames")
    return {
        "prefix": prefix,
        "backend": args.backend,
        "offloads": offloads == "on" or (offloads == "auto" and args.backend == "udp"),
        "topology_file": os.path.abspath(args.topology),
        "topology_name": topo["name"],
        "data_net": str(data_net),
        "mgmt_net": str(mgmt_net),
        "mgmt_gateway": str(mgmt_net[1]),
        "mgmt_bridge": f"{prefix}br",
        "mtu": args.mtu,
        "nodes": nodes,
        "links": links,
        "capacities": {s["name"]: s["capacity"] for s in topo["switches"]},
    }
