"""pkt_count really attached (XDP) in two network namespaces we create: N UDP packets -> N.

Namespace A (veth ssa, 10.199.0.1) sends to namespace B (veth ssb, 10.199.0.2, XDP attached).
IPv6 is off on both ends and B's MAC is a permanent neighbour in A, so no ARP/ND noise reaches
ssb; the test still checks the IPv4 split separately. Namespaces are always deleted.
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import sys
from collections.abc import Iterator

import pytest

from swarmscope.errors import ProbeError
from swarmscope.probes.programs.base import get_program
from swarmscope.probes.programs.pkt_count import PktCount

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


@pytest.mark.root
@pytest.mark.bpf
def test_exact_packets_on_interface() -> None:
    with veth_pair() as (a, b):
        prog = PktCount(["ssb"], netns=b)
        prog.load()
        try:
            before = prog.snapshot()[0]
            send(a, 500)
            after = prog.snapshot()[0]
        finally:
            prog.close()
        d = {k: after[k] - before[k] for k in after}
        assert d["if.ssb.ipv4"] == 500, d
        assert d["if.ssb.arp"] == 0 and d["if.ssb.ipv6"] == 0, d
        assert d["if.ssb.packets"] == 500
        # 14 Ethernet + 20 IPv4 + 8 UDP + 100 payload
        assert d["if.ssb.bytes"] == 500 * 142
        # Detached on close: the link carries no XDP program any more.
        out = subprocess.run(["ip", "-n", b, "link", "show", "ssb"], capture_output=True, text=True).stdout
        assert "xdp" not in out


def test_needs_interfaces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWARMSCOPE_PKT_INTERFACES", raising=False)
    prog = get_program("pkt_count")
    with pytest.raises(ProbeError, match="no interfaces"):
        prog.load()


@pytest.mark.root
@pytest.mark.bpf
def test_unknown_interface_is_an_error() -> None:
    prog = PktCount(["ss-no-such-if"])
    with pytest.raises(ProbeError, match="attaching XDP failed"):
        prog.load()
