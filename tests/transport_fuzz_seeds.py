#!/usr/bin/python3
"""Writes the seed corpus of transport/fuzz/endpoint_receive_fuzzer.cc.

Each seed is a sequence of frames [flags:1][length:2 LE][bytes] built from
proto's RoCE seed packets (proto/testdata/fuzz_seeds/roce), so the fuzzer
starts from well-formed datagrams aimed at each QP, with and without a valid
ICRC, and from a FIRST/MIDDLE/LAST message sequence.

Usage: tests/transport_fuzz_seeds.py   (rewrites transport/testdata/fuzz_seeds/receive)
"""
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "proto", "testdata", "fuzz_seeds", "roce")
DST = os.path.join(ROOT, "transport", "testdata", "fuzz_seeds", "receive")


def frame(flags, data):
    return bytes([flags]) + struct.pack("<H", len(data)) + data


def main():
    os.makedirs(DST, exist_ok=True)
    for name in os.listdir(DST):
        os.remove(os.path.join(DST, name))
    packets = {}
    for name in sorted(os.listdir(SRC)):
        with open(os.path.join(SRC, name), "rb") as f:
            packets[name[:-4]] = f.read()
    for name, data in packets.items():
        # To the RC QP from the peer, ICRC fixed; to the UD QP; to the group.
        for tag, flags in (("rc", 0x0C), ("ud", 0x0D), ("mc", 0x0E), ("raw", 0x07)):
            with open(os.path.join(DST, f"{name}_{tag}.bin"), "wb") as f:
                f.write(frame(flags, data))
    seq = [packets[k] for k in ("rc_send_first", "rc_send_middle", "rc_send_last") if k in packets]
    with open(os.path.join(DST, "rc_message_sequence.bin"), "wb") as f:
        f.write(b"".join(frame(0x1C, p) for p in seq))
    if "rc_ack" in packets:
        with open(os.path.join(DST, "rc_ack_after_timeout.bin"), "wb") as f:
            f.write(frame(0x2C, packets["rc_ack"]) + frame(0x3C, packets["rc_ack"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
