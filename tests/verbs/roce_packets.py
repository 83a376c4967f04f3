"""RoCEv2 RC packets as a NIC sends and reads them, from an implementation
independent of netfold's proto/: scapy's RoCE layer (Debian python3-scapy,
scapy.contrib.roce: BTH, AETH and its ICRC) and, for the ICRC, zlib over
docs/protocol.md's masked pseudo-header; the aggregation header packed with
struct from the table in docs/protocol.md. No sockets here (roce_nic.py).

When scapy cannot be imported, SCAPY_ERROR says why and building or parsing
a packet fails; a test checks it first and skips.
"""

import socket
import struct
import zlib

try:
    import logging
    logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
    from scapy.compat import raw
    from scapy.contrib.roce import AETH, BTH
    from scapy.layers.inet import IP, UDP
    from scapy.packet import Raw
except ImportError as e:  # a test checks it in main(), so that --help works
    SCAPY_ERROR = e
else:
    SCAPY_ERROR = None

# ---------------------------------------------------------------------------
# Constants of the wire (IBTA Vol. 1 ch. 9, docs/protocol.md).

RC_SEND_FIRST = 0x00
RC_SEND_MIDDLE = 0x01
RC_SEND_LAST = 0x02
RC_SEND_LAST_IMM = 0x03
RC_SEND_ONLY = 0x04
RC_SEND_ONLY_IMM = 0x05
RC_RDMA_WRITE_ONLY = 0x0A
RC_ACK = 0x11
SEND_OPCODES = {RC_SEND_FIRST, RC_SEND_MIDDLE, RC_SEND_LAST, RC_SEND_LAST_IMM,
                RC_SEND_ONLY, RC_SEND_ONLY_IMM}
HAS_IMM = {RC_SEND_LAST_IMM, RC_SEND_ONLY_IMM}

SYNDROME_ACK = 0x1F            # ACK, credit count 0x1F ("no credits advertised")
SYNDROME_NAK_PSN_SEQ = 0x60    # NAK, PSN sequence error
SYNDROME_NAK_INVALID = 0x61    # NAK, invalid request

PSN_MASK = 0xFFFFFF

# Aggregation header (docs/protocol.md, "The aggregation header").
AGG_FORMAT = ">BBBBBBBBHHIIIIIQ"
AGG_SIZE = 40
TYPE_REQUEST, TYPE_RESULT = 1, 2
COLL_ALLREDUCE = 1
DTYPE_INT32 = 3
OP_SUM = 1
DELIVERY_RC_TREE = 2
FLAG_HAS_DATA = 1
# The golden bytes of docs/protocol.md: our packer must reproduce them.
GOLDEN_HEADER = bytes.fromhex(
    "010101 0b 01 01 00 01 0003 0000 00000102 00000007 00000000 00000004"
    " 00000000 000000000000002a".replace(" ", ""))


def psn_add(psn, n):
    return (psn + n) & PSN_MASK


def psn_diff(a, b):
    """a - b modulo 2^24, in [-2^23, 2^23)."""
    d = (a - b) & PSN_MASK
    return d - (1 << 24) if d >= (1 << 23) else d


def agg_header(type_, collective, dtype, op, delivery, status, flags, tree_id,
               group_id, epoch, root_rank, count, seq, version=1):
    return struct.pack(AGG_FORMAT, version, type_, collective, dtype, op,
                       delivery, status, flags, tree_id, 0, group_id, epoch,
                       root_rank, count, 0, seq)


# ---------------------------------------------------------------------------
# ICRC, twice: scapy's and our own zlib over the masked pseudo-header.

def icrc_scapy(src, dst, udp_payload, ip_id=0):
    """scapy's RoCEv2 ICRC of a UDP payload (BTH .. ICRC) sent src -> dst
    (ip, port), with the canonical IPv4 header (identification `ip_id`, DF)."""
    pkt = (IP(src=src[0], dst=dst[0], id=ip_id, flags="DF")
           / UDP(sport=src[1], dport=dst[1]) / BTH(udp_payload))
    pkt[BTH].icrc = None
    return raw(pkt)[-4:]


def same_packet(a, b):
    """A retransmission carries the same BTH, headers and payload; its ICRC
    may differ, as its IPv4 header may (the identification of its place in a
    segmentation batch), and Nic.verify() checked it against that header."""
    return a.wire[:-4] == b.wire[:-4]


def icrc_zlib(src, dst, udp_payload, ip_id=0):
    """The same, from the table of docs/protocol.md, with zlib only."""
    n = len(udp_payload)
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0xFF, 20 + 8 + n, ip_id, 0x4000, 0xFF,
                     17, 0xFFFF, socket.inet_aton(src[0]), socket.inet_aton(dst[0]))
    udp = struct.pack(">HHHH", src[1], dst[1], 8 + n, 0xFFFF)
    body = bytearray(udp_payload[:-4])
    body[4] = 0xFF
    crc = zlib.crc32(b"\xff" * 8 + ip + udp + bytes(body)) & 0xFFFFFFFF
    return struct.pack("<I", crc)


# ---------------------------------------------------------------------------
# Building a packet.

def rc_packet(src, dst, opcode, payload=b"", *, psn, dqpn, pkey, ackreq=False, imm=None,
              fecn=0, tver=0, syndrome=None, msn=None):
    """The UDP payload (BTH .. ICRC) scapy builds for an RC packet sent src ->
    dst (ip, port), its ICRC over the canonical IPv4 header (identification
    0, DF). An RC_ACK carries an AETH (syndrome, msn); any other opcode the
    payload, after the immediate data for HAS_IMM, padded to 4 bytes."""
    if opcode == RC_ACK:
        roce = (BTH(opcode=opcode, pkey=pkey, dqpn=dqpn, psn=psn, version=tver)
                / AETH(syndrome=syndrome, msn=msn))
    else:
        pad = (4 - len(payload) % 4) % 4
        extra = struct.pack(">I", imm) if opcode in HAS_IMM else b""
        roce = (BTH(opcode=opcode, padcount=pad, pkey=pkey, fecn=fecn,
                    dqpn=dqpn, ackreq=int(ackreq), psn=psn, version=tver)
                / Raw(extra + payload + b"\0" * pad))
    pkt = (IP(src=src[0], dst=dst[0], id=0, flags="DF")
           / UDP(sport=src[1], dport=dst[1]) / roce)
    return raw(pkt)[28:]


# ---------------------------------------------------------------------------
# A reply from the switch, parsed with scapy (roce_nic.Nic checks it against
# the rules every packet must follow).

class Reply:
    def __init__(self, wire, t):
        self.wire = wire
        self.t = t  # arrival (kernel timestamp, time.time() clock)
        b = BTH(wire)
        self.opcode = b.opcode
        self.se = b.solicited
        self.migreq = b.migreq
        self.pad = b.padcount
        self.tver = b.version
        self.pkey = b.pkey
        self.fecn, self.becn, self.resv6 = b.fecn, b.becn, b.resv6
        self.dqpn = b.dqpn
        self.ackreq = b.ackreq
        self.resv7 = b.resv7
        self.psn = b.psn
        self.syndrome = self.msn = None
        self.imm = None
        self.payload = b""
        if self.opcode == RC_ACK and AETH in b:
            self.syndrome = b[AETH].syndrome
            self.msn = b[AETH].msn
        body = wire[12:-4]
        if self.opcode in HAS_IMM:
            self.imm = struct.unpack(">I", body[:4])[0]
            body = body[4:]
        if self.opcode in SEND_OPCODES:
            self.payload = body[:len(body) - self.pad]

    def describe(self):
        if self.opcode == RC_ACK:
            return (f"ACK op=0x{self.opcode:02x} psn=0x{self.psn:06x} "
                    f"syndrome=0x{self.syndrome:02x} msn={self.msn}")
        return (f"op=0x{self.opcode:02x} psn=0x{self.psn:06x} ackreq={self.ackreq} "
                f"{len(self.payload)} bytes")
