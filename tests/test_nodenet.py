"""tests/nodenet.py: the real nodes' addresses, and the routes between their pod CIDRs.

    .venv/bin/python -m pytest -q tests/test_nodenet.py

The address plan is checked without root; the bridge, two namespaces and their routes are made
for real (root) and removed: each namespace reaches the other's pod CIDR straight over the
bridge, the host reaches both through them, and nothing is left after teardown.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from nodenet import Bridge, run


def test_address_plan_gives_every_node_its_own_ips_and_pod_cidr() -> None:
    br = Bridge("ssbr1", "10.231.7", 7)
    nets = [br.net(i, f"ssrn1-{i}") for i in range(3)]
    assert [(n.host_ip, n.ns_ip, n.pod_subnet) for n in nets] == [
        ("10.231.7.10", "10.231.7.100", "10.232.7.0/24"),
        ("10.231.7.11", "10.231.7.101", "10.233.7.0/24"),
        ("10.231.7.12", "10.231.7.102", "10.234.7.0/24"),
    ]
    assert [n.host_if for n in nets] == ["ssrn1-0-h", "ssrn1-1-h", "ssrn1-2-h"]
    with pytest.raises(ValueError, match=r"node index 8 not in 0\.\.7"):
        br.net(8, "ssrn1-8")
    with pytest.raises(ValueError, match="longer than 13"):
        br.net(0, "ssrn12345678-0")


@pytest.mark.root
def test_namespaces_route_pod_cidrs_to_each_other_over_the_bridge() -> None:
    with Bridge.up() as br, Bridge.up() as other:  # a second bridge in one run takes the next N
        assert (other.n, other.name) != (br.n, br.name)
        a, b = br.net(0, f"nn{br.n}a"), br.net(1, f"nn{br.n}b")
        try:
            for n in (a, b):
                n.up()
            a.peer(b)
            b.peer(a)

            def route(ns: str | None, dst: str) -> str:
                pre = ("ip", "netns", "exec", ns) if ns else ()
                return run(*pre, "ip", "-o", "route", "get", dst).stdout.split(" uid ")[0].strip()

            pod_b = b.pod_subnet.replace(".0/24", ".5")
            pod_a = a.pod_subnet.replace(".0/24", ".5")
            assert route(a.netns, pod_b) == f"{pod_b} via {b.ns_ip} dev eth0 src {a.ns_ip}"
            assert route(b.netns, pod_a) == f"{pod_a} via {a.ns_ip} dev eth0 src {b.ns_ip}"
            assert route(None, pod_a) == f"{pod_a} via {a.ns_ip} dev {br.name} src {a.host_ip}"
            # A node IP is reachable from every namespace (the kubelet, DNS and API forwarder bind it).
            with socket.create_server((a.host_ip, 0)) as srv:
                port = srv.getsockname()[1]
                code = f"import socket; socket.create_connection(({a.host_ip!r}, {port}), 5).close()"
                run("ip", "netns", "exec", b.netns, sys.executable, "-c", code)
                conn, (peer, _) = srv.accept()
                conn.close()
            assert peer == b.ns_ip
        finally:
            for n in (a, b):
                n.down()
    assert not Path(f"/sys/class/net/{br.name}").exists()
    assert not Path(f"/run/netns/{a.netns}").exists()
