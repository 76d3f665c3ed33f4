#!/usr/bin/env python3
"""Reference ICRC/VCRC values for tests/wire/roce_test.cpp, computed without Weft's code.

Reads lines "roce <hex Ethernet frame>" or "ib <hex native IB packet LRH..VCRC>" on stdin and
prints, per line, the wire bytes (hex) of the ICRC the packet should carry, and for "ib" also the
VCRC.
  roce: scapy.contrib.roce computes the RoCEv2 ICRC (IBA Annex A17.3.3) over the frame's own
        IPv4/UDP/BTH with its masking rules.
  ib:   the same construction for native IB (IBA 7.8.1): the LRH plays the role of scapy's
        8-byte 0xff pseudo-LRH -- wholly masked when a GRH follows, only VL masked otherwise --
        and the GRH plays the IP header's, with TClass/FlowLabel/HopLmt masked as scapy masks
        IPv4 TOS/TTL. The VCRC is a bit-by-bit CRC-16 (poly 0x100B, init 0xffff, reflected,
        inverted), independent of the table-driven C++.
"""
import sys
import zlib

import logging
logging.getLogger("scapy").setLevel(logging.ERROR)
from scapy.all import IP, Ether, raw  # noqa: E402
from scapy.contrib.roce import BTH  # noqa: E402,F401  (binds UDP 4791 -> BTH)


def roce_icrc(frame: bytes) -> bytes:
    p = Ether(frame)
    p[BTH].icrc = None
    end = len(p) - len(p[IP]) + p[IP].len  # the IP length, not Ethernet padding, ends it
    return raw(p)[end - 4:end]


def vcrc(data: bytes) -> int:
    crc = 0xFFFF
    for b in data:
        crc ^= int(f"{b:08b}"[::-1], 2) << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x100B) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return int(f"{crc:016b}"[::-1], 2) ^ 0xFFFF


def ib_icrc(pkt: bytes) -> bytes:
    body = bytearray(pkt[:-6])  # LRH .. pad
    lnh = body[1] & 3
    if lnh == 3:
        body[0:8] = b"\xff" * 8
        grh = 8
        body[grh] |= 0x0F
        body[grh + 1:grh + 4] = b"\xff\xff\xff"
        body[grh + 7] = 0xFF
        bth = 48
    else:
        body[0] |= 0xF0
        bth = 8
    body[bth + 4] = 0xFF
    return (zlib.crc32(bytes(body)) & 0xFFFFFFFF).to_bytes(4, "little")


def main() -> None:
    for line in sys.stdin:
        kind, _, h = line.strip().partition(" ")
        data = bytes.fromhex(h)
        if kind == "roce":
            print(roce_icrc(data).hex())
        elif kind == "ib":
            v = vcrc(data[:-2])
            print(ib_icrc(data).hex(), v.to_bytes(2, "little").hex())
        else:
            print("?")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
