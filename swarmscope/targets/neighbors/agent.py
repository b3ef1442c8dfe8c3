"""Reference neighbor agent: list/watch the control plane, program the XDP map in batches.

    SWARMSCOPE_NEIGHBORS_TOKEN=... python -m swarmscope.targets.neighbors.agent \
        --control-plane 127.0.0.1:PORT --pin-dir /sys/fs/bpf/ss-neigh   # "WATCHING <rev>" when live

    t = XdpTarget(pin_dir=None); a = Agent("127.0.0.1:PORT", t, token=cp.token)
    a.list_and_program()      # snapshot -> map, returns (revision, entries)
    a.watch(stop_event)       # transactions after the programmed revision -> map

Every streamed page goes to the map as one BPF_MAP_UPDATE_BATCH straight from the message's
bytes (see swarmscope/sys/bpf.py). The revision programmed is stored next to the data: in the pinned
``neigh_meta`` map for XDP (both survive an agent restart, both vanish together), in a file
for the kernel table. It is written only after a transaction's last page is in the map, so an
agent killed mid-transaction re-applies it on restart (puts are idempotent) and converges.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import grpc

from swarmscope.core.sys import bpf
from swarmscope.targets.neighbors.server import connect
from swarmscope.v1 import neighbors_pb2 as pb
from swarmscope.v1 import neighbors_pb2_grpc as pbg


class Target(Protocol):
    def revision(self) -> int: ...
    def set_revision(self, rev: int) -> None: ...
    def apply(self, keys: bytes, values: bytes, deleted: bytes = b"") -> int: ...
    def close(self) -> None: ...


def apply_to_map(fd: int, keys: bytes, values: bytes, deleted: bytes = b"") -> int:
    """One transaction into a neighbor map: puts in one batch, then deletes; returns puts."""
    n = bpf.map_update_batch(fd, keys, values) if keys else 0
    if deleted:
        bpf.map_delete_batch(fd, deleted)
    return n


class XdpTarget:
    """The xdp_neigh program and its maps (pinned under ``pin_dir`` when given)."""

    def __init__(self, pin_dir: str | None = None, max_entries: int = 1 << 20, miss_action: str = "XDP_PASS"):
        from swarmscope.probes.bcc_env import load_program

        cflags = [f"-DSS_NEIGH_MAX={max_entries}", f"-DSS_MISS_ACTION={miss_action}"]
        if pin_dir:
            os.makedirs(pin_dir, exist_ok=True)
            cflags += [f'-DSS_NEIGH_PIN="{pin_dir}/neighbors"', f'-DSS_META_PIN="{pin_dir}/neigh_meta"']
        self.bpf = load_program("xdp_neigh", cflags, tracing=False)  # XDP: no tracefs needed
        self.fd: int = self.bpf[b"neighbors"].map_fd
        self.meta = self.bpf[b"neigh_meta"]
        self.attached: list[str] = []

    def revision(self) -> int:
        return int(self.meta[ctypes.c_uint32(0)].value)

    def set_revision(self, rev: int) -> None:
        self.meta[ctypes.c_uint32(0)] = ctypes.c_uint64(rev)

    def apply(self, keys: bytes, values: bytes, deleted: bytes = b"") -> int:
        return apply_to_map(self.fd, keys, values, deleted)

    def clear(self) -> None:
        for k, _v in list(bpf.map_lookup_batches(self.fd)):
            bpf.map_delete_batch(self.fd, k)
        self.set_revision(0)

    def contents(self) -> dict[bytes, bytes]:
        return bpf.map_read_all(self.fd)

    def attach(self, dev: str, skb_mode: bool = False) -> None:
        from bcc import BPF

        fn = self.bpf.load_func(b"xdp_neigh", BPF.XDP)
        self.bpf.attach_xdp(dev.encode(), fn, 1 << 1 if skb_mode else 0)  # XDP_FLAGS_SKB_MODE
        self.attached.append(dev)

    def stats(self) -> list[int]:
        """[hit, miss, not IPv4, redirected] summed over CPUs."""
        t = self.bpf[b"xdp_stats"]
        return [int(sum(t[ctypes.c_int(i)])) for i in range(4)]

    def close(self) -> None:
        for dev in self.attached:
            with contextlib.suppress(Exception):
                self.bpf.remove_xdp(dev.encode())
        self.bpf.cleanup()


class KernelTarget:
    """The kernel neighbor table of ``ifindex`` (in ``netns``); revision kept in ``state``."""

    def __init__(self, ifindex: int, netns: str | None, state: str):
        from swarmscope.targets.neighbors.netlink import KernelTable

        self.table = KernelTable(ifindex, netns)
        self.state = Path(state)

    def revision(self) -> int:
        try:
            return int(self.state.read_text())
        except (OSError, ValueError):
            return 0

    def set_revision(self, rev: int) -> None:
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(str(rev))
        os.replace(tmp, self.state)

    def apply(self, keys: bytes, values: bytes, deleted: bytes = b"") -> int:
        return self.table.apply(keys, values, deleted)

    def close(self) -> None:
        self.table.close()


class Agent:
    def __init__(
        self,
        address: str,
        target: Target,
        on_page: Callable[[pb.NeighborBatch], None] | None = None,
        token: str | None = None,
    ):
        # The control plane's token: given, else $SWARMSCOPE_NEIGHBORS_TOKEN.
        self.channel = connect(address, token)
        self.stub = pbg.NeighborStoreStub(self.channel)
        self.target = target
        self.on_page = on_page
        self.programmed = 0  # entries written to the target by this agent
        self.revision = target.revision()
        self.cond = threading.Condition()
        self.call: Any = None

    def _page(self, b: pb.NeighborBatch) -> None:
        self.programmed += self.target.apply(b.keys, b.values, b.deleted)
        if self.on_page:
            self.on_page(b)
        if b.last:
            self.target.set_revision(b.revision)
            with self.cond:
                self.revision = b.revision
                self.cond.notify_all()

    def list_and_program(self, revision: int = 0, page_size: int = 0) -> tuple[int, int]:
        """Program the snapshot at ``revision`` (0 = now); returns (revision, entries)."""
        before = self.programmed
        for b in self.stub.List(pb.ListRequest(revision=revision, page_size=page_size)):
            self._page(b)
        return self.revision, self.programmed - before

    def watch(self, stop: threading.Event | None = None, ready: Callable[[int], None] | None = None) -> None:
        """Apply every transaction after the programmed revision until ``stop`` or cancel()."""
        self.call = self.stub.Watch(pb.WatchRequest(start_revision=self.revision))
        if ready:
            ready(self.revision)
        try:
            for b in self.call:
                self._page(b)
                if stop is not None and stop.is_set():
                    break
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                raise

    def wait_revision(self, rev: int, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: self.revision >= rev, timeout)

    def cancel(self) -> None:
        if self.call is not None:
            self.call.cancel()

    def close(self) -> None:
        self.cancel()
        self.channel.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="reference neighbor agent: control plane -> XDP map")
    ap.add_argument("--control-plane", required=True, help="host:port of the NeighborStore service")
    ap.add_argument("--pin-dir", required=True, help="bpffs dir for the maps (XDP) or state dir (kernel)")
    ap.add_argument("--target", choices=["xdp", "kernel"], default="xdp")
    ap.add_argument("--ifindex", type=int, default=0, help="kernel target: device index")
    ap.add_argument("--netns", default=None, help="kernel target: network namespace")
    ap.add_argument("--attach", default=None, help="XDP: attach the program to this device")
    ap.add_argument("--max-entries", type=int, default=1 << 20)
    ns = ap.parse_args(argv)
    target: Target
    if ns.target == "xdp":
        target = XdpTarget(ns.pin_dir, ns.max_entries)
        if ns.attach:
            target.attach(ns.attach)
    else:
        os.makedirs(ns.pin_dir, exist_ok=True)
        target = KernelTarget(ns.ifindex, ns.netns, os.path.join(ns.pin_dir, "revision"))
    agent = Agent(ns.control_plane, target)
    store_rev = agent.stub.Status(pb.StatusRequest()).revision
    if agent.revision > store_rev:  # the store was replaced: our revision means nothing there
        if isinstance(target, XdpTarget):
            target.clear()
        agent.revision = 0
    if agent.revision == 0:  # fresh: start from a snapshot, then watch after it
        rev, n = agent.list_and_program()
        print(f"LISTED {rev} {n}", flush=True)
    try:
        agent.watch(ready=lambda r: print(f"WATCHING {r}", flush=True))
    except KeyboardInterrupt:
        pass
    finally:
        agent.close()
        target.close()
    return 0


if __name__ == "__main__":
    t0 = time.monotonic()
    sys.exit(main())
