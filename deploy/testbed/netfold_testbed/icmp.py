"""ICMP echo over a raw socket, so that `ping` needs no ping program in the
namespaces: run icmp_ping inside one with netns.in_netns.
"""

import os
import select
import socket
import struct
import time


def _icmp_checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def icmp_ping(dst, count, wait):
    """ICMP echo from the current namespace (a raw socket; no ping program
    needed). Returns the round-trip times in ms of the answered requests."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    ident = os.getpid() & 0xFFFF
    rtts = []
    try:
        for seq in range(count):
            payload = b"netfold-testbed." + struct.pack("!d", time.time())
            header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
            checksum = _icmp_checksum(header + payload)
            sock.sendto(struct.pack("!BBHHH", 8, 0, checksum, ident, seq) + payload, (dst, 0))
            sent = time.monotonic()
            deadline = sent + wait
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                ready, _, _ = select.select([sock], [], [], left)
                if not ready:
                    break
                data, _ = sock.recvfrom(65535)
                ihl = (data[0] & 0x0F) * 4
                if len(data) < ihl + 8:
                    continue
                kind, _, _, rid, rseq = struct.unpack("!BBHHH", data[ihl:ihl + 8])
                if kind == 0 and rid == ident and rseq == seq:
                    rtts.append((time.monotonic() - sent) * 1000.0)
                    break
    finally:
        sock.close()
    return rtts
