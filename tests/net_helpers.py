"""Test helpers: a veth pair between two throw-away network namespaces, and a UDP sender.

    with veth_pair() as (a, b):      # ssa in a (10.199.0.1) <-> ssb in b (10.199.0.2)
        send(a, 100)                 # exactly 100 UDP packets arrive on ssb, nothing else

IPv6 is off on both ends and both neighbours are permanent, so no ARP/ND reaches ssb. The
namespaces (ss-test-<random>-a/b) are always deleted, which also deletes the veth pair.
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import sys
from collections.abc import Iterator

SENDER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[2])):
    s.sendto(b"x" * 100, (sys.argv[1], 9999))
"""


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@contextlib.contextmanager
def veth_pair() -> Iterator[tuple[str, str]]:
    tag = secrets.token_hex(3)
    a, b = f"ss-test-{tag}-a", f"ss-test-{tag}-b"
    try:
        ip("netns", "add", a)
        ip("netns", "add", b)
        ip("link", "add", "ssa", "netns", a, "type", "veth", "peer", "name", "ssb", "netns", b)
        for ns, dev, addr in ((a, "ssa", "10.199.0.1/24"), (b, "ssb", "10.199.0.2/24")):
            ip("netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1")
            ip("-n", ns, "addr", "add", addr, "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
        # Permanent neighbours both ways: B answers the UDP with ICMP port-unreachable, and
        # resolving A for that would bring A's ARP reply in on ssb.
        for ns, dev, peer_ns, peer_dev, peer_ip in (
            (a, "ssa", b, "ssb", "10.199.0.2"),
            (b, "ssb", a, "ssa", "10.199.0.1"),
        ):
            mac = mac_of(peer_ns, peer_dev)
            ip("-n", ns, "neigh", "replace", peer_ip, "lladdr", mac, "dev", dev, "nud", "permanent")
        yield a, b
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def mac_of(ns: str, dev: str) -> str:
    out = subprocess.run(
        ["ip", "-n", ns, "-br", "link", "show", dev], check=True, capture_output=True, text=True
    )
    return out.stdout.split()[2]


def send(ns: str, n: int) -> None:
    subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-c", SENDER, "10.199.0.2", str(n)],
        check=True,
        timeout=60,
    )
