"""pkt_count really attached (XDP) in two network namespaces we create: N UDP packets -> N.

Namespace A (veth ssa, 10.199.0.1) sends to namespace B (veth ssb, 10.199.0.2, XDP attached).
IPv6 is off on both ends and B's MAC is a permanent neighbour in A, so no ARP/ND noise reaches
ssb; the test still checks the IPv4 split separately. Namespaces are always deleted.
"""

from __future__ import annotations

import subprocess
import time

import pytest
from net_helpers import send, veth_pair

from swarmscope.core.errors import ProbeError
from swarmscope.probes.programs.base import get_program
from swarmscope.probes.programs.pkt_count import PktCount


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_exact_packets_on_interface() -> None:
    with veth_pair() as (a, b):
        prog = PktCount(["ssb"], netns=b)  # the loader attaches it through a pinned XDP link
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
        # Detached on close: the link carries no XDP program any more (a removed link pin is
        # released by the kernel's deferred work: polled, bounded).
        deadline = time.monotonic() + 5
        while True:
            show = ["ip", "-n", b, "link", "show", "ssb"]
            out = subprocess.run(show, capture_output=True, text=True).stdout
            if "xdp" not in out or time.monotonic() > deadline:
                break
            time.sleep(0.05)
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
