"""An emulated RoCE NIC for the verbs tests: one RC QP's end on a UDP
socket. It sends SENDs and ACKs built by roce_packets.py, reads the switch's
replies with kernel timestamps and whole segmentation batches (UDP_GRO), and
checks every reply against the rules each packet must follow (source, size,
ICRC recomputed with scapy and with zlib, BTH fields); check_ack checks an
ACK or NAK. A broken rule raises verbs_report.CheckFailed.
"""

import socket
import struct
import time

from roce_packets import (HAS_IMM, RC_ACK, RC_SEND_FIRST, RC_SEND_LAST, RC_SEND_LAST_IMM,
                          RC_SEND_MIDDLE, RC_SEND_ONLY, RC_SEND_ONLY_IMM, SEND_OPCODES,
                          SYNDROME_ACK, SYNDROME_NAK_INVALID, SYNDROME_NAK_PSN_SEQ, Reply,
                          icrc_scapy, icrc_zlib, psn_add, rc_packet)
from verbs_report import check, debug

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
SOL_UDP = 17                  # Linux <netinet/udp.h>
UDP_GRO = 104                 # the socket takes segmentation batches whole


class Nic:
    """One emulated RoCE NIC: a UDP socket and the state of one RC QP."""

    def __init__(self, name, sw_qpn, sw_psn, qpn, psn, in_group, *, host, pkey, mtu):
        """name: for messages; sw_qpn, sw_psn: the switch's end of the QP (its
        QPN, its first PSN); qpn, psn: ours; in_group: a child of the group.
        host: the address to bind; pkey: the QP's P_Key; mtu: the path MTU.
        Set .switch to the switch's data address before sending."""
        self.name = name
        self.sw_qpn = sw_qpn
        self.sw_first_psn = sw_psn
        self.qpn = qpn
        self.first_psn = psn
        self.in_group = in_group
        self.pkey = pkey
        self.mtu = mtu
        self.psn = psn          # next PSN we send
        self.sw_msn = 0         # messages the switch's responder completed
        self.rx_psn = sw_psn    # next PSN we expect from the switch
        self.rx_msn = 0         # messages we (as responder) completed
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        # Kernel receive timestamps: the timing checks measure arrivals, not
        # when this process got around to reading them.
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        # The switch sends packets that leave together as one UDP
        # segmentation batch, whose segment i carries IPv4 identification i
        # (a NIC sees it in the header): read batches whole (UDP_GRO), so
        # that each packet's identification is its place in its batch.
        self.sock.setsockopt(socket.IPPROTO_UDP, UDP_GRO, 1)
        self.queued = []        # (segment, identification, src, time) of a batch
        self.addr = self.sock.getsockname()
        self.switch = None      # the switch's data address, once known

    def close(self):
        self.sock.close()

    # -- sending ----------------------------------------------------------

    def packet(self, opcode, payload=b"", psn=None, ackreq=False, pkey=None,
               dqpn=None, imm=None, fecn=0, tver=0, syndrome=None, msn=None):
        """The UDP payload (BTH .. ICRC) scapy builds, ICRC over our address
        -> the switch's; by default to the switch's QP, at our next PSN, with
        the QP's P_Key."""
        return rc_packet(self.addr, self.switch, opcode, payload,
                         psn=self.psn if psn is None else psn,
                         dqpn=self.sw_qpn if dqpn is None else dqpn,
                         pkey=self.pkey if pkey is None else pkey, ackreq=ackreq, imm=imm,
                         fecn=fecn, tver=tver, syndrome=syndrome, msn=msn)

    def send_wire(self, wire, what=""):
        debug(f"{self.name} -> {wire[:12].hex()}..{wire[-4:].hex()} ({len(wire)} B) {what}")
        self.sock.sendto(wire, self.switch)

    def send(self, opcode, payload=b"", **kw):
        wire = self.packet(opcode, payload, **kw)
        self.send_wire(wire, f"op=0x{opcode:02x} psn=0x{kw.get('psn', self.psn):06x}")
        return wire

    def post(self, message, ackreq="last", imm=None):
        """Sends one message at self.psn (SEND_ONLY or FIRST/MIDDLE.../LAST),
        advances self.psn, and returns [(psn, opcode, wire)]."""
        chunks = [message[i:i + self.mtu] for i in range(0, len(message), self.mtu)] or [b""]
        out = []
        for i, chunk in enumerate(chunks):
            first, last = i == 0, i == len(chunks) - 1
            if first and last:
                op = RC_SEND_ONLY_IMM if imm is not None else RC_SEND_ONLY
            elif first:
                op = RC_SEND_FIRST
            elif last:
                op = RC_SEND_LAST_IMM if imm is not None else RC_SEND_LAST
            else:
                op = RC_SEND_MIDDLE
            want_ack = ackreq == "all" or (ackreq == "last" and last) or \
                (isinstance(ackreq, set) and i in ackreq)
            wire = self.send(op, chunk, psn=self.psn, ackreq=want_ack,
                             imm=imm if op in HAS_IMM else None)
            out.append((self.psn, op, wire))
            self.psn = psn_add(self.psn, 1)
        return out

    # -- receiving --------------------------------------------------------

    def receive(self, timeout):
        """The next reply within `timeout` seconds (checked against the rules
        every reply follows), or None."""
        deadline = time.monotonic() + timeout
        while not self.queued:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                wire, ancillary, _, src = self.sock.recvmsg(
                    65536, socket.CMSG_SPACE(16) + socket.CMSG_SPACE(4))
            except socket.timeout:
                return None
            t = time.time()
            segment = len(wire)
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
                    sec, nsec = struct.unpack("qq", data[:16])
                    t = sec + nsec / 1e9
                if level == SOL_UDP and kind == UDP_GRO and len(data) >= 4:
                    segment = struct.unpack("i", data[:4])[0] or len(wire)
            for i, off in enumerate(range(0, max(len(wire), 1), segment)):
                self.queued.append((wire[off:off + segment], i, src, t))
        wire, ip_id, src, t = self.queued.pop(0)
        r = self.verify(wire, src, t, ip_id)
        debug(f"{self.name} <- {r.describe()}")
        return r

    def verify(self, wire, src, t, ip_id=0):
        who = f"NIC {self.name}: a reply"
        check(src == self.switch,
              f"{who} came from {src}, not the switch's data address {self.switch}")
        check(len(wire) >= 16 and len(wire) % 4 == 0,
              f"{who} of {len(wire)} bytes is not BTH + ICRC and a multiple of 4")
        mine = icrc_scapy(src, self.addr, wire, ip_id)
        zl = icrc_zlib(src, self.addr, wire, ip_id)
        check(mine == zl, f"internal: scapy's ICRC {mine.hex()} != zlib's {zl.hex()}")
        check(wire[-4:] == mine,
              f"{who} has ICRC {wire[-4:].hex()}, expected {mine.hex()} "
              f"(identification {ip_id}) "
              f"(packet {wire.hex()})")
        r = Reply(wire, t)
        check(r.tver == 0, f"{who} has BTH.TVer {r.tver}")
        check(r.migreq == 0, f"{who} has BTH.M {r.migreq} (netfold documents 0)")
        check(r.pkey == self.pkey,
              f"{who} has P_Key 0x{r.pkey:04x}, not the QP's 0x{self.pkey:04x}")
        check(r.dqpn == self.qpn,
              f"{who} has DestQP 0x{r.dqpn:06x}, not our QPN 0x{self.qpn:06x}")
        check(r.fecn == 0 and r.becn == 0 and r.resv6 == 0 and r.resv7 == 0,
              f"{who} has FECN/BECN/reserved bits set: {wire[:12].hex()}")
        if r.opcode == RC_ACK:
            check(len(wire) == 20, f"{who}: an ACK of {len(wire)} bytes (BTH+AETH+ICRC = 20)")
            check(r.pad == 0 and r.ackreq == 0 and r.se == 0,
                  f"{who}: an ACK with PadCnt/AckReq/SE set: {wire[:12].hex()}")
            check(r.syndrome & 0x80 == 0, f"{who}: AETH reserved bit set")
            check((r.syndrome >> 5) & 3 != 2, f"{who}: AETH type 10 (reserved)")
        else:
            check(r.opcode in SEND_OPCODES,
                  f"{who} has opcode 0x{r.opcode:02x}, not an RC SEND or ACKNOWLEDGE")
        return r

    def expect(self, what, timeout=2.0):
        r = self.receive(timeout)
        check(r is not None, f"NIC {self.name}: no reply within {timeout} s: expected {what}")
        return r

    def expect_silence(self, duration, why):
        r = self.receive(duration)
        check(r is None, f"NIC {self.name}: expected no reply ({why}), got {r and r.describe()}")

    def expect_ack(self, psn, msn, what, syndrome=SYNDROME_ACK, timeout=2.0):
        r = self.expect(f"{'ACK' if syndrome == SYNDROME_ACK else 'NAK'} of {what}", timeout)
        check_ack(r, psn, msn, syndrome, f"NIC {self.name}: {what}")
        return r

    # -- acknowledging the switch's SENDs ---------------------------------

    def ack(self, psn, msn):
        self.send_wire(self.packet(RC_ACK, psn=psn, syndrome=SYNDROME_ACK, msn=msn,
                                   dqpn=self.sw_qpn), f"ACK psn=0x{psn:06x} msn={msn}")

    def nak_sequence(self, expected_psn, msn):
        self.send_wire(self.packet(RC_ACK, psn=expected_psn, syndrome=SYNDROME_NAK_PSN_SEQ,
                                   msn=msn, dqpn=self.sw_qpn),
                       f"NAK psn=0x{expected_psn:06x} msn={msn}")


def check_ack(r, psn, msn, syndrome, what):
    kind = {SYNDROME_ACK: "ACK", SYNDROME_NAK_PSN_SEQ: "NAK (PSN sequence error)",
            SYNDROME_NAK_INVALID: "NAK (invalid request)"}[syndrome]
    check(r.opcode == RC_ACK,
          f"{what}: expected an RC ACKNOWLEDGE ({kind}), got {r.describe()}")
    check(r.syndrome == syndrome,
          f"{what}: expected AETH syndrome 0x{syndrome:02x} ({kind}), got {r.describe()}")
    check(r.psn == psn, f"{what}: expected the {kind} at PSN 0x{psn:06x}, got {r.describe()}")
    check(r.msn == msn, f"{what}: expected MSN {msn} in the {kind}, got {r.describe()}")
