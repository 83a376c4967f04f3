#!/usr/bin/python3
"""Drives netfold-switchd's RC queue pairs the way a RoCE NIC would.

The packets come from an implementation independent of netfold's proto/:
scapy's RoCE layer (Debian python3-scapy, scapy.contrib.roce: BTH, AETH and
its RoCEv2 ICRC), sent over plain UDP sockets. The aggregation header is
packed with struct from the table in docs/protocol.md. This file holds the
checks; beside it, roce_packets.py builds and parses the packets,
roce_nic.py is a NIC (one RC QP on a UDP socket, the rules every reply
follows), rc_responder_switch.py the switch's static config and process, and
verbs_report.py the messages and check().

The test starts netfold-switchd in static mode on 127.0.0.1 (a temporary
directory, path MTU 256, one job, one group delivering results over RC, and
four RC QPs with fixed QPNs and PSNs whose remote ends are this process's
UDP sockets), then plays four "NICs":

  NIC A (rank 0, switch QP 0x1000)   the responder rules, PSNs across the wrap
  NIC B (rank 1, switch QP 0x1001)   the second child of the group
  NIC C (switch QP 0x1002)           an invalid request (not in any group)
  NIC D (switch QP 0x1003)           an RDMA WRITE (not implemented; not in any group)

and checks, packet by packet, the IBTA Vol. 1 chapter 9 rules for RC:

  responder (the switch answering our SENDs)
    - an RC SEND_ONLY with AckReq gets one RC ACKNOWLEDGE: DestQP = our QPN,
      PSN = the PSN acknowledged, AETH syndrome ACK (credits 0x1F), MSN =
      messages completed; SEND_ONLY_WITH_IMMEDIATE and padded payloads too;
    - coalescing: SENDs without AckReq followed by one with it get one ACK of
      the last PSN; a burst all with AckReq gets at most one ACK per packet,
      PSNs increasing, the last one acknowledged;
    - SEND_FIRST/MIDDLE/LAST (full 256-byte MTU) across the PSN wrap
      0xFFFFFF -> 0: one message (MSN + 1); an ACK asked for in the middle
      of a message does not count the message;
    - a PSN gap gets one NAK (PSN sequence error) at the expected PSN, and
      no second NAK for the same gap; going back (go-back-N) is ACKed and
      the packets after the gap were not delivered; a new gap gets a new NAK;
    - a duplicate (an acknowledged PSN, recent or old) is re-ACKed at the
      last PSN with the MSN unchanged: not delivered twice;
    - silently dropped (no reply, the QP state untouched): a bad ICRC, a
      corrupted payload, a foreign P_Key, an unknown QPN, TVer 1; accepted:
      FECN set (the ICRC masks it), a limited-member P_Key (0x0001 against
      0x8001);
    - an invalid request (SEND_MIDDLE outside a message) gets NAK invalid
      request at that PSN, and the QP then answers nothing (ERROR);
    - an RDMA WRITE (which netfold does not implement) is dropped unanswered
      and counted as unsupported_opcode; the QP stays up and takes a SEND at
      that same PSN (one forged packet must not stop a job: issue 23);
  requester (the switch sending us aggregation results)
    - both children post an int32 sum allreduce (delivery rc_tree); each gets
      a result as an RC SEND_ONLY with AckReq at the switch's PSN, with the
      exact sums;
    - NIC A does not ACK: the switch retransmits the same PSN with the same
      bytes after its ACK timeout (200 ms here), then after twice that
      (exponential backoff); once ACKed, it stops;
    - two results outstanding across the switch's PSN wrap, acknowledged by
      one coalesced ACK of the last PSN: no retransmission;
    - a NAK (PSN sequence error) at an earlier PSN makes the switch go back
      and resend from that PSN at once (well before the timeout);
    - an RNR NAK (timer code 26 = 81.92 ms, IBTA table 45) makes it wait that
      long, then resend the same bytes;
  every reply: from the switch's data address, a multiple of 4 bytes, TVer 0,
  the job's P_Key, our QPN, reserved bits zero, and an ICRC that verifies
  (recomputed with scapy and, separately, with zlib over the masked
  pseudo-header of docs/protocol.md).

With --query (build/tests/testbed/testbed_query) it also reads the switch's
counters (SwitchAdmin.GetCounters): every silent drop counted with its reason,
the junk messages handed to the aggregation layer exactly once (duplicates
not delivered twice), the retransmissions, the QP in ERROR, the operations.
At the end the switch must exit 0 on SIGTERM.

  /usr/bin/python3 tests/verbs/rc_responder_test.py \\
      --switchd build/switch/netfold-switchd \\
      --query build/tests/testbed/testbed_query [-v]

Exit status: 0 every check passed, 1 the first failed check (printed), 77
skipped (scapy's RoCE layer or the switchd binary missing), 2 bad usage.
Every wait has a deadline; the switch is killed and the temporary directory
removed in every case. Runs in about 8 seconds.
"""

import argparse
import os
import shutil
import signal
import struct
import sys
import tempfile
import time

import verbs_report
from rc_responder_switch import (ACK_TIMEOUT_MS, EPOCH, GROUP, LOCALHOST, MTU, PKEY, TREE,
                                 T_SECONDS, Switch, qp_counters, switch_drop)
from roce_nic import Nic, check_ack
from roce_packets import (AGG_FORMAT, AGG_SIZE, COLL_ALLREDUCE, DELIVERY_RC_TREE,
                          DTYPE_INT32, FLAG_HAS_DATA, GOLDEN_HEADER, OP_SUM, RC_ACK,
                          RC_RDMA_WRITE_ONLY, RC_SEND_FIRST, RC_SEND_LAST, RC_SEND_LAST_IMM,
                          RC_SEND_MIDDLE, RC_SEND_ONLY, RC_SEND_ONLY_IMM, SCAPY_ERROR,
                          SYNDROME_ACK, SYNDROME_NAK_INVALID, SYNDROME_NAK_PSN_SEQ,
                          TYPE_REQUEST, TYPE_RESULT, agg_header, psn_add, psn_diff,
                          same_packet)
from verbs_report import CheckFailed, check, say

SKIP = 77

# IBTA Vol. 1 table 45: the RNR NAK timer field, in milliseconds.
RNR_TIMER_MS = [655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32,
                0.48, 0.64, 0.96, 1.28, 1.92, 2.56, 3.84, 5.12, 7.68, 10.24, 15.36,
                20.48, 30.72, 40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52]
RNR_CODE = 26
# name, switch QPN, switch first PSN, our QPN, our first PSN, group child?
NIC_SPECS = [
    # A's own PSNs start 12 before the wrap: its multi-packet message crosses
    # 0xFFFFFF -> 0; the switch's results to A cross it too (0xFFFFFE..0).
    ("A", 0x1000, 0xFFFFFE, 0x000200, 0xFFFFF4, True),
    ("B", 0x1001, 0x000300, 0x000201, 0x000100, True),
    ("C", 0x1002, 0x654321, 0x000202, 0x123456, False),
    ("D", 0x1003, 0x000777, 0x000203, 0x000888, False),
]


class Terminated(BaseException):
    """SIGTERM (meson's timeout): unwind so that the finally block runs."""


def on_sigterm(signum, frame):
    raise Terminated()


def junk_message(tag, length):
    """A message the aggregation layer drops as bad_version (header version 2),
    so the transport tests cause no aggregation traffic; each one delivered
    bumps the switch's aggregation.bad_version counter exactly once."""
    body = bytes((tag * 7 + i) & 0xFF for i in range(max(0, length - AGG_SIZE)))
    header = agg_header(1, 1, DTYPE_INT32, OP_SUM, DELIVERY_RC_TREE, 0, 0, TREE,
                        GROUP, EPOCH, 0, 0, tag, version=2)
    return (header + body)[:length] if length >= AGG_SIZE else header[:length]


# ---------------------------------------------------------------------------
# The checks.

QUIET = 0.25  # seconds of silence that stand for "no reply"


class Test:
    def __init__(self, switch, nics):
        self.sw = switch
        self.a, self.b, self.c, self.d = nics
        self.junk_delivered = 0  # distinct junk messages the switch must hand up
        self.counters_before = None

    def step(self, text):
        say(text)

    def junk(self, nic, length, **kw):
        """Posts one junk message (expected to be delivered once)."""
        self.junk_delivered += 1
        return nic.post(junk_message(self.junk_delivered, length), **kw)

    # -- responder ---------------------------------------------------------

    def connect_and_send(self):
        a = self.a
        self.step("A: SEND_ONLY with AckReq -> one ACK at its PSN, MSN 1")
        [(psn, _, _)] = self.junk(a, 64)
        a.sw_msn += 1
        a.expect_ack(psn, a.sw_msn, f"SEND_ONLY PSN 0x{psn:06x}")
        a.expect_silence(QUIET, "one SEND, one ACK")

    def coalescing(self):
        a = self.a
        self.step("A: 3 SENDs (pad 3, empty, 48 B), AckReq on the last only -> one ACK of the last")
        self.junk(a, 45, ackreq="none")
        a.post(b"", ackreq="none")  # 0 bytes: aggregation.truncated, not junk
        [(last, _, _)] = self.junk(a, 48)
        a.sw_msn += 3
        a.expect_ack(last, a.sw_msn, "three SENDs (coalesced)")
        a.expect_silence(QUIET, "one ACK covers the three SENDs")

        self.step("A: a burst of 4 SENDs all with AckReq -> ACKs (maybe coalesced), "
                  "increasing, MSN per PSN, the last acknowledged")
        sent = []
        for i in range(4):
            [(psn, _, _)] = self.junk(a, 40 + 4 * i)
            sent.append(psn)
        msn_at = {psn: a.sw_msn + i + 1 for i, psn in enumerate(sent)}
        a.sw_msn += 4
        acks = []
        while not acks or acks[-1].psn != sent[-1]:
            r = a.expect(f"ACKs up to PSN 0x{sent[-1]:06x}")
            check(r.opcode == RC_ACK and r.syndrome == SYNDROME_ACK,
                  f"NIC A: burst: expected ACKs, got {r.describe()}")
            check(r.psn in msn_at, f"NIC A: burst: ACK of PSN 0x{r.psn:06x}, which we did not send"
                  f" ({[hex(p) for p in sent]})")
            if acks:
                check(psn_diff(r.psn, acks[-1].psn) > 0, f"NIC A: burst: ACK PSNs not "
                      f"increasing: 0x{acks[-1].psn:06x} then 0x{r.psn:06x}")
            check(r.msn == msn_at[r.psn],
                  f"NIC A: burst: ACK of PSN 0x{r.psn:06x} carries MSN {r.msn}, "
                  f"expected {msn_at[r.psn]}")
            acks.append(r)
        a.expect_silence(QUIET, "nothing after the ACK of the last PSN")
        say(f"  4 SENDs with AckReq were answered by {len(acks)} ACK(s)")

    def immediate(self):
        a = self.a
        self.step("A: SEND_ONLY_WITH_IMMEDIATE -> ACK")
        [(psn, op, _)] = self.junk(a, 52, imm=0xDEADBEEF)
        check(op == RC_SEND_ONLY_IMM, "internal: not SEND_ONLY_WITH_IMMEDIATE")
        a.sw_msn += 1
        a.expect_ack(psn, a.sw_msn, "SEND_ONLY_WITH_IMMEDIATE")

    def multi_packet(self):
        a = self.a
        self.step("A: SEND_FIRST, MIDDLE, MIDDLE, LAST (MTU 256) across PSN 0xFFFFFF -> 0 "
                  "-> one ACK, MSN + 1")
        pkts = self.junk(a, 3 * MTU + 100)
        ops = [op for _, op, _ in pkts]
        check(ops == [RC_SEND_FIRST, RC_SEND_MIDDLE, RC_SEND_MIDDLE, RC_SEND_LAST],
              f"internal: opcodes {ops}")
        check(pkts[0][0] > pkts[-1][0],
              f"internal: the message should cross the PSN wrap: 0x{pkts[0][0]:06x}.."
              f"0x{pkts[-1][0]:06x}")
        a.sw_msn += 1
        a.expect_ack(pkts[-1][0], a.sw_msn, "a 4-packet message across the wrap")
        a.expect_silence(QUIET, "AckReq on the last packet only")

        self.step("A: FIRST, MIDDLE (AckReq), LAST_WITH_IMMEDIATE (AckReq) -> the MIDDLE's ACK "
                  "does not count the message")
        pkts = self.junk(a, 2 * MTU + 8, ackreq={1, 2}, imm=7)
        check([op for _, op, _ in pkts] == [RC_SEND_FIRST, RC_SEND_MIDDLE, RC_SEND_LAST_IMM],
              "internal: opcodes")
        mid, last = pkts[1][0], pkts[2][0]
        r = a.expect("ACK of the MIDDLE or of the LAST")
        if r.psn == mid:
            check_ack(r, mid, a.sw_msn, SYNDROME_ACK, "NIC A: ACK inside a message")
            r = a.expect("ACK of the LAST")
        a.sw_msn += 1
        check_ack(r, last, a.sw_msn, SYNDROME_ACK, "NIC A: ACK of SEND_LAST_WITH_IMMEDIATE")
        a.expect_silence(QUIET, "nothing after the ACK of the LAST")

    def sequence_errors(self):
        a = self.a
        e = a.psn
        self.step(f"A: PSN gap (send 0x{psn_add(e, 1):06x}, expected 0x{e:06x}) -> one NAK "
                  "(PSN sequence error) at the expected PSN")
        m1 = junk_message(900, 64)
        m2 = junk_message(901, 64)
        m3 = junk_message(902, 64)
        a.send(RC_SEND_ONLY, m2, psn=psn_add(e, 1), ackreq=True)
        a.expect_ack(e, a.sw_msn, "a SEND past a PSN gap", syndrome=SYNDROME_NAK_PSN_SEQ)
        self.step("A: another SEND past the same gap -> no second NAK")
        a.send(RC_SEND_ONLY, m3, psn=psn_add(e, 2), ackreq=True)
        a.expect_silence(QUIET, "one NAK per sequence error")
        self.step("A: go back to the expected PSN and resend the three -> ACK, MSN + 3")
        for i, m in enumerate((m1, m2, m3)):
            self.junk_delivered += 1
            a.send(RC_SEND_ONLY, m, psn=psn_add(e, i), ackreq=(i == 2))
        a.psn = psn_add(e, 3)
        a.sw_msn += 3  # not 5: the two packets past the gap were not delivered
        a.expect_ack(psn_add(e, 2), a.sw_msn, "the go-back-N resend")
        a.expect_silence(QUIET, "one ACK for the resend")

        e = a.psn
        self.step("A: a new gap after recovery -> a new NAK")
        a.send(RC_SEND_ONLY, junk_message(903, 44), psn=psn_add(e, 1), ackreq=True)
        a.expect_ack(e, a.sw_msn, "a second gap", syndrome=SYNDROME_NAK_PSN_SEQ)
        self.junk(a, 44)
        a.sw_msn += 1
        a.expect_ack(e, a.sw_msn, "filling the second gap")

    def duplicates(self):
        a = self.a
        last = psn_add(a.psn, -1)
        self.step(f"A: duplicate of the last PSN 0x{last:06x} -> re-ACK, MSN unchanged")
        a.send(RC_SEND_ONLY, junk_message(950, 44), psn=last, ackreq=True)
        a.expect_ack(last, a.sw_msn, "a duplicate SEND (not delivered twice)")
        old = a.first_psn
        self.step(f"A: duplicate of an old PSN 0x{old:06x} -> ACK at the last PSN, MSN unchanged")
        a.send(RC_SEND_ONLY, junk_message(951, 64), psn=old, ackreq=True)
        a.expect_ack(last, a.sw_msn, "an old duplicate SEND (coalesced re-ACK)")
        a.expect_silence(QUIET, "one re-ACK per duplicate")

    def silent_drops(self):
        a = self.a
        e = a.psn
        msg = junk_message(960, 64)
        good = a.packet(RC_SEND_ONLY, msg, psn=e, ackreq=True)
        bad_icrc = good[:-1] + bytes([good[-1] ^ 0x01])
        corrupt = bytearray(good)
        corrupt[20] ^= 0x40
        cases = [
            ("a bad ICRC", bad_icrc),
            ("a corrupted payload byte (ICRC of the original)", bytes(corrupt)),
            ("P_Key 0x8002 (another partition)",
             a.packet(RC_SEND_ONLY, msg, psn=e, ackreq=True, pkey=0x8002)),
            ("an unknown QPN 0x001fff",
             a.packet(RC_SEND_ONLY, msg, psn=e, ackreq=True, dqpn=0x001FFF)),
            ("BTH.TVer 1", a.packet(RC_SEND_ONLY, msg, psn=e, ackreq=True, tver=1)),
        ]
        for what, wire in cases:
            self.step(f"A: a SEND at the expected PSN with {what} -> dropped silently")
            a.send_wire(wire, what)
            a.expect_silence(QUIET, f"a packet with {what} is dropped")
        self.step("A: the expected PSN, intact, with FECN set -> ACK (none of the drops was "
                  "consumed; the ICRC masks FECN)")
        self.junk_delivered += 1
        a.send(RC_SEND_ONLY, msg, psn=e, ackreq=True, fecn=1)
        a.psn = psn_add(e, 1)
        a.sw_msn += 1
        a.expect_ack(e, a.sw_msn, "a FECN-marked SEND after five dropped packets")
        self.step("A: P_Key 0x0001 (limited member; the switch is a full member) -> ACK")
        self.junk_delivered += 1
        a.send(RC_SEND_ONLY, junk_message(961, 40), psn=a.psn, ackreq=True, pkey=0x0001)
        a.sw_msn += 1
        a.expect_ack(a.psn, a.sw_msn, "a SEND with a limited-member P_Key")
        a.psn = psn_add(a.psn, 1)

    def invalid_request(self):
        c = self.c
        self.step("C: SEND_MIDDLE outside a message -> NAK (invalid request) at its PSN, "
                  "then the QP answers nothing (ERROR)")
        c.send(RC_SEND_MIDDLE, b"\0" * MTU, psn=c.psn, ackreq=True)
        c.expect_ack(c.psn, 0, "SEND_MIDDLE outside a message", syndrome=SYNDROME_NAK_INVALID)
        c.send(RC_SEND_ONLY, junk_message(970, 40), psn=c.psn, ackreq=True)
        c.expect_silence(QUIET, "a QP in ERROR does not respond")

    def unsupported_request(self):
        d = self.d
        self.step("D: RDMA WRITE ONLY (not implemented) at the expected PSN -> dropped "
                  "unanswered; a SEND at the same PSN is then ACKed (the QP stays up)")
        d.send(RC_RDMA_WRITE_ONLY, b"\0" * 16 + junk_message(980, 40), psn=d.psn, ackreq=True)
        d.expect_silence(QUIET, "an RDMA WRITE is dropped")
        self.junk_delivered += 1
        d.send(RC_SEND_ONLY, junk_message(981, 40), psn=d.psn, ackreq=True)
        d.sw_msn += 1
        d.expect_ack(d.psn, d.sw_msn, "a SEND after a dropped RDMA WRITE")
        d.psn = psn_add(d.psn, 1)

    # -- requester ---------------------------------------------------------

    def request(self, nic, seq, values):
        header = agg_header(TYPE_REQUEST, COLL_ALLREDUCE, DTYPE_INT32, OP_SUM,
                            DELIVERY_RC_TREE, 0, FLAG_HAS_DATA, TREE, GROUP, EPOCH, 0,
                            len(values), seq)
        [(psn, _, _)] = nic.post(header + struct.pack(f"<{len(values)}i", *values))
        nic.sw_msn += 1
        return psn

    def check_result(self, nic, r, seq, expected):
        what = f"NIC {nic.name}: the result of seq {seq}"
        check(r.opcode == RC_SEND_ONLY,
              f"{what}: expected an RC SEND_ONLY, got {r.describe()}")
        check(r.ackreq == 1, f"{what}: the last packet of a message must ask for an ACK")
        check(r.psn == nic.rx_psn,
              f"{what}: PSN 0x{r.psn:06x}, expected the next in sequence 0x{nic.rx_psn:06x}")
        n = len(expected)
        check(len(r.payload) == AGG_SIZE + 4 * n,
              f"{what}: {len(r.payload)} bytes, expected {AGG_SIZE + 4 * n}")
        h = struct.unpack(AGG_FORMAT, r.payload[:AGG_SIZE])
        want = (1, TYPE_RESULT, COLL_ALLREDUCE, DTYPE_INT32, OP_SUM, DELIVERY_RC_TREE, 0,
                FLAG_HAS_DATA, TREE, 0, GROUP, EPOCH, 0, n, 0, seq)
        check(h == want, f"{what}: header {h}, expected {want}")
        got = list(struct.unpack(f"<{n}i", r.payload[AGG_SIZE:]))
        check(got == expected, f"{what}: elements {got}, expected {expected}")

    def gather(self, nic, want_acks, want_sends, what, timeout=3.0):
        """Collects replies until `want_acks` ACKs and `want_sends` SENDs came."""
        acks, sends = [], []
        deadline = time.monotonic() + timeout
        while len(acks) < want_acks or len(sends) < want_sends:
            left = deadline - time.monotonic()
            r = nic.receive(max(left, 0))
            check(r is not None, f"NIC {nic.name}: {what}: got {len(acks)} ACK(s) and "
                  f"{len(sends)} SEND(s) within {timeout} s, expected {want_acks} and {want_sends}")
            (acks if r.opcode == RC_ACK else sends).append(r)
        return acks, sends

    def aggregation_and_retransmission(self):
        a, b = self.a, self.b
        T = ACK_TIMEOUT_MS / 1000.0
        va = [i * 1000 - 7 for i in range(16)]
        vb = [-i * 3 + 100000 for i in range(16)]
        sums = [x + y for x, y in zip(va, vb)]
        self.step("A, B: allreduce int32 sum seq 0 (rc_tree) -> ACKs, then a result to each "
                  "at the switch's PSN with the exact sums")
        pa = self.request(a, 0, va)
        pb = self.request(b, 0, vb)
        acks_a, [ra] = self.gather(a, 1, 1, "request seq 0")
        acks_b, [rb] = self.gather(b, 1, 1, "request seq 0")
        # B acknowledges at once, before the checks (scapy's are slow on a
        # loaded machine, and the switch resends after T); A does not.
        b.rx_msn += 1
        b.ack(rb.psn, b.rx_msn)
        check_ack(acks_a[0], pa, a.sw_msn, SYNDROME_ACK, "NIC A: request seq 0")
        check_ack(acks_b[0], pb, b.sw_msn, SYNDROME_ACK, "NIC B: request seq 0")
        self.check_result(a, ra, 0, sums)
        self.check_result(b, rb, 0, sums)
        b.rx_psn = psn_add(b.rx_psn, 1)

        self.step(f"A: no ACK -> the switch resends PSN 0x{ra.psn:06x}, same bytes, after "
                  f"~{ACK_TIMEOUT_MS} ms, then after ~{2 * ACK_TIMEOUT_MS} ms")
        r1 = a.expect("a retransmission of the result", timeout=T + 2.0)
        r2 = a.expect("a second retransmission of the result", timeout=2 * T + 2.0)
        for i, r in enumerate((r1, r2), 1):
            check(same_packet(r, ra),
                  f"NIC A: retransmission {i} differs from the original:\n  {ra.wire.hex()}\n"
                  f"  {r.wire.hex()}")
        g1, g2 = r1.t - ra.t, r2.t - r1.t
        say(f"  retransmitted after {g1 * 1000:.0f} ms, then {g2 * 1000:.0f} ms "
            f"(timeout {ACK_TIMEOUT_MS} ms)")
        check(g1 >= 0.8 * T, f"NIC A: retransmitted after {g1 * 1000:.0f} ms, before the "
              f"ACK timeout of {ACK_TIMEOUT_MS} ms")
        check(g2 >= 1.6 * T, f"NIC A: the second retransmission came {g2 * 1000:.0f} ms after "
              f"the first: the timeout should have doubled to {2 * ACK_TIMEOUT_MS} ms")
        b.expect_silence(0.01, "B acknowledged its result: no retransmission")
        a.rx_msn += 1
        a.ack(ra.psn, a.rx_msn)
        a.rx_psn = psn_add(a.rx_psn, 1)
        a.expect_silence(4 * T + QUIET, "A acknowledged: no more retransmissions")
        b.expect_silence(0.01, "B acknowledged: no retransmission")

        self.step("A, B: seq 1 and seq 2 back to back -> A's results cross the switch's "
                  "PSN wrap; one coalesced ACK of the last covers both")
        va1 = [5 * i - 40 for i in range(12)]
        vb1 = [-(1 << 30) + i for i in range(12)]
        va2 = [1 << 20] * 4
        vb2 = [-1, -2, -3, -(1 << 21)]
        self.request(a, 1, va1)
        pa2 = self.request(a, 2, va2)
        self.request(b, 1, vb1)
        pb2 = self.request(b, 2, vb2)
        # Answer the switch at once (before its ACK timeout), check afterwards.
        acks_a, sends_a = self.gather(a, 0, 2, "requests seq 1, 2")
        a.rx_msn += 2
        a.ack(sends_a[1].psn, a.rx_msn)
        acks_b, sends_b = self.gather(b, 0, 2, "requests seq 1, 2")
        t_nak = time.time()
        b.nak_sequence(sends_b[0].psn, b.rx_msn)

        s1 = [x + y for x, y in zip(va1, vb1)]
        s2 = [x + y for x, y in zip(va2, vb2)]
        for nic, sends in ((a, sends_a), (b, sends_b)):
            self.check_result(nic, sends[0], 1, s1)
            nic.rx_psn = psn_add(nic.rx_psn, 1)
            self.check_result(nic, sends[1], 2, s2)
            nic.rx_psn = psn_add(nic.rx_psn, 1)
        check(sends_a[0].psn == 0xFFFFFF and sends_a[1].psn == 0,
              f"internal: A's results should be at 0xffffff and 0x000000, got "
              f"0x{sends_a[0].psn:06x}, 0x{sends_a[1].psn:06x}")
        self.step(f"B: NAK (PSN sequence error) at 0x{sends_b[0].psn:06x} -> the switch goes "
                  "back and resends both at once (well within the ACK timeout), same bytes")
        late_acks, again = self.gather(b, 0, 2, "go-back-N after our NAK", timeout=T / 2)
        acks_b += late_acks
        for orig, r in zip(sends_b, again):
            check(same_packet(r, orig), f"NIC B: the resend of PSN 0x{orig.psn:06x} differs:\n"
                  f"  {orig.wire.hex()}\n  {r.wire.hex()}")
        say(f"  resent {(again[-1].t - t_nak) * 1000:.1f} ms after the NAK "
            f"(the ACK timeout is {ACK_TIMEOUT_MS} ms)")
        b.rx_msn += 2
        b.ack(sends_b[1].psn, b.rx_msn)

        for nic, acks, last in ((a, acks_a, pa2), (b, acks_b, pb2)):
            # ACKs of the two requests: 1 or 2 (coalesced), in order, ending at the last.
            deadline = time.monotonic() + 2.0
            while not acks or acks[-1].psn != last:
                r = nic.receive(max(deadline - time.monotonic(), 0))
                check(r is not None and r.opcode == RC_ACK,
                      f"NIC {nic.name}: expected the ACK of PSN 0x{last:06x}, got "
                      f"{r and r.describe()}")
                acks.append(r)
            for r in acks:
                check(r.syndrome == SYNDROME_ACK and r.psn in (psn_add(last, -1), last),
                      f"NIC {nic.name}: ACK of seq 1/2 requests: {r.describe()}")
                check(r.msn == nic.sw_msn - (1 if r.psn != last else 0),
                      f"NIC {nic.name}: ACK {r.describe()}: MSN should be "
                      f"{nic.sw_msn - (1 if r.psn != last else 0)}")
        a.expect_silence(4 * T + QUIET, "A's coalesced ACK covered both results")
        b.expect_silence(0.01, "B acknowledged both results")

    def rnr(self):
        a, b = self.a, self.b
        delay = RNR_TIMER_MS[RNR_CODE] / 1000.0
        self.step(f"B: RNR NAK (timer code {RNR_CODE} = {RNR_TIMER_MS[RNR_CODE]} ms, IBTA "
                  "table 45) for the result of seq 3 -> the switch waits that long, then "
                  "resends the same bytes")
        va = [7, -7, 1 << 24, 3]
        vb = [1, 2, 3, -(1 << 24)]
        self.request(a, 3, va)
        self.request(b, 3, vb)
        acks_a, [ra] = self.gather(a, 0, 1, "request seq 3")
        a.rx_msn += 1
        a.ack(ra.psn, a.rx_msn)
        acks_b, [rb] = self.gather(b, 0, 1, "request seq 3")
        t_rnr = time.time()
        b.send_wire(b.packet(RC_ACK, psn=rb.psn, syndrome=0x20 | RNR_CODE, msn=b.rx_msn,
                             dqpn=b.sw_qpn), f"RNR NAK psn=0x{rb.psn:06x}")
        sums = [x + y for x, y in zip(va, vb)]
        for nic, r in ((a, ra), (b, rb)):
            self.check_result(nic, r, 3, sums)
            nic.rx_psn = psn_add(nic.rx_psn, 1)
        r = b.expect("the resend after the RNR delay", timeout=delay + 2.0)
        waited = r.t - t_rnr
        say(f"  resent {waited * 1000:.1f} ms after the RNR NAK")
        check(same_packet(r, rb), f"NIC B: the resend after RNR differs:\n  {rb.wire.hex()}\n"
              f"  {r.wire.hex()}")
        check(waited >= 0.9 * delay, f"NIC B: resent {waited * 1000:.1f} ms after an RNR NAK "
              f"asking for {RNR_TIMER_MS[RNR_CODE]} ms")
        check(waited < delay + 0.1, f"NIC B: resent only {waited * 1000:.1f} ms after an RNR NAK "
              f"of {RNR_TIMER_MS[RNR_CODE]} ms")
        b.rx_msn += 1
        b.ack(r.psn, b.rx_msn)
        # The ACK of each request: one, before or after the result.
        for nic, acks in ((a, acks_a), (b, acks_b)):
            deadline = time.monotonic() + QUIET
            while True:
                r = nic.receive(max(deadline - time.monotonic(), 0))
                if r is None:
                    break
                acks.append(r)
            check(len(acks) == 1, f"NIC {nic.name}: {len(acks)} ACKs of the seq 3 request")
            for r in acks:
                check(r.opcode == RC_ACK and r.syndrome == SYNDROME_ACK and
                      r.psn == psn_add(nic.psn, -1) and r.msn == nic.sw_msn,
                      f"NIC {nic.name}: after seq 3 expected only the ACK of the request, got "
                      f"{r.describe()}")
        a.expect_silence(2 * T_SECONDS, "A acknowledged seq 3")
        b.expect_silence(0.01, "B acknowledged seq 3")

    # -- counters ------------------------------------------------------------

    def check_counters(self):
        c = self.sw.counters()
        if c is None:
            say("counters: skipped (no --query)")
            return
        self.step("counters (SwitchAdmin.GetCounters): every drop counted with its reason")
        want = {
            "roce.bad_icrc": 2,
            "roce.bad_transport_version": 1,
            "roce.unknown_opcode": 0,  # the RDMA WRITE went to QP D, which counted it
            "endpoint.unknown_qp": 1,
            "aggregation.bad_version": self.junk_delivered,
            "aggregation.truncated": 1,
        }
        for name, n in want.items():
            got = switch_drop(c, name)
            check(got == n, f"counter drops[{name}] = {got}, expected {n}")
        qa = qp_counters(c, self.a.sw_qpn)
        qb = qp_counters(c, self.b.sw_qpn)
        qc = qp_counters(c, self.c.sw_qpn)
        check(qa["drops"].get("wrong_pkey", 0) == 1,
              f"QP A drops {qa['drops']}: expected wrong_pkey 1")
        check(qa["drops"].get("out_of_sequence", 0) == 3,
              f"QP A drops {qa['drops']}: expected out_of_sequence 3 (three SENDs past gaps)")
        check(qa["drops"].get("duplicate", 0) == 2,
              f"QP A drops {qa['drops']}: expected duplicate 2")
        check(int(qa["messages_received"]) == self.a.sw_msn,
              f"QP A messages_received {qa['messages_received']}, expected {self.a.sw_msn}")
        check(int(qa["naks_sent"]) == 2, f"QP A naks_sent {qa['naks_sent']}, expected 2")
        check(int(qa["packets_retransmitted"]) == 2,
              f"QP A packets_retransmitted {qa['packets_retransmitted']}, expected 2")
        check(int(qa["timeouts"]) == 2, f"QP A timeouts {qa['timeouts']}, expected 2")
        check(int(qb["packets_retransmitted"]) == 3 and int(qb["naks_received"]) == 1 and
              int(qb["rnr_naks_received"]) == 1 and int(qb["timeouts"]) == 0,
              f"QP B: packets_retransmitted {qb['packets_retransmitted']}, naks_received "
              f"{qb['naks_received']}, rnr_naks_received {qb['rnr_naks_received']}, timeouts "
              f"{qb['timeouts']}: expected 3, 1, 1, 0")
        for q in (qa, qb):
            check(q["state"] == "RTS" and int(q["send_queued"]) == 0,
                  f"QP 0x{int(q['qpn']):06x}: state {q['state']}, send_queued "
                  f"{q['send_queued']}: expected RTS and 0")
        check(qc["state"] == "ERROR", f"QP C state {qc['state']}, expected ERROR")
        check(qc["drops"].get("bad_opcode_sequence", 0) == 1,
              f"QP C drops {qc['drops']}: expected bad_opcode_sequence 1")
        qd = qp_counters(c, self.d.sw_qpn)
        check(qd["state"] == "RTS", f"QP D state {qd['state']}, expected RTS")
        check(qd["drops"].get("unsupported_opcode", 0) == 1,
              f"QP D drops {qd['drops']}: expected unsupported_opcode 1")
        groups = c.get("groups", [])
        check(len(groups) == 1 and int(groups[0]["operations_completed"]) == 4,
              f"groups {groups}: expected one group with 4 operations completed")

    def run(self):
        self.connect_and_send()
        self.coalescing()
        self.immediate()
        self.multi_packet()
        self.sequence_errors()
        self.duplicates()
        self.silent_drops()
        self.invalid_request()
        self.unsupported_request()
        self.aggregation_and_retransmission()
        self.rnr()
        self.check_counters()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--switchd", required=True, help="the netfold-switchd binary")
    parser.add_argument("--query", help="testbed_query (reads the switch's counters)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every packet")
    args = parser.parse_args()
    verbs_report.VERBOSE = args.verbose

    if SCAPY_ERROR is not None:
        print(f"SKIP: scapy's RoCE layer is not importable by {sys.executable} "
              f"(Debian package python3-scapy): {SCAPY_ERROR}", flush=True)
        return SKIP
    if not (os.path.isfile(args.switchd) and os.access(args.switchd, os.X_OK)):
        print(f"SKIP: no netfold-switchd binary at {args.switchd}", flush=True)
        return SKIP
    if args.query and not (os.path.isfile(args.query) and os.access(args.query, os.X_OK)):
        print(f"FAIL: --query {args.query} is not an executable", flush=True)
        return 1
    if agg_header(1, 1, 11, 1, 1, 0, 1, 3, 0x102, 7, 0, 4, 42) != GOLDEN_HEADER:
        print("FAIL: internal: the aggregation header packer does not reproduce the golden "
              "bytes of docs/protocol.md", flush=True)
        return 1

    signal.signal(signal.SIGTERM, on_sigterm)
    start = time.monotonic()
    tmpdir = tempfile.mkdtemp(prefix="netfold-rc-responder-")
    nics = [Nic(*spec, host=LOCALHOST, pkey=PKEY, mtu=MTU) for spec in NIC_SPECS]
    switch = Switch(args.switchd, args.query, tmpdir, nics)
    status = 1
    try:
        switch.start()
        for n in nics:
            n.switch = switch.data
        Test(switch, nics).run()
        rc = switch.stop()
        check(rc == 0, f"netfold-switchd exited with {rc} on SIGTERM (expected 0):\n"
              f"{switch.log_tail()}")
        status = 0
        say(f"PASS: every check passed in {time.monotonic() - start:.1f} s")
    except CheckFailed as e:
        print(f"FAIL: {e}", flush=True)
        if verbs_report.VERBOSE:
            print(f"--- switchd log ---\n{switch.log_tail()}", flush=True)
    except (Terminated, KeyboardInterrupt):
        print("FAIL: interrupted", flush=True)
    finally:
        switch.kill()
        for n in nics:
            n.close()
        shutil.rmtree(tmpdir, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
