#!/usr/bin/python3
"""netfold-testbed trusts its state file only if no other user could have
written it (deploy/testbed/netfold_testbed/state.py, suite unit).

status, counters, fault and mpirun run, as root, the binaries testbed.json
names; a --state-dir another user can write must not let them plant one.
Checks that load_state reads back what save_state wrote (mode 0644 even
under umask 0), and refuses, with a TestbedError naming the reason, a file
writable by its group or by others, a symbolic link, a FIFO (without
blocking), and (as root) a file owned by another user; a missing file is
still "no testbed". Also the mpirun command line the testbed builds, and
the NIC offloads a plan asks for (--offloads). Needs no root (the ownership case is skipped without
it) and no namespace. Exit status: 0 passed, 1 failed.
"""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)),
                                "..", "..", "deploy", "testbed"))
sys.dont_write_bytecode = True

from netfold_testbed.errors import TestbedError  # noqa: E402  (needs the path above)
from netfold_testbed.operations import mpirun_argv  # noqa: E402
from netfold_testbed.state import load_state, save_state, state_path  # noqa: E402
from netfold_testbed.topology import build_plan, load_topology  # noqa: E402

NOBODY = 65534


class MpirunArgvTest(unittest.TestCase):
    """Every host namespace shares this machine's cores: Open MPI must yield
    in its waits, or its ranks starve each other and the kernel's forwarding
    (docs/testbed.md)."""

    def test_open_mpi_yields_when_idle_and_crosses_the_data_net(self):
        import argparse
        with tempfile.TemporaryDirectory(prefix="netfold-testbed-argv-") as d:
            state = {"state_dir": d, "manager": "10.0.0.1:1", "bins": {"rsh_agent": "/x/rsh"},
                     "plan": {"mgmt_net": "10.99.0.0/24", "data_net": "10.0.0.0/24",
                              "nodes": [{"name": f"h{i}", "ns": f"t-h{i}", "kind": "host"}
                                        for i in range(4)]}}
            args = argparse.Namespace(hosts=None, ranks_per_host=1, np=0, command=["--", "./app"],
                                      interposer=None, no_preload=True, env=None, mpirun_arg=None)
            argv = mpirun_argv(state, args)
        pairs = list(zip(argv, argv[1:]))
        self.assertIn(("mpi_yield_when_idle", "1"), pairs)
        self.assertIn(("btl_tcp_if_include", "10.0.0.0/24"), pairs)
        self.assertEqual(argv[-1], "./app")
        self.assertNotIn("LD_PRELOAD", " ".join(argv))


class OffloadsTest(unittest.TestCase):
    """Kernel-socket switches keep a NIC's offloads (checksums and
    segmentation done where a NIC would), DPDK switches need them off."""

    def plan(self, backend, offloads):
        import argparse
        topology = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..",
                                "deploy", "topologies", "testbed_two_level.yaml")
        args = argparse.Namespace(topology=topology, backend=backend, offloads=offloads,
                                  prefix="t", data_net="10.0.0.0/24", mgmt_net="10.1.0.0/24",
                                  mtu=4200, multicast_octet=77, rate=None)
        try:
            return build_plan(load_topology(topology), args)
        except TestbedError as e:
            if "PyYAML is missing" in str(e):
                self.skipTest(str(e))
            raise

    def test_auto_is_on_with_udp_and_off_with_dpdk(self):
        self.assertTrue(self.plan("udp", "auto")["offloads"])
        self.assertFalse(self.plan("dpdk", "auto")["offloads"])
        self.assertFalse(self.plan("udp", "off")["offloads"])
        self.assertTrue(self.plan("udp", "on")["offloads"])
        with self.assertRaises(TestbedError) as refused:
            self.plan("dpdk", "on")
        self.assertIn("needs --backend udp", str(refused.exception))


class StateFileTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="netfold-testbed-state-")
        self.state_dir = self.dir.name
        self.path = state_path(self.state_dir)
        self.state = {"prefix": "t", "state_dir": self.state_dir, "ready": True,
                      "bins": {"cli": "/usr/bin/true"}, "processes": []}

    def tearDown(self):
        self.dir.cleanup()

    def refused(self, reason):
        with self.assertRaises(TestbedError) as caught:
            load_state(self.state_dir)
        self.assertIn(reason, str(caught.exception))

    def test_reads_back_what_it_saved_even_under_umask_0(self):
        old = os.umask(0)
        try:
            save_state(self.state)
        finally:
            os.umask(old)
        self.assertEqual(os.stat(self.path).st_mode & 0o777, 0o644)
        self.assertEqual(load_state(self.state_dir), self.state)
        save_state(self.state)  # replaces the file, also over a stale .tmp
        open(self.path + ".tmp", "w").close()
        save_state(self.state)
        self.assertEqual(load_state(self.state_dir), self.state)

    def test_a_missing_file_is_no_testbed(self):
        self.assertIsNone(load_state(self.state_dir))

    def test_refuses_a_file_others_may_write(self):
        save_state(self.state)
        os.chmod(self.path, 0o646)
        self.refused("writable by its group or others (mode 0646)")

    def test_refuses_a_file_its_group_may_write(self):
        save_state(self.state)
        os.chmod(self.path, 0o664)
        self.refused("writable by its group or others (mode 0664)")

    def test_refuses_a_symbolic_link(self):
        target = os.path.join(self.state_dir, "elsewhere.json")
        with open(target, "w") as f:
            f.write("{}")
        os.symlink(target, self.path)
        self.refused("is a symbolic link")

    def test_refuses_a_fifo_without_blocking(self):
        os.mkfifo(self.path, 0o600)
        self.refused("is not a regular file")

    @unittest.skipUnless(os.geteuid() == 0, "needs root to give the file to another user")
    def test_refuses_a_file_of_another_user(self):
        save_state(self.state)
        os.chown(self.path, NOBODY, NOBODY)
        self.refused(f"is owned by uid {NOBODY}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
