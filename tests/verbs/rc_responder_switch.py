"""The netfold-switchd that rc_responder_test drives: its static
configuration (127.0.0.1, path MTU 256, one job, four RC QPs whose remote ends
are the test's NICs, one group delivering results over RC), starting it in a
temporary directory, reading its counters with testbed_query, and stopping it.
"""

import json
import os
import signal
import subprocess
import time

from verbs_report import CheckFailed, check, debug, say

# The static configuration the switch gets.
LOCALHOST = "127.0.0.1"
MTU = 256                      # transport.path_mtu
PKEY = 0x8001
JOB = 1
TREE = 0
GROUP = 1
EPOCH = 1
NUM_SLOTS = 8
SLOT_BYTES = 208               # <= path MTU - 40, a multiple of 16
ACK_TIMEOUT_MS = 200           # transport.host_ack_timeout_ms
T_SECONDS = ACK_TIMEOUT_MS / 1000.0


class Switch:
    """netfold-switchd in static mode, configured for the NICs `nics`."""

    def __init__(self, binary, query, tmpdir, nics):
        self.binary = binary
        self.query = query
        self.tmpdir = tmpdir
        self.nics = nics
        self.proc = None
        self.log_path = os.path.join(tmpdir, "switchd.log")
        self.data = None
        self.admin = None

    def config(self):
        qps = []
        children = []
        for n in self.nics:
            qps.append(
                f"    - {{qpn: 0x{n.sw_qpn:x}, psn: 0x{n.sw_first_psn:x}, job: {JOB}, "
                f"pkey: 0x{PKEY:x}, peer: \"NIC {n.name}\",\n"
                f"       remote: {{address: {n.addr[0]}:{n.addr[1]}, qpn: 0x{n.qpn:x}, "
                f"psn: 0x{n.first_psn:x}}}}}")
            if n.in_group:
                children.append(f"{{qpn: 0x{n.sw_qpn:x}, ranks: [{len(children)}]}}")
        return "\n".join([
            "# written by tests/verbs/rc_responder_test.py",
            "name: rc-responder-test",
            "data_address: 127.0.0.1:0",
            "admin_address: 127.0.0.1:0",
            # A lone static switch on loopback in a private directory: its
            # admin API asks no credential (docs/security.md), so the per-QP
            # counters below need admin_detail.
            "auth: none",
            "admin_detail: true",
            "log_level: warning",
            f"data_port_file: {os.path.join(self.tmpdir, 'data.port')}",
            f"admin_port_file: {os.path.join(self.tmpdir, 'admin.port')}",
            f"capacity: {{slot_bytes: {SLOT_BYTES}}}",
            "transport:",
            f"  path_mtu: {MTU}",
            f"  host_ack_timeout_ms: {ACK_TIMEOUT_MS}",
            # ACK at once: the steps below expect each ACK where a NIC that
            # does not delay its ACKs would send it.
            "  ack_delay_us: 0",
            "  retry_count: 7",
            "  idle_wait_us: 1000",
            "static:",
            "  jobs:",
            f"    - {{id: {JOB}, quota: {{groups: 4, slots: 64, qps: 8}}}}",
            "  qps:",
            *qps,
            "  groups:",
            # No multicast: the root delivers results over RC (rc_tree).
            f"    - {{tree: {TREE}, group: {GROUP}, epoch: {EPOCH}, job: {JOB}, "
            f"pkey: 0x{PKEY:x}, qkey: 0x1234, num_slots: {NUM_SLOTS}, "
            f"slot_bytes: {SLOT_BYTES},",
            f"       children: [{', '.join(children)}]}}",
            "",
        ])

    def start(self):
        path = os.path.join(self.tmpdir, "switchd.yaml")
        with open(path, "w") as f:
            f.write(self.config())
        debug("config:\n" + self.config())
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([self.binary, "--config", path], stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        files = [os.path.join(self.tmpdir, f) for f in ("data.port", "admin.port")]
        while not all(os.path.exists(f) for f in files):
            if self.proc.poll() is not None:
                raise CheckFailed(f"netfold-switchd exited with {self.proc.returncode} at "
                                  f"start:\n{self.log_tail()}")
            check(time.monotonic() < deadline,
                  f"netfold-switchd wrote no port files within 15 s:\n{self.log_tail()}")
            time.sleep(0.02)
        ports = [int(open(f).read().strip()) for f in files]
        self.data = (LOCALHOST, ports[0])
        self.admin = f"{LOCALHOST}:{ports[1]}"
        say(f"netfold-switchd pid {self.proc.pid}: data {self.data[0]}:{self.data[1]}, "
            f"admin {self.admin}")

    def log_tail(self, lines=30):
        try:
            with open(self.log_path) as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no log)"

    def counters(self):
        """GetCounters as a dict, or None without --query."""
        if not self.query:
            return None
        try:
            out = subprocess.run([self.query, "counters_detail", self.admin, "--timeout_ms",
                                  "3000"],
                                 capture_output=True, text=True, timeout=10)
        except subprocess.TimeoutExpired:
            raise CheckFailed("testbed_query counters did not answer within 10 s")
        check(out.returncode == 0,
              f"testbed_query counters failed ({out.returncode}): {out.stderr.strip()}")
        return json.loads(out.stdout)

    def stop(self):
        """SIGTERM, then SIGKILL after 5 s; returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.log.close()
        return self.proc.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def switch_drop(counters, name):
    for d in counters.get("drops", []):
        if d["name"] == name:
            return int(d["count"])
    raise CheckFailed(f"GetCounters lists no drop reason {name!r}")


def qp_counters(counters, qpn):
    for q in counters.get("qps", []):
        if int(q["qpn"]) == qpn:
            q = dict(q)
            q["drops"] = {d["name"]: int(d["count"]) for d in q.get("drops", [])}
            return q
    raise CheckFailed(f"GetCounters lists no QP 0x{qpn:06x}")
