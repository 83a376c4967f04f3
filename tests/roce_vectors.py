#!/usr/bin/python3
"""Generates RoCEv2 interop test vectors with scapy's RoCE layer.

scapy (Debian python3-scapy, scapy.contrib.roce) is an implementation of the
BTH/AETH layouts and of the RoCEv2 ICRC that is independent of netfold's
proto/. This script builds packets with it and writes:

  proto/testdata/roce_vectors.txt     one packet per line (see FORMAT below),
                                      read by proto/roce_interop_test.cc
  proto/testdata/fuzz_seeds/roce/     each packet's UDP payload (seed corpus of
                                      proto/fuzz/roce_parse_fuzzer.cc)
  proto/testdata/fuzz_seeds/roce_icrc/  12 bytes of addresses + UDP payload
                                      (seeds of proto/fuzz/roce_icrc_fuzzer.cc)
  proto/testdata/fuzz_seeds/aggregation/  aggregation messages packed here
                                      from the layout in docs/protocol.md
                                      (seeds of aggregation_header_fuzzer.cc)

scapy has no DETH or ImmDt layer: those 8/4 bytes are packed here with
struct (big-endian, IBTA layout) and handed to scapy as the bytes after the
BTH, which its ICRC covers like any payload.

The IPv4 header of every vector has identification 0 and DF set, as the
canonical header of proto/icrc.h; TTL, TOS, the checksums and FECN/BECN vary
between vectors because the ICRC masks them.

Run with the system Python (scapy is installed there), from anywhere:
  /usr/bin/python3 tests/roce_vectors.py            # rewrite the files
  /usr/bin/python3 tests/roce_vectors.py --check    # exit 1 if they differ
The output is deterministic: running it twice gives identical files.

FORMAT of roce_vectors.txt: '#' lines are comments; every other line is
space-separated key=value pairs, all integers in decimal or 0x-hex, byte
strings in hex:
  name src_ip dst_ip src_port dst_port ttl tos      addresses (dotted IPs)
  opcode se m pad tver pkey fecn becn dqpn ackreq psn   BTH fields
  qkey srcqp (UD)  syndrome msn (ACK)  imm (*_WITH_IMMEDIATE)
  payload       the message bytes (without pad)
  headers       the 28 bytes of IPv4 + UDP header scapy built
  udp_payload   BTH .. ICRC as scapy built it (the ICRC is scapy's)
"""
import argparse
import os
import struct
import sys

import logging
logging.getLogger("scapy.runtime").setLevel(logging.ERROR)

try:
    from scapy.compat import raw
    from scapy.contrib.roce import AETH, BTH
    from scapy.layers.inet import IP, UDP
    from scapy.packet import Raw
    import scapy
except ImportError as e:
    # 77: "skipped" for meson test (roce_vectors_up_to_date).
    print("scapy is not installed for %s (Debian package python3-scapy): %s"
          % (sys.executable, e), file=sys.stderr)
    sys.exit(77)

ROCE_PORT = 4791

# Opcodes (IBTA Vol. 1, table 38).
RC_SEND_FIRST = 0x00
RC_SEND_MIDDLE = 0x01
RC_SEND_LAST = 0x02
RC_SEND_LAST_IMM = 0x03
RC_SEND_ONLY = 0x04
RC_SEND_ONLY_IMM = 0x05
RC_ACK = 0x11
UD_SEND_ONLY = 0x64
UD_SEND_ONLY_IMM = 0x65

HAS_DETH = {UD_SEND_ONLY, UD_SEND_ONLY_IMM}
HAS_IMM = {RC_SEND_LAST_IMM, RC_SEND_ONLY_IMM, UD_SEND_ONLY_IMM}


def pattern(n, seed):
    """Deterministic payload bytes."""
    return bytes((seed + 31 * i + (i >> 3)) & 0xFF for i in range(n))


def aggregation_header(type_, collective, dtype, op, delivery, status, flags,
                       tree_id, group_id, epoch, root_rank, count, seq,
                       version=1):
    """The 40-byte aggregation header, packed from the table in docs/protocol.md."""
    return struct.pack(">BBBBBBBBHHIIIIIQ", version, type_, collective, dtype,
                       op, delivery, status, flags, tree_id, 0, group_id,
                       epoch, root_rank, count, 0, seq)


# Aggregation messages: fp32 allreduce request, int64 result, barrier,
# repair request, abort, a reduce to one rank, a bcast, a minloc on 2int.
AGGREGATION_MESSAGES = {
    "allreduce_fp32_sum_request":
        aggregation_header(1, 1, 11, 1, 1, 0, 1, 3, 0x0102, 7, 0, 4, 42)
        + struct.pack("<4f", 1.0, -2.5, 3.25, 1e-3),
    "allreduce_int64_max_result":
        aggregation_header(2, 1, 4, 4, 1, 0, 1, 3, 0x0102, 7, 0, 2, 43)
        + struct.pack("<2q", -5, 1 << 40),
    "barrier_request":
        aggregation_header(1, 4, 0, 0, 1, 0, 0, 1, 9, 1, 0, 0, 1),
    "repair_request":
        aggregation_header(3, 1, 11, 1, 1, 0, 0, 3, 0x0102, 7, 0, 4, 42),
    "abort_stale_epoch":
        aggregation_header(4, 1, 11, 1, 2, 4, 0, 3, 0x0102, 6, 0, 4, 44),
    "reduce_uint8_bxor_to_root":
        aggregation_header(1, 2, 5, 7, 3, 0, 1, 2, 5, 1, 3, 5, 0xFFFFFFFF00000001)
        + bytes([1, 2, 3, 4, 5]),
    "bcast_fp16":
        aggregation_header(1, 3, 9, 0, 2, 0, 1, 2, 5, 1, 1, 3, 7)
        + struct.pack("<3e", 0.5, -1.0, 2.0),
    "minloc_2int_result":
        aggregation_header(2, 1, 16, 11, 1, 0, 1, 2, 5, 1, 0, 2, 8)
        + struct.pack("<4i", 3, 0, -1, 7),
}


def vector(name, opcode, payload, *, src_ip="10.0.0.1", dst_ip="10.0.0.2",
           src_port=49152, dst_port=ROCE_PORT, ttl=64, tos=0, se=0, m=0,
           pkey=0xFFFF, fecn=0, becn=0, dqpn=0x000011, ackreq=0, psn=0,
           qkey=None, srcqp=None, syndrome=None, msn=None, imm=None):
    pad = (4 - len(payload) % 4) % 4
    extra = b""
    if opcode in HAS_DETH:
        extra += struct.pack(">IB", qkey, 0) + srcqp.to_bytes(3, "big")
    if opcode in HAS_IMM:
        extra += struct.pack(">I", imm)
    bth = BTH(opcode=opcode, solicited=se, migreq=m, padcount=pad, version=0,
              pkey=pkey, fecn=fecn, becn=becn, dqpn=dqpn, ackreq=ackreq,
              psn=psn)
    if opcode == RC_ACK:
        roce = bth / AETH(syndrome=syndrome, msn=msn)
        if payload:
            raise ValueError("an ACK has no payload")
    else:
        roce = bth / Raw(extra + payload + b"\0" * pad)
    pkt = (IP(src=src_ip, dst=dst_ip, id=0, flags="DF", ttl=ttl, tos=tos)
           / UDP(sport=src_port, dport=dst_port) / roce)
    wire = raw(pkt)
    fields = dict(name=name, src_ip=src_ip, dst_ip=dst_ip, src_port=src_port,
                  dst_port=dst_port, ttl=ttl, tos=tos, opcode=opcode, se=se,
                  m=m, pad=pad, tver=0, pkey=pkey, fecn=fecn, becn=becn,
                  dqpn=dqpn, ackreq=ackreq, psn=psn)
    if opcode in HAS_DETH:
        fields.update(qkey=qkey, srcqp=srcqp)
    if opcode == RC_ACK:
        fields.update(syndrome=syndrome, msn=msn)
    if opcode in HAS_IMM:
        fields.update(imm=imm)
    fields.update(payload=payload.hex(), headers=wire[:28].hex(),
                  udp_payload=wire[28:].hex())
    # scapy must read back what it wrote (its own dissector, BTH + ICRC).
    again = IP(wire)
    assert again[BTH].opcode == opcode and again[BTH].psn == psn, name
    return fields


def all_vectors():
    agg = AGGREGATION_MESSAGES
    v = []
    # RC SEND_ONLY with every pad count, empty, solicited, P_Key variety.
    v.append(vector("rc_send_only_pad0", RC_SEND_ONLY, pattern(8, 1), ackreq=1))
    v.append(vector("rc_send_only_pad3", RC_SEND_ONLY, pattern(5, 2), psn=1))
    v.append(vector("rc_send_only_pad2", RC_SEND_ONLY, pattern(6, 3), psn=2, se=1))
    v.append(vector("rc_send_only_pad1", RC_SEND_ONLY, pattern(7, 4), psn=3,
                    pkey=0x8001, dqpn=0xABCDEF))
    v.append(vector("rc_send_only_empty", RC_SEND_ONLY, b"", psn=0x7FFFFF))
    v.append(vector("rc_send_only_aggregation", RC_SEND_ONLY,
                    agg["allreduce_fp32_sum_request"], psn=0x000100, ackreq=1,
                    pkey=0x8003, dqpn=0x000201, src_ip="192.168.7.21",
                    dst_ip="192.168.7.1", src_port=61000))
    # A multi-packet message across the PSN wrap.
    v.append(vector("rc_send_first", RC_SEND_FIRST, pattern(256, 5),
                    psn=0xFFFFFE, dqpn=0x000300))
    v.append(vector("rc_send_middle", RC_SEND_MIDDLE, pattern(256, 6),
                    psn=0xFFFFFF, dqpn=0x000300))
    v.append(vector("rc_send_last", RC_SEND_LAST, pattern(13, 7), psn=0,
                    dqpn=0x000300, ackreq=1))
    v.append(vector("rc_send_last_imm", RC_SEND_LAST_IMM, pattern(20, 8),
                    psn=1, dqpn=0x000300, ackreq=1, imm=0xDEADBEEF))
    v.append(vector("rc_send_only_imm", RC_SEND_ONLY_IMM, pattern(3, 9),
                    psn=0x123456, imm=0x01020304, se=1))
    # ACK, ACK with credits, NAKs, RNR NAK.
    v.append(vector("rc_ack", RC_ACK, b"", psn=0x000042, dqpn=0x000077,
                    syndrome=0x1F, msn=0x123456))
    v.append(vector("rc_ack_credits", RC_ACK, b"", psn=0xFFFFFF,
                    dqpn=0x000077, syndrome=0x05, msn=1))
    v.append(vector("rc_nak_psn_sequence_error", RC_ACK, b"", psn=0x000010,
                    dqpn=0x000077, syndrome=0x60, msn=0xFFFFFF))
    v.append(vector("rc_nak_remote_operational_error", RC_ACK, b"", psn=5,
                    dqpn=0x000077, syndrome=0x63, msn=9))
    v.append(vector("rc_rnr_nak", RC_ACK, b"", psn=6, dqpn=0x000077,
                    syndrome=0x2E, msn=9))
    # UD SEND_ONLY with DETH (multicast results), with and without ImmDt.
    v.append(vector("ud_send_only_result", UD_SEND_ONLY,
                    agg["allreduce_int64_max_result"], dst_ip="239.1.2.3",
                    dqpn=0xFFFFFF, psn=7, qkey=0x80010203, srcqp=0x000102,
                    pkey=0x8003, src_port=50000))
    v.append(vector("ud_send_only_imm", UD_SEND_ONLY_IMM, pattern(10, 10),
                    dqpn=0x000055, psn=8, qkey=0x11111111, srcqp=0xFFFFFF,
                    imm=0xCAFEF00D))
    v.append(vector("ud_send_only_large", UD_SEND_ONLY, pattern(1021, 11),
                    dst_ip="239.255.0.1", dqpn=0xFFFFFF, psn=0xABCDEF,
                    qkey=0x7FFFFFFF, srcqp=0x000001))
    # Masked fields: ECN marks, TOS and TTL must not change the ICRC.
    v.append(vector("rc_send_only_ecn_marked", RC_SEND_ONLY, pattern(9, 12),
                    psn=3, fecn=1, becn=1, tos=0x03, ttl=1))
    v.append(vector("rc_send_only_dscp_ttl", RC_SEND_ONLY, pattern(9, 12),
                    psn=3, tos=0x68, ttl=255))
    return v


def format_line(fields):
    parts = []
    for key, value in fields.items():
        if isinstance(value, int) and key not in ("src_port", "dst_port", "ttl",
                                                  "se", "m", "pad", "tver",
                                                  "fecn", "becn", "ackreq"):
            value = "0x%x" % value
        parts.append("%s=%s" % (key, value))
    return " ".join(parts)


def outputs():
    """Returns {relative path: bytes} of every generated file."""
    files = {}
    vectors = all_vectors()
    lines = [
        "# RoCEv2 test vectors built by scapy %s (scapy.contrib.roce)." % scapy.__version__,
        "# Generated by tests/roce_vectors.py; do not edit, re-run it.",
        "# Format: see the docstring of tests/roce_vectors.py.",
    ]
    lines += [format_line(f) for f in vectors]
    files["roce_vectors.txt"] = ("\n".join(lines) + "\n").encode()
    for f in vectors:
        udp_payload = bytes.fromhex(f["udp_payload"])
        files["fuzz_seeds/roce/%s.bin" % f["name"]] = udp_payload
        header = bytes.fromhex(f["headers"])
        # Input format of roce_icrc_fuzzer: src_ip dst_ip (4+4, big-endian),
        # src_port dst_port (2+2), then the UDP payload.
        addresses = header[12:20] + header[20:24]
        files["fuzz_seeds/roce_icrc/%s.bin" % f["name"]] = addresses + udp_payload
    for name, message in AGGREGATION_MESSAGES.items():
        files["fuzz_seeds/aggregation/%s.bin" % name] = message
    return files


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "proto", "testdata"),
        help="output directory (default: proto/testdata of this checkout)")
    parser.add_argument("--check", action="store_true",
                        help="compare with the files instead of writing them")
    args = parser.parse_args()
    stale = []
    for rel, data in sorted(outputs().items()):
        path = os.path.join(args.out, rel)
        if args.check:
            try:
                with open(path, "rb") as f:
                    if f.read() != data:
                        stale.append(rel)
            except OSError:
                stale.append(rel)
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    if stale:
        print("stale or missing: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
