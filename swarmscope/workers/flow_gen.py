"""The flow storm's generator: UDP (or TCP) packets over N distinct 5-tuples, paced, bounded, counted.

    python -m swarmscope.workers.flow_gen --flows 10000 --packets-per-flow 2 --frame-bytes 128 \\
        --rate 50000 --max-s 30          # run inside the source namespace; prints JSON
    sent_per_flow(result, i)             # packets flow i got (every flow gets the same, but
                                         # a run stopped by --max-s: the first `partial` one more)

Flow i goes from SRC_ADDR:SPORT to ``flow_addr(i)`` (10.200.d.e, a port in 20000..59999), so
the flows' 5-tuples are distinct by construction and a test can name every one of them. Sent
round-robin, ``packets_per_flow`` rounds over all flows, so every flow is alive all along (the
write-up's agent sees each flow again within a round). A packet counts as generated when
``sendto`` returned: the socket has IP_RECVERR, so a veth drop (ENOBUFS) is an error here, and
retried (bounded), never silently lost. Frames are ``frame_bytes`` long on the wire (Ethernet +
IPv4 + UDP headers, 42 bytes, included; with ``--proto tcp`` 54 bytes of Ethernet + IPv4 + TCP):
what an XDP program measures.
SIGTERM stops it early the same way as ``--max-s`` (its counts still printed, exactly).
Caveat: one process, one core; rates above what it can send make it ``saturated`` (reported).
"""

from __future__ import annotations

import argparse
import errno
import json
import signal
import socket
import struct
import sys
import time
from collections.abc import Sequence
from typing import Any

from swarmscope.core.errors import LoadGenError

SRC_ADDR = "10.98.0.1"
SPORT = 40000
HEADERS = 14 + 20 + 8  # Ethernet + IPv4 + UDP
TCP_HEADERS = 14 + 20 + 20  # Ethernet + IPv4 + TCP (no options)
PROTOS = {"udp": 17, "tcp": 6}
TCP_ACK_PSH = 0x18
PORTS = 40000  # destination ports per destination address
MAX_FLOWS = 1_000_000
RETRIES = 10_000  # ENOBUFS retries per window before giving up
IP_RECVERR = 11  # <linux/in.h>; not exported by the socket module


def flow_addr(i: int) -> tuple[str, int]:
    """Destination (address, port) of flow ``i``."""
    d = i // PORTS
    return f"10.200.{d >> 8}.{d & 255}", 20000 + i % PORTS


def flow_key(i: int, proto: str = "udp") -> tuple[str, str, int, int, int]:
    """Flow ``i``'s 5-tuple as the flow_count program reports it (17 = UDP, 6 = TCP)."""
    a, p = flow_addr(i)
    return (SRC_ADDR, a, SPORT, p, PROTOS[proto])


def headers(proto: str) -> int:
    """Frame bytes that are not payload: Ethernet, IPv4 and the transport header."""
    return TCP_HEADERS if proto == "tcp" else HEADERS


def tcp_segment(dport: int, payload: bytes) -> bytes:
    """A TCP header (ACK|PSH, no options) and payload, from SPORT. A segment of an established
    connection's shape with no handshake before it: the destination namespace owns no flow
    address, so nothing ever answers or receives it (it ends at the veth after XDP), and the
    checksum is left 0 for that reason (no one verifies it; the counters do not look)."""
    return struct.pack("!HHIIBBHHH", SPORT, dport, 1, 1, 5 << 4, TCP_ACK_PSH, 65535, 0, 0) + payload


def sent_per_flow(result: dict[str, Any], i: int) -> int:
    """Packets flow ``i`` (0-based within the run's flows) was sent."""
    return int(result["rounds"]) + (1 if i < int(result["partial"]) else 0)


def generate(
    flows: int,
    packets_per_flow: int,
    frame_bytes: int,
    rate: float,
    max_s: float,
    first: int = 0,
    proto: str = "udp",
) -> dict[str, Any]:
    """Send; the exact counts. ``first``: index of the first flow (disjoint blocks). ``proto``
    "tcp": raw TCP segments (tcp_segment) instead of UDP datagrams, same addresses."""
    if not 0 < flows <= MAX_FLOWS or first + flows > MAX_FLOWS:
        raise LoadGenError(f"flows must be 1..{MAX_FLOWS} (first + flows), not {first}+{flows}")
    if frame_bytes < 64 or proto not in PROTOS:
        raise LoadGenError(f"frame_bytes >= 64 (not {frame_bytes}), proto udp or tcp (not {proto})")
    payload = b"s" * (frame_bytes - headers(proto))
    if proto == "tcp":  # the kernel writes the IPv4 header; the segment is ours
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
        s.bind((SRC_ADDR, 0))
        addrs = [(a, 0) for a, _p in (flow_addr(first + i) for i in range(flows))]
        datas = [tcp_segment(flow_addr(first + i)[1], payload) for i in range(flows)]
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((SRC_ADDR, SPORT))
        addrs = [flow_addr(first + i) for i in range(flows)]
        datas = [payload] * flows
    s.setsockopt(socket.SOL_IP, IP_RECVERR, 1)
    sent = retries = rounds = partial = 0
    t0 = time.monotonic()
    deadline = t0 + max_s
    stopped = False
    try:
        for r in range(packets_per_flow):
            for j, a in enumerate(addrs):
                while True:
                    try:
                        s.sendto(datas[j], a)
                        break
                    except OSError as e:
                        if e.errno not in (errno.ENOBUFS, errno.EAGAIN) or retries >= RETRIES:
                            raise LoadGenError(f"sendto {a} failed after {retries} retries: {e}") from e
                        retries += 1
                        time.sleep(0.0005)
                sent += 1
                if sent & 255 == 0:
                    now = time.monotonic()
                    if now > deadline or _TERM:
                        rounds, partial, stopped = r, j + 1, True
                        break
                    if rate > 0:  # paced: never ahead of the schedule
                        ahead = t0 + sent / rate - now
                        if ahead > 0:
                            time.sleep(ahead)
            if stopped:
                break
        else:
            rounds, partial = packets_per_flow, 0
    finally:
        s.close()
    elapsed = time.monotonic() - t0
    return {
        "generated": sent,
        "bytes": sent * frame_bytes,
        "flows": flows if rounds else partial,
        "first": first,
        "rounds": rounds,
        "partial": partial,
        "stopped": stopped,
        "retries": retries,
        "elapsed_s": elapsed,
        "rate": sent / elapsed if elapsed > 0 else 0.0,
    }


_TERM = False  # SIGTERM: stop at the next check and still print the exact counts


def _on_term(signum: int, frame: object) -> None:
    global _TERM
    _TERM = True


def main(argv: Sequence[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _on_term)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flows", type=int, required=True)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--packets-per-flow", type=int, default=1)
    ap.add_argument("--frame-bytes", type=int, default=128)
    ap.add_argument("--rate", type=float, default=0.0, help="packets/s (0: as fast as it can)")
    ap.add_argument("--max-s", type=float, default=60.0)
    ap.add_argument("--proto", choices=sorted(PROTOS), default="udp")
    a = ap.parse_args(argv)
    res = generate(a.flows, a.packets_per_flow, a.frame_bytes, a.rate, a.max_s, a.first, a.proto)
    json.dump(res, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
