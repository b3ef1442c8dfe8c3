"""The real nodes' network: one host bridge, a network namespace per node, routes between pod CIDRs.

    with Bridge.up() as br:
        a, b = br.net(0, "ssrn1-0"), br.net(1, "ssrn1-1")
        a.up(); b.up(); a.peer(b); b.peer(a)      # pods on a reach pods on b, and back

Addresses (N from the pid, so parallel runs on this machine differ; the next free N if taken):
the bridge ssbr<pid> holds 10.231.N.1/24; node i's IP 10.231.N.(10+i)/32 is on the bridge too
(the kubelet, the node's cluster DNS and API forwarder bind it: the kubelet refuses a loopback
node IP); its network namespace's eth0 is 10.231.N.(100+i)/24 on the bridge (veth, host end
`<name>-h`), default route via the node IP; its pods get 10.(232+i).N.0/24 on a CNI bridge inside
the namespace. The host routes each pod CIDR to its namespace, and each namespace routes the other
nodes' pod CIDRs to their namespaces over the bridge, so pod-to-pod traffic between nodes crosses
the bridge without the host forwarding (its ip_forward stays as it is).

Caveats: at most 8 nodes (10.232-10.239); interface names are at most 15 characters, so node
names are at most 13 (and bridge names `ssbr<pid>-<k>` fit while pids have at most 7 digits and
k at most 2).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

MAX_NODES = 8


def run(*argv: str, check: bool = True, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed (rc={r.returncode}): {r.stderr.strip()}")
    return r


@dataclass
class Net:
    """One node's network: netns <name>, its veth on the bridge, its pod subnet."""

    netns: str
    host_if: str  # the veth's host end, a port of the bridge
    host_ip: str  # the node IP, on the bridge
    ns_ip: str  # the namespace's end
    pod_subnet: str
    bridge: str

    def up(self) -> None:
        run("ip", "netns", "add", self.netns)
        run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", "eth0", "netns", self.netns)
        run("ip", "link", "set", self.host_if, "master", self.bridge, "up")
        run("ip", "addr", "add", f"{self.host_ip}/32", "dev", self.bridge)
        ns = ("ip", "netns", "exec", self.netns)
        run(*ns, "ip", "addr", "add", f"{self.ns_ip}/24", "dev", "eth0")
        run(*ns, "ip", "link", "set", "eth0", "up")
        run(*ns, "ip", "link", "set", "lo", "up")
        run(*ns, "ip", "route", "add", "default", "via", self.host_ip)
        run(*ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        # The host reaches pods (kubelet probes, the tests) through the namespace, from the node IP.
        run("ip", "route", "add", self.pod_subnet, "via", self.ns_ip, "dev", self.bridge, "src", self.host_ip)

    def peer(self, other: Net) -> None:
        """Route ``other``'s pod subnet from this namespace straight to ``other``'s, over the bridge."""
        run("ip", "netns", "exec", self.netns, "ip", "route", "add", other.pod_subnet, "via", other.ns_ip)

    def down(self) -> None:
        # Deleting the namespace destroys its bridges and both veth ends.
        run("ip", "netns", "del", self.netns, check=False)
        run("ip", "link", "del", self.host_if, check=False)
        run("ip", "route", "del", self.pod_subnet, "dev", self.bridge, check=False)
        run("ip", "addr", "del", f"{self.host_ip}/32", "dev", self.bridge, check=False)


@dataclass
class Bridge:
    name: str
    prefix: str  # "10.231.N"
    n: int

    @classmethod
    @contextlib.contextmanager
    def up(cls) -> Iterator[Bridge]:
        """A new bridge on the first N (from the pid on) that no address or route here uses:
        a run may hold several (the session's nodes and a test's own node)."""
        addrs = run("ip", "-o", "addr", "show").stdout + run("ip", "route", "show").stdout
        for k in range(250):
            n = (os.getpid() + k) % 250 + 1
            used = [f" 10.231.{n}."] + [f"10.{232 + i}.{n}.0/24" for i in range(MAX_NODES)]
            name = f"ssbr{os.getpid()}" + (f"-{k}" if k else "")
            if not any(u in addrs for u in used) and not os.path.exists(f"/sys/class/net/{name}"):
                break
        else:
            raise RuntimeError("nodenet: every 10.231.N.0/24 here is in use")
        br = cls(name, f"10.231.{n}", n)
        run("ip", "link", "add", br.name, "type", "bridge")
        try:
            run("ip", "addr", "add", f"{br.prefix}.1/24", "dev", br.name)
            run("ip", "link", "set", br.name, "up")
            yield br
        finally:
            run("ip", "link", "del", br.name, check=False)

    def net(self, i: int, name: str) -> Net:
        if not 0 <= i < MAX_NODES:
            raise ValueError(f"nodenet: node index {i} not in 0..{MAX_NODES - 1}")
        if len(name) > 13:
            raise ValueError(f"nodenet: node name {name!r} is longer than 13 characters")
        return Net(
            netns=name, host_if=f"{name}-h", host_ip=f"{self.prefix}.{10 + i}",
            ns_ip=f"{self.prefix}.{100 + i}", pod_subnet=f"10.{232 + i}.{self.n}.0/24", bridge=self.name,
        )  # fmt: skip

    def exists(self) -> bool:
        return os.path.exists(f"/sys/class/net/{self.name}")
