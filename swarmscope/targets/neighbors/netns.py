"""A throw-away network namespace wired to the host by a veth pair, for datapath checks.

    with VethNetns() as ns:            # ns.name "ss-test-<hex>", ns.host_dev on the host side
        xdp.attach(ns.host_dev)
        ns.send_udp(["10.64.0.1", ...])  # one UDP datagram per address, sent from inside

Inside the namespace 10.64.0.0/10 (where generated neighbors live) is routed to the veth with
a permanent neighbor for the gateway, so packets reach the host side without ARP. The host
side has no address: packets the XDP program passes die there; run the program with
SS_MISS_ACTION=XDP_DROP to keep them out of the host stack entirely. Always deleted on exit.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from types import TracebackType

from swarmscope.core.errors import SetupError
from swarmscope.core.sys import owners


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["ip", *args], check=check, capture_output=True, text=True, timeout=60)
    except subprocess.CalledProcessError as e:
        raise SetupError(f"`ip {' '.join(args)}` failed: {e.stderr.strip()}") from e


_SENDER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for a in sys.argv[2:]:
    for _ in range(int(sys.argv[1])):
        s.sendto(b"swarmscope", (a, 9))
"""


class VethNetns:
    def __init__(self, prefix: str = "ss-test"):
        tag = secrets.token_hex(3)
        self.name = f"{prefix}-{tag}"
        self.host_dev = f"ssn{tag}h"
        self.ns_dev = f"ssn{tag}p"
        # The kernel-table target device (a veth: no dummy module here). Its name is unique on
        # the machine: the probe's neigh_events counts per device name, and several workers'
        # namespaces may sit in one cgroup.
        self.dummy, self._dummy_peer = f"ssn{tag}d", f"ssn{tag}e"

    def __enter__(self) -> VethNetns:
        # Claimed first: a run killed right after `ip netns add` still leaves a claim to sweep.
        owners.claim("netns", self.name)
        owners.claim("link", self.host_dev)
        try:
            ip("netns", "add", self.name)
            ip("link", "add", self.host_dev, "type", "veth", "peer", "name", self.ns_dev)
            ip("link", "set", self.ns_dev, "netns", self.name)
            ip("link", "set", self.host_dev, "up")
            n = ("-n", self.name)
            ip(*n, "link", "set", "lo", "up")
            ip(*n, "addr", "add", "10.99.0.1/30", "dev", self.ns_dev)
            ip(*n, "link", "set", self.ns_dev, "up")
            mac = json.loads(ip("-j", "link", "show", self.host_dev).stdout)[0]["address"]
            ip(*n, "neigh", "replace", "10.99.0.2", "lladdr", mac, "dev", self.ns_dev, "nud", "permanent")
            ip(*n, "route", "add", "10.64.0.0/10", "via", "10.99.0.2", "dev", self.ns_dev)
        except BaseException:
            self.close()
            raise
        return self

    def add_dummy(self) -> int:
        """(Re)create the kernel-table target device in the namespace; its ifindex.

        A veth pair inside the namespace (this kernel has no dummy driver); deleting it drops
        every neighbor entry on it at once, which is how the sweep starts a point empty.
        """
        ip("-n", self.name, "link", "del", self.dummy, check=False)
        ip("-n", self.name, "link", "add", self.dummy, "type", "veth", "peer", "name", self._dummy_peer)
        ip("-n", self.name, "link", "set", self.dummy, "up")
        return int(json.loads(ip("-n", self.name, "-j", "link", "show", self.dummy).stdout)[0]["ifindex"])

    def neigh_count(self, dev: str) -> int:
        out = ip("-n", self.name, "-4", "neigh", "show", "dev", dev).stdout
        return sum(1 for line in out.splitlines() if line.strip())

    def send_udp(self, addrs: list[str], per_addr: int = 1) -> None:
        cmd = ["ip", "netns", "exec", self.name, sys.executable, "-c", _SENDER, str(per_addr), *addrs]
        subprocess.run(cmd, check=True, timeout=60, capture_output=True)

    def close(self) -> None:
        ip("link", "del", self.host_dev, check=False)
        ip("netns", "del", self.name, check=False)
        owners.release("link", self.host_dev)
        owners.release("netns", self.name)

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
