"""Packets and bytes per interface, counted by an XDP program (``bpf/pkt_count.bpf.c``).

    prog = PktCount(["eth0"])                     # or PktCount(["veth1"], netns="ss-test-x")
    prog.load()                                   # the loader attaches XDP (generic) to each one
    prog.snapshot()   # {0: {"if.eth0.packets": n, "if.eth0.bytes": b, ".ipv4", ".ipv6", ".arp"}}
    prog.close()                                  # detaches from every interface

The registry entry ``pkt_count`` takes interfaces from $SWARMSCOPE_PKT_INTERFACES (comma
list) and an optional namespace from $SWARMSCOPE_PKT_NETNS; without interfaces load() fails
rather than guessing which links to attach to. Counts are host-level (cgroup key 0): packets
belong to interfaces, not to cgroups. Caveats: XDP sees received packets only (ingress);
generic (skb) mode is the default because it works on every driver, ``mode="native"`` is
faster where the driver supports it; an interface that already has an XDP program is refused
by the kernel (we never replace someone else's); ``close()`` must run to detach (the pinned
XDP links stay otherwise, still passing everything, until the next start-up sweep).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import struct
from collections.abc import Iterator

from swarmscope.core.config import Field, list_of
from swarmscope.core.errors import ProbeError
from swarmscope.probes import pinned
from swarmscope.probes.programs.base import Snapshot
from swarmscope.probes.programs.params import startup_values

ENV_IFACES = "SWARMSCOPE_PKT_INTERFACES"
ENV_NETNS = "SWARMSCOPE_PKT_NETNS"
FIELDS = ("packets", "bytes", "ipv4", "ipv6", "arp")
XDP_FLAGS_SKB_MODE = 1 << 1
XDP_FLAGS_DRV_MODE = 1 << 2
CLONE_NEWNET = 0x40000000
_U32 = struct.Struct("<I")
_VAL = struct.Struct("<5Q")  # struct pkt_val {packets, bytes, ipv4, ipv6, arp} in pkt_count.bpf.c

_libc = ctypes.CDLL(None, use_errno=True)

# Start-up only: attaching XDP to other links per window is not worth its risk (a link that
# refuses mid-run would leave the window half-measured).
PARAMS = [
    Field(
        "pkt_count.interfaces",
        list_of(str),
        None,
        "interfaces to attach XDP to (comma list; required)",
        ENV_IFACES,
        nullable=True,
    ),
    Field(
        "pkt_count.netns",
        str,
        None,
        "network namespace of the interfaces (ip netns name)",
        ENV_NETNS,
        nullable=True,
    ),
    Field(
        "pkt_count.mode",
        str,
        "generic",
        "XDP mode: generic (every driver) or native",
        "SWARMSCOPE_PKT_MODE",
        choices=("generic", "native"),
    ),
]
WINDOW_PARAMS: frozenset[str] = frozenset()


@contextlib.contextmanager
def in_netns(name: str | None) -> Iterator[None]:
    """Run the block with this thread in network namespace ``name``: an ``ip netns`` name, or
    the absolute path of a namespace file (another mount namespace's, flow_count.netns_path)."""
    if not name:
        yield
        return
    # setns(CLONE_NEWNET) changes only the calling thread, so netlink sockets opened here
    # see the namespace's links; we switch back before returning.
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(name if name.startswith("/") else f"/var/run/netns/{name}", os.O_RDONLY)
    except OSError as e:
        os.close(own)
        raise ProbeError(f"pkt_count: no network namespace {name!r}: {e.strerror}") from e
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            raise ProbeError(f"pkt_count: setns({name}): {os.strerror(ctypes.get_errno())}")
        try:
            yield
        finally:
            if _libc.setns(own, CLONE_NEWNET) != 0:  # pragma: no cover - would leave the thread moved
                raise ProbeError("pkt_count: could not return to the original network namespace")
    finally:
        os.close(target)
        os.close(own)


class PktCount:
    name: str = "pkt_count"

    def __init__(self, interfaces: list[str], netns: str | None = None, mode: str = "generic") -> None:
        if mode not in ("generic", "native"):
            raise ProbeError(f"pkt_count: mode must be generic or native, not {mode!r}")
        self.interfaces = list(dict.fromkeys(interfaces))
        self.netns = netns
        self._flags = XDP_FLAGS_SKB_MODE if mode == "generic" else XDP_FLAGS_DRV_MODE
        self._bpf: pinned.PinnedObject | None = None
        self._ifindex: dict[int, str] = {}
        self.counters: tuple[str, ...] = tuple(f"if.{i}.{f}" for i in self.interfaces for f in FIELDS)

    @classmethod
    def from_env(cls) -> PktCount:
        v = startup_values("pkt_count", PARAMS)
        return cls(v["pkt_count.interfaces"] or [], v["pkt_count.netns"], v["pkt_count.mode"])

    def load(self) -> None:
        """The loader attaches XDP to each interface through a pinned link (``link_xdp_<ifindex>``)."""
        if self._bpf is not None:
            return
        if not self.interfaces:
            raise ProbeError(f"pkt_count: no interfaces to attach to (set ${ENV_IFACES})")
        with in_netns(self.netns):
            try:
                self._ifindex = {socket.if_nametoindex(dev): dev for dev in self.interfaces}
            except OSError as e:
                raise ProbeError(f"pkt_count: attaching XDP failed: {e}") from e
        args = ["--xdp", "pkt_count_xdp", "--ifaces", ",".join(self.interfaces)]
        args += ["--xdp-flags", str(self._flags)]
        if self.netns:
            args += ["--netns", self.netns]
        try:
            self._bpf = pinned.load(self.name, [], loader_args=args, layouts={"pkt_count": (4, _VAL.size)})
        except ProbeError as e:
            raise ProbeError(f"pkt_count: attaching XDP failed: {e}") from e

    def snapshot(self) -> Snapshot:
        if self._bpf is None:
            raise ProbeError("pkt_count: snapshot before load()")
        out = {c: 0 for c in self.counters}
        try:
            for k, cpus in self._bpf.maps["pkt_count"].percpu_items():
                dev = self._ifindex.get(_U32.unpack(k)[0])
                if dev is None:
                    continue  # an ifindex we did not attach to (cannot happen unless reused)
                for v in cpus:
                    for f, n in zip(FIELDS, _VAL.unpack(v), strict=True):
                        out[f"if.{dev}.{f}"] += n
        except ProbeError as e:
            raise ProbeError(f"pkt_count: reading the map failed: {e}") from e
        return {0: out}

    def close(self) -> None:
        if self._bpf is not None:
            obj, self._bpf = self._bpf, None
            obj.cleanup()  # the link pins go: XDP detaches
