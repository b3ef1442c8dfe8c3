"""Node agent of the reference streaming tracer: BPF ring buffer -> one gRPC message per exec.

    python -m swarmscope.targets.stream_tracer.agent --collector 127.0.0.1:7000 \\
        --node n1 --ringbuf-pages 8 --consume-rate 0 --queue 1024 [--cgroup ID ...]

Loads ``bpf/exec_stream.bpf.c`` (every exec reserved in a ring buffer of ``--ringbuf-pages``
pages, drops counted by the kernel), polls the ring buffer and forwards each event as one
``ExecEvent`` on a single client-streaming ``EventCollector.Push`` call, like the per-event
exec pipe of the published scaling test. Knobs: ring buffer size, ``--consume-rate`` (events/s
the agent forwards, 0 = as fast as it can) and ``--queue`` (events waiting for the sender).

Backpressure is real and end to end: a slow collector stops reading its stream, HTTP/2 flow
control (small fixed windows: BDP probing off) blocks the sender, the queue fills, the ring
buffer callback blocks on the full queue so the agent stops draining the ring buffer, and the
kernel drops (and counts) what does not fit. ``--cgroup`` (repeatable) limits tracing to those
cgroup v2 ids, like a tracer told to watch one namespace; without it, the whole host.

On SIGTERM/SIGINT it stops polling, sends one closing message with the kernel's drop counts
and prints the collector's summary as JSON. It prints ``ready`` on stdout once the program is
loaded and the stream is open.

Caveats: needs root (BPF). It never loses an event in user space: only the kernel drops. What
is still in the ring buffer when it is stopped is not forwarded (the adapter drains first).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import queue
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc

from swarmscope.core.errors import SwarmscopeError
from swarmscope.probes.bcc_env import load_program, percpu_sum
from swarmscope.v1 import stream_pb2 as pb
from swarmscope.v1 import stream_pb2_grpc as pb_grpc

# Small HTTP/2 windows: the bottleneck must be the collector's reading, not megabytes of
# transport buffer that BDP probing would grow between the two.
CHANNEL_OPTIONS = [("grpc.http2.bdp_probe", 0)]


class RawEvent(ctypes.Structure):
    """Mirror of ``struct ss_exec_event`` in bpf/exec_stream.bpf.c."""

    _fields_ = [  # noqa: RUF012 (ctypes reads this class attribute)
        ("ts_ns", ctypes.c_uint64),
        ("cgroup_id", ctypes.c_uint64),
        ("pid", ctypes.c_uint32),
        ("tgid", ctypes.c_uint32),
        ("comm", ctypes.c_char * 16),
    ]


_END = object()


class Agent:
    def __init__(
        self,
        collector: str,
        node: str,
        ringbuf_pages: int,
        consume_rate: float,
        queue_bound: int,
        cgroups: list[int] | None = None,
    ):
        if ringbuf_pages < 1 or ringbuf_pages & (ringbuf_pages - 1):
            raise SwarmscopeError(f"--ringbuf-pages must be a power of two, not {ringbuf_pages}")
        self.collector = collector
        self.node = node
        self.pages = ringbuf_pages
        self.cgroups = list(cgroups or [])
        self.interval = 1.0 / consume_rate if consume_rate > 0 else 0.0
        self.q: queue.Queue[Any] = queue.Queue(maxsize=max(1, queue_bound))
        self.stopping = threading.Event()
        self.sent = 0
        self._next_t = time.monotonic()
        self._summary: pb.PushSummary | None = None
        self._error: BaseException | None = None

    def _on_event(self, _ctx: Any, data: Any, _size: int) -> int:
        raw = ctypes.cast(data, ctypes.POINTER(RawEvent)).contents
        if self.interval:  # the agent's own consume rate: a slow node agent
            self._next_t += self.interval
            now = time.monotonic()
            if self._next_t > now:
                time.sleep(self._next_t - now)
            else:
                self._next_t = now
        msg = pb.ExecEvent(
            ts_ns=raw.ts_ns,
            cgroup_id=raw.cgroup_id,
            pid=raw.pid,
            tgid=raw.tgid,
            comm=raw.comm.decode("utf-8", "replace"),
            node=self.node,
        )
        # Blocks while the sender is held back by flow control: the ring buffer then fills.
        while True:
            try:
                self.q.put(msg, timeout=0.2)
                return 0
            except queue.Full:
                if self._error is not None:  # the stream is gone: the run fails anyway
                    return 0

    def _requests(self) -> Iterator[pb.ExecEvent]:
        while True:
            item = self.q.get()
            if item is _END:
                return
            if isinstance(item, pb.ExecEvent) and item.HasField("final"):
                yield item
                return
            self.sent += 1
            yield item

    def _send_main(self, stub: pb_grpc.EventCollectorStub) -> None:
        try:
            self._summary = stub.Push(self._requests())
        except grpc.RpcError as e:
            self._error = e
            self.stopping.set()

    def run(self) -> dict[str, Any]:
        cflags = [f"-DSS_RINGBUF_PAGES={self.pages}", f"-DSS_FILTER_CGROUP={int(bool(self.cgroups))}"]
        bpf = load_program("exec_stream", cflags=cflags)
        watch = bpf["watch"]
        for cg in self.cgroups:
            watch[watch.Key(cg)] = watch.Leaf(1)
        bpf["events"].open_ring_buffer(self._on_event)
        channel = grpc.insecure_channel(self.collector, options=CHANNEL_OPTIONS)
        stub = pb_grpc.EventCollectorStub(channel)
        sender = threading.Thread(target=self._send_main, args=(stub,), daemon=True)
        sender.start()
        print("ready", flush=True)
        while not self.stopping.is_set():
            bpf.ring_buffer_poll(100)
        drops = percpu_sum(bpf["drops_by_cgroup"])
        total = sum(int(v) for v in bpf["drops_total"][0])
        final = pb.ExecEvent(final=pb.AgentFinal(kernel_drops=total, drops_by_cgroup=drops, sent=self.sent))
        if self._error is None:
            self.q.put(final)
        sender.join(timeout=30)
        channel.close()
        if self._error is not None:
            raise SwarmscopeError(f"streaming to the collector {self.collector} failed: {self._error}")
        received = self._summary.received if self._summary is not None else None
        return {
            "sent": self.sent,
            "received": received,
            "kernel_drops": total,
            "drops_by_cgroup": {str(k): v for k, v in drops.items()},
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--collector", required=True, help="HOST:PORT of the collector")
    ap.add_argument("--node", default="node", help="this node's name (carried in every event)")
    ap.add_argument("--ringbuf-pages", type=int, default=16, help="ring buffer size, pages (power of 2)")
    ap.add_argument("--consume-rate", type=float, default=0.0, help="events/s forwarded (0: unlimited)")
    ap.add_argument("--queue", type=int, default=1024, help="events waiting for the sender, at most")
    ap.add_argument(
        "--cgroup", type=int, action="append", default=[], help="trace only this cgroup v2 id (repeatable)"
    )
    ns = ap.parse_args(argv)
    try:
        agent = Agent(ns.collector, ns.node, ns.ringbuf_pages, ns.consume_rate, ns.queue, ns.cgroup)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: agent.stopping.set())
        out = agent.run()
    except SwarmscopeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
