"""The reference eBPF flow agent (a system under test), after the NetObserv write-up's agent.

    ip netns exec NS python -m swarmscope.targets.flow_agent.agent --dev fsab12cds \\
        --cache-max-flows 10000 --cache-timeout 1      # stdin: "start" / "flush"; stdout: JSON

Datapath (``bpf/flow_agent.bpf.c``, TC egress of ``--dev``): a per-CPU hash map of
cacheMaxFlows flows, and a ring buffer for packets whose flow a full map cannot take. User space
evicts the map every ``--cache-timeout`` seconds, and early when the ring buffer shows it is
full (the write-up's "hashmap evictions above the timeout rate"); ring-buffer records go to
the accounter, a user-space cache evicted on the same tick. Evicted flows go to the exporter:
here, one JSON line per eviction on stdout, its flows in ``records`` ([dst, dport, proto,
packets, frame bytes] each), read by the collector (the flow storm's worker).

Control, one line on stdin: ``config <cacheMaxFlows> <cacheTimeout>`` reloads the datapath with
a new map (same process: the probe's procstat keeps sampling its pid), ``start`` begins a
window (counters zeroed; answered ``{"started": true}``), ``flush`` evicts everything now and
prints the window's summary,
``{"window": {...}}``: packets, bytes, flow records exported, distinct flows, evictions and
evicted flows per component (hashmap, accounter, exporter), the ring buffer / hashmap ratio,
buffer sizes (largest map and accounter occupancy seen at an eviction) and dropped flows (ring
buffer full). Caveat: as in the write-up's agent, a packet that updates a map entry while user
space evicts it can be lost or counted in the next record; the reconcile shows it.
With ``--metrics-fd`` (a listening socket), the same figures are served as Prometheus text
under the write-up's names (metrics.py), for the flow storm to scrape.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import json
import os
import select
import socket
import struct
import time
from collections.abc import Sequence
from typing import Any

from swarmscope.targets.flow_agent import AGENT_COMM

FlowKey = tuple[int, int, int, int, int]


class _Rec(ctypes.Structure):
    """struct flow_rec of bpf/flow_agent.bpf.c (key, then value)."""

    _fields_ = [  # noqa: RUF012 (ctypes reads it as is)
        ("saddr", ctypes.c_uint32), ("daddr", ctypes.c_uint32), ("sport", ctypes.c_uint16),
        ("dport", ctypes.c_uint16), ("proto", ctypes.c_uint8), ("pad", ctypes.c_uint8 * 3),
        ("packets", ctypes.c_uint64), ("bytes", ctypes.c_uint64), ("first_ns", ctypes.c_uint64),
        ("last_ns", ctypes.c_uint64),
    ]  # fmt: skip


BATCH = 4096  # entries per lookup-and-delete call


def drain(table: Any) -> list[tuple[Any, Any]]:
    """Every entry of a hash map, removed, in BATCH-sized lookup-and-delete calls.

    BCC's own loop sizes its buffer to max_entries and fails with ENOSPC when the datapath
    keeps inserting while it drains (a full map, refilled at once: exactly this agent's load);
    a fixed batch per call never runs out of room, and each call's entries are kept."""
    from bcc.libbcc import lib

    keys, values = (table.Key * BATCH)(), (table.Leaf * BATCH)()
    out: list[tuple[Any, Any]] = []
    pos, cnt = ctypes.c_uint32(0), ctypes.c_uint32(0)
    first = True
    for _ in range(1 + 4 * table.max_entries // BATCH + 64):  # bounded: the map refills at most so fast
        cnt.value = BATCH
        res = lib.bpf_lookup_and_delete_batch(
            table.map_fd,
            None if first else ctypes.byref(pos),
            ctypes.byref(pos),
            keys,
            values,
            ctypes.byref(cnt),
        )
        err = ctypes.get_errno()
        out += [(type(keys[i]).from_buffer_copy(keys[i]), type(values[i]).from_buffer_copy(values[i]))
                for i in range(cnt.value)]  # fmt: skip
        first = False
        if res != 0:
            if err == errno.ENOENT:
                return out  # the whole map walked
            raise OSError(err, f"BPF_MAP_LOOKUP_AND_DELETE_BATCH: {os.strerror(err)}")
    return out


def _ip(addr: int) -> str:
    return socket.inet_ntoa(struct.pack("=I", addr))  # as read from the map: back to its bytes


class Window:
    def __init__(self) -> None:
        self.packets = self.bytes = self.records = 0
        self.flows: set[FlowKey] = set()
        self.evictions = {"hashmap": 0, "accounter": 0, "exporter": 0}
        self.evicted_flows = {"hashmap": 0, "accounter": 0, "exporter": 0}
        # the write-up's buffer names: hashmap-total (entries drained) and hashmap-unique (distinct
        # flows among them) should be equal; a key re-inserted mid-drain makes total larger
        self.buffer_sizes = {"hashmap-total": 0, "hashmap-unique": 0, "accounter": 0}
        self.early = 0  # hashmap evictions because the map was full, not the timeout
        self.dropped = 0

    def summary(self) -> dict[str, Any]:
        hm = self.evicted_flows["hashmap"]
        return {
            "packets": self.packets,
            "bytes": self.bytes,
            "records": self.records,
            "flows": len(self.flows),
            "evictions": self.evictions,
            "evicted_flows": self.evicted_flows,
            "early_hashmap_evictions": self.early,
            "ringbuf_hashmap_ratio": self.evicted_flows["accounter"] / hm if hm else None,
            "buffer_sizes": self.buffer_sizes,
            "dropped_flows": self.dropped,
        }


class FlowAgent:
    def __init__(
        self, dev: str, cache_max_flows: int, cache_timeout_s: float, ringbuf_pages: int = 64
    ) -> None:
        self.dev = dev
        self.ringbuf_pages = ringbuf_pages
        self.bpf: Any = None
        self.accounter: dict[FlowKey, list[int]] = {}
        self.win = Window()
        # cumulative over the agent's life: what its /metrics counters serve (metrics.py)
        self.totals: dict[str, Any] = {
            "evictions": dict.fromkeys(("hashmap", "accounter", "exporter"), 0),
            "evicted_flows": dict.fromkeys(("hashmap", "accounter", "exporter"), 0),
            "dropped": 0,
        }
        self.full = False
        self._dropped0 = self._dropped_seen = 0
        self.configure(cache_max_flows, cache_timeout_s)

    def configure(self, cache_max_flows: int, cache_timeout_s: float) -> None:
        """(Re)load the datapath with a new map size: the same process, so the same pid."""
        from swarmscope.probes import bcc_env

        if self.bpf is not None:
            self.evict()
            self.detach()
            self.bpf.cleanup()
        self.cache_max_flows, self.timeout = int(cache_max_flows), float(cache_timeout_s)
        flags = [f"-DCACHE_MAX_FLOWS={self.cache_max_flows}", f"-DRINGBUF_PAGES={int(self.ringbuf_pages)}"]
        # TC only, no tracepoint: no CAP_PERFMON or tracefs needed (none in the chart's worker pod)
        self.bpf = bcc_env.load_program("flow_agent", cflags=flags, tracing=False)
        self._dropped0 = self._dropped_seen = 0  # a new program: its drop counter starts at 0
        self.bpf[b"direct_flows"].open_ring_buffer(self._on_record)
        self._attach()

    def _attach(self) -> None:
        import bcc
        from pyroute2 import IPRoute

        fn = self.bpf.load_func(b"flow_agent_tc", bcc.BPF.SCHED_CLS)
        with IPRoute() as ipr:
            idx = ipr.link_lookup(ifname=self.dev)[0]
            with contextlib.suppress(Exception):  # already there
                ipr.tc("add", "clsact", idx)
            ipr.tc("add-filter", "bpf", idx, ":1", fd=fn.fd, name=fn.name, parent="ffff:fff3", classid=1,
                   direct_action=True)  # fmt: skip

    def detach(self) -> None:
        from pyroute2 import IPRoute

        with IPRoute() as ipr, contextlib.suppress(Exception):
            idx = ipr.link_lookup(ifname=self.dev)[0]
            ipr.tc("del", "clsact", idx)

    def _on_record(self, ctx: Any, data: Any, size: int) -> None:
        r = ctypes.cast(data, ctypes.POINTER(_Rec)).contents  # BCC cannot derive a nested struct
        key = (int(r.saddr), int(r.daddr), int(r.sport), int(r.dport), int(r.proto))
        acc = self.accounter.setdefault(key, [0, 0])
        acc[0] += int(r.packets)
        acc[1] += int(r.bytes)
        self.full = True

    def _export(self, component: str, flows: dict[FlowKey, list[int]], buffers: dict[str, int]) -> None:
        w = self.win
        w.evictions[component] += 1
        w.evicted_flows[component] += len(flows)
        for name, n in buffers.items():
            w.buffer_sizes[name] = max(w.buffer_sizes[name], n)
        p = sum(v[0] for v in flows.values())
        b = sum(v[1] for v in flows.values())
        w.packets += p
        w.bytes += b
        w.records += len(flows)
        w.flows.update(flows)
        w.evictions["exporter"] += 1
        w.evicted_flows["exporter"] += len(flows)
        for c in (component, "exporter"):
            self.totals["evictions"][c] += 1
            self.totals["evicted_flows"][c] += len(flows)
        out = {
            "component": component,
            "t_ns": time.monotonic_ns(),
            "flows": len(flows),
            "packets": p,
            "bytes": b,
            # the flows themselves, one record each: [dst address, dst port, proto, packets, frame bytes]
            "records": [[_ip(k[1]), k[3], k[4], v[0], v[1]] for k, v in flows.items()],
        }
        print(json.dumps(out), flush=True)

    def evict(self, early: bool = False) -> None:
        flows: dict[FlowKey, list[int]] = {}
        drained = 0
        for k, per_cpu in drain(self.bpf[b"aggregated_flows"]):
            drained += 1
            key = (int(k.saddr), int(k.daddr), int(k.sport), int(k.dport), int(k.proto))
            acc = flows.setdefault(key, [0, 0])  # a key re-inserted mid-drain comes twice
            acc[0] += sum(int(v.packets) for v in per_cpu)
            acc[1] += sum(int(v.bytes) for v in per_cpu)
        if flows:
            self.win.early += int(early)
            self._export("hashmap", flows, {"hashmap-total": drained, "hashmap-unique": len(flows)})
        if self.accounter:
            direct, self.accounter = self.accounter, {}
            self._export("accounter", direct, {"accounter": len(direct)})
        stats = self.bpf[b"agent_stats"]
        dropped = sum(int(v) for v in stats[stats.Key(1)])
        self.win.dropped = dropped - self._dropped0
        self.totals["dropped"] += dropped - self._dropped_seen
        self._dropped_seen = dropped
        self.full = False

    def run(self, fd: int = 0) -> None:
        next_evict = time.monotonic() + self.timeout
        pending = b""
        while True:
            self.bpf.ring_buffer_poll(50)
            now = time.monotonic()
            if now >= next_evict or self.full:
                self.evict(early=now < next_evict)
                next_evict = now + self.timeout
            if not select.select([fd], [], [], 0)[0]:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:  # the collector went away
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                self.command(line.decode().strip())

    def command(self, cmd: str) -> None:
        if cmd == "start":
            self.evict()  # what came before belongs to no window
            self.win = Window()
            stats = self.bpf[b"agent_stats"]
            self._dropped0 = sum(int(v) for v in stats[stats.Key(1)])
            print(json.dumps({"started": True}), flush=True)  # a scrape from now on is the window's
        elif cmd.startswith("config "):
            cmf, timeout = cmd.split()[1:3]
            self.configure(int(cmf), float(timeout))
            self.win = Window()
            print(json.dumps({"configured": [self.cache_max_flows, self.timeout]}), flush=True)
        elif cmd == "flush":
            self.bpf.ring_buffer_consume()
            self.evict()
            print(json.dumps({"window": self.win.summary()}), flush=True)


PR_SET_NAME = 15


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dev", required=True)
    ap.add_argument("--cache-max-flows", type=int, default=100_000)
    ap.add_argument("--cache-timeout", type=float, default=1.0)
    ap.add_argument("--ringbuf-pages", type=int, default=64)
    ap.add_argument("--metrics-fd", type=int, default=-1, help="a listening socket: serve /metrics on it")
    a = ap.parse_args(argv)
    # Its own name, so the probe's procstat finds it in the worker's cgroup by name: a worker in
    # a pod knows the agent's pid in the pod only, not the node's pid the probe samples.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, AGENT_COMM.encode(), 0, 0, 0)
    agent = FlowAgent(a.dev, a.cache_max_flows, a.cache_timeout, a.ringbuf_pages)
    if a.metrics_fd >= 0:
        from swarmscope.targets.flow_agent.metrics import serve

        serve(agent, a.metrics_fd)
    print(json.dumps({"ready": True}), flush=True)
    try:
        agent.run()
    finally:
        agent.detach()
        agent.bpf.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
