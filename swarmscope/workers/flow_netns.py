"""Two throw-away network namespaces joined by a veth pair: where a flow storm's packets run.

    with FlowNetns() as net:        # net.src / net.dst namespaces, net.dst_dev receives
        net.exec([sys.executable, "-m", "swarmscope.workers.flow_gen", ...])  # runs in net.src
        net.target(cgroup_id)       # "4242:ss-fs-ab12cd-d:fsab12cdd" for the flow_count program

``src`` holds SRC_ADDR on its end and routes FLOW_NET (where generated flows go) to the peer,
with a permanent neighbour entry so no ARP is needed; ``dst`` has the peer address and a
blackhole route for FLOW_NET, so the flows' packets end at its veth (after any XDP program) and
go nowhere else. The veth ends have no IPv6 address (no neighbour-discovery noise). Both
namespaces are deleted on exit; every name carries a random tag (several workers, several
engineers on one machine).
"""

from __future__ import annotations

import json
import secrets
import subprocess
from types import TracebackType

from swarmscope.core.errors import LoadGenError
from swarmscope.core.sys import owners
from swarmscope.targets.neighbors.netns import ip

SRC_ADDR, DST_ADDR = "10.98.0.1", "10.98.0.2"
FLOW_NET = "10.200.0.0/16"


class FlowNetns:
    def __init__(self, prefix: str = "ss-fs") -> None:
        tag = secrets.token_hex(3)
        self.src, self.dst = f"{prefix}-{tag}-s", f"{prefix}-{tag}-d"
        self.src_dev, self.dst_dev = f"fs{tag}s", f"fs{tag}d"

    def __enter__(self) -> FlowNetns:
        # Claimed before `ip netns add`: a worker killed mid-run leaves claims the next run's
        # sweep (lifecycle.sweep_stale) follows to delete both namespaces (and the veth in them).
        owners.claim("netns", self.src)
        owners.claim("netns", self.dst)
        try:
            ip("netns", "add", self.src)
            ip("netns", "add", self.dst)
            ip("link", "add", self.src_dev, "netns", self.src, "type", "veth", "peer", "name", self.dst_dev,
               "netns", self.dst)  # fmt: skip
            # Netlink only, no sysctl: a pod's /proc/sys is read-only (the chart's flow worker).
            for ns, dev, addr in ((self.src, self.src_dev, SRC_ADDR), (self.dst, self.dst_dev, DST_ADDR)):
                # No IPv6 address on the veth, so it sends nothing (no DAD, no solicitations).
                ip("-n", ns, "link", "set", dev, "addrgenmode", "none")
                ip("-n", ns, "link", "set", "lo", "up")
                ip("-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
                ip("-n", ns, "link", "set", dev, "up")
            # The flows end here even where a new namespace inherits forwarding from the host's
            # (a Kubernetes node): a blackhole route drops them and sends no ICMP back.
            ip("-n", self.dst, "route", "add", "blackhole", FLOW_NET)
            mac = json.loads(ip("-n", self.dst, "-j", "link", "show", self.dst_dev).stdout)[0]["address"]
            ip(
                "-n",
                self.src,
                "neigh",
                "replace",
                DST_ADDR,
                "lladdr",
                mac,
                "dev",
                self.src_dev,
                "nud",
                "permanent",
            )
            ip("-n", self.src, "route", "add", FLOW_NET, "via", DST_ADDR, "dev", self.src_dev)
        except BaseException:
            self.close()
            raise
        return self

    def exec(self, cmd: list[str], timeout: float) -> str:
        """Run ``cmd`` in the source namespace; its stdout (LoadGenError with its stderr)."""
        p = subprocess.run(
            ["ip", "netns", "exec", self.src, *cmd],
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if p.returncode != 0:
            tail = p.stderr.strip().splitlines()[-3:]
            raise LoadGenError(f"{' '.join(cmd[:3])} failed ({p.returncode}): {' | '.join(tail)}")
        return p.stdout

    def start(self, cmd: list[str]) -> subprocess.Popen[str]:
        """Start ``cmd`` in the source namespace (``ip netns exec`` execs it: same pid)."""
        return subprocess.Popen(
            ["ip", "netns", "exec", self.src, *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def target(self, cgroup: int | str) -> str:
        """The receiving interface as a ``flow_count.targets`` entry (cgroup: id or v2 path)."""
        return f"{cgroup}:{self.dst}:{self.dst_dev}"

    def dropped(self) -> int:
        """Packets the veth pair dropped (both ends' tx and rx drops)."""
        total = 0
        for ns, dev in ((self.src, self.src_dev), (self.dst, self.dst_dev)):
            st = json.loads(ip("-n", ns, "-s", "-j", "link", "show", dev).stdout)[0]["stats64"]
            total += int(st["tx"]["dropped"]) + int(st["rx"]["dropped"])
        return total

    def close(self) -> None:
        ip("netns", "del", self.src, check=False)  # takes the veth pair with it
        ip("netns", "del", self.dst, check=False)
        owners.release("netns", self.src)
        owners.release("netns", self.dst)

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
