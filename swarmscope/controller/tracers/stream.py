"""The ``stream`` tracer: swarmscope's reference per-event streaming tracer, as a tracer under test.

    tracer = make_tracer({"tracer": "stream", "tracer_stream_collector_rate": 2000})
    tracer.start("w1", [NodeKey("n1", cgroup_id=4711)])  # collector up, agent streaming
    ...                                                  # the exec storm runs
    res = tracer.stop()   # res.per_node["n1"] + res.lost == execs of n1, exactly

Architecture (the one that collapsed in the published Inspektor Gadget test): a node agent
(targets/stream_tracer/agent.py, a subprocess) copies every exec from a BPF ring buffer into
one gRPC message on one client stream to one central :class:`Collector` (a gRPC server on
127.0.0.1 started here). The collector has a processing budget (``collector_rate`` events/s in
total: the single exec pipe); past it, flow control backs up into the agent, the ring buffer
fills and the kernel drops — and counts each drop per cgroup, so nothing is unaccounted.

- **readiness**: start() execs a sentinel (a symlink named ``ss-sync-<tok><k>``) until one
  reaches the collector; sentinels are never counted.
- **drain**: stop() lifts the collector's budget, execs sentinels until one arrives (the ring
  buffer and the stream are FIFO, so everything before it has arrived), then stops the agent,
  which sends the kernel's drop counts as its last message.

**scope** ``nodes`` (default) traces only the window's node cgroups plus this process's own
(where the sentinels run), as the published test's tracer watched only its namespace's pods:
the rest of a shared host neither fills the ring buffer nor spends the collector's budget.
``host`` traces every exec on the machine (a node with only a comm forces it).

``lost`` is the kernel's drop count for the window's nodes (by cgroup id; the BPF program
counts drops per cgroup), so other execs on the host never blur it; when some node has only a
comm, it is the host-wide drop count. The host-wide total is in the warnings when it differs.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent import futures
from pathlib import Path
from typing import Any, cast

import grpc

from swarmscope.controller.fleet_loop import grpc_for_gevent
from swarmscope.controller.tracers.base import (
    NodeKey,
    TracerConfig,
    TracerResult,
    register_tracer,
    tracer_env,
)
from swarmscope.core.config import Config, Field
from swarmscope.core.errors import TracerError
from swarmscope.core.sys import owners
from swarmscope.core.sys.cgroups import cgroup_id, pid_cgroup_path
from swarmscope.core.sys.sentinel import Sentinels, sentinel_number
from swarmscope.v1 import stream_pb2 as pb
from swarmscope.v1 import stream_pb2_grpc as pb_grpc

AGENT_MODULE = "swarmscope.targets.stream_tracer.agent"
# Small fixed HTTP/2 windows (no BDP growth, 8 KiB lookahead): measured here, the defaults let
# ~1,700 events sit in transport buffers; with these ~150 do, so the ring buffer, the queue and
# the collector's budget are the knobs that decide the loss, as their names say.
SERVER_OPTIONS = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 8192)]


class Collector(pb_grpc.EventCollectorServicer):
    """The central collector: counts events by (cgroup id, comm) under a shared rate budget."""

    def __init__(self, rate: float, sentinel_prefix: str):
        self._lock = threading.Lock()
        self._rate = rate
        self._next_t = time.monotonic()
        self.prefix = sentinel_prefix
        self.counts: dict[tuple[int, str], int] = {}
        self.messages = 0  # every message taken off any stream (events, sentinels, finals)
        self.events = 0  # non-sentinel events
        self.sentinels: set[int] = set()
        self.finals: list[pb.AgentFinal] = []
        self.streams_done = 0

    def set_rate(self, rate: float) -> None:
        with self._lock:
            self._rate = rate
            self._next_t = time.monotonic()

    def _pace(self) -> None:
        """Wait for this event's slot of the budget; returns at once when the budget is lifted."""
        with self._lock:
            if self._rate <= 0:
                return
            now = time.monotonic()
            slot = max(self._next_t, now)
            self._next_t = slot + 1.0 / self._rate
        while True:
            with self._lock:
                if self._rate <= 0:
                    return
            left = slot - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.02))  # gevent makes this cooperative in a Locust master

    def Push(self, request_iterator: Iterator[pb.ExecEvent], context: Any) -> pb.PushSummary:
        received = 0
        for msg in request_iterator:
            with self._lock:
                self.messages += 1
            if msg.HasField("final"):
                with self._lock:
                    self.finals.append(msg.final)
                continue
            self._pace()
            received += 1
            with self._lock:
                if (k := sentinel_number(self.prefix, msg.comm)) is not None:
                    self.sentinels.add(k)
                    continue
                self.events += 1
                key = (msg.cgroup_id, msg.comm)
                self.counts[key] = self.counts.get(key, 0) + 1
        with self._lock:
            self.streams_done += 1
        return pb.PushSummary(received=received)

    def seen(self, k: int) -> bool:
        with self._lock:
            return k in self.sentinels

    def any_seen(self) -> bool:
        with self._lock:
            return bool(self.sentinels)


def attribute(counts: Mapping[tuple[int, str], int], nodes: list[NodeKey]) -> tuple[dict[str, int], int]:
    """Per-node counts (by cgroup id, else by comm truncated to 15 bytes) and the rest ("other")."""
    by_cg = {n.cgroup_id: n.name for n in nodes if n.cgroup_id}
    by_comm = {n.comm[:15]: n.name for n in nodes if not n.cgroup_id and n.comm}
    per_node = {n.name: 0 for n in nodes}
    other = 0
    for (cg, comm), c in counts.items():
        name = by_cg.get(cg) or by_comm.get(comm)
        if name is None:
            other += c
        else:
            per_node[name] += c
    return per_node, other


class StreamTracer:
    """Collector + one node agent for one window at a time. See the module docstring."""

    def __init__(
        self,
        *,
        ringbuf_pages: int = 8,
        consume_rate: float = 0.0,
        queue: int = 256,
        collector_rate: float = 0.0,
        ready_timeout_s: float = 60.0,
        drain_timeout_s: float = 10.0,
        sentinel: Path = Path("/bin/true"),
        node: str = "node",
        scope: str = "nodes",
    ):
        if scope not in ("nodes", "host"):
            raise TracerError(f"stream tracer scope must be 'nodes' or 'host', not {scope!r}")
        self.scope = scope
        self.name = "stream"
        self.ringbuf_pages = ringbuf_pages
        self.consume_rate = consume_rate
        self.queue = queue
        self.collector_rate = collector_rate
        self.ready_timeout_s = ready_timeout_s
        self.drain_timeout_s = drain_timeout_s
        self.sentinel = Path(sentinel)
        self.node = node
        self.collector: Collector | None = None
        self._server: grpc.Server | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._nodes: list[NodeKey] = []
        self._sentinels: Sentinels | None = None
        self._stderr: Any = None

    # ------------------------------------------------------------------ sentinel
    def _exec_sentinel(self) -> int:
        assert self._sentinels is not None
        return self._sentinels.exec()

    def _agent_tail(self) -> str:
        if self._stderr is None:
            return "  (no output)"
        self._stderr.flush()
        self._stderr.seek(0)
        lines = self._stderr.read().decode("utf-8", "replace").splitlines()[-15:]
        return "\n".join(f"  | {x}" for x in lines) or "  (no output)"

    # ------------------------------------------------------------------ lifecycle
    def start(self, window_id: str, nodes: list[NodeKey]) -> None:
        if self._proc is not None:
            raise TracerError("tracer stream is already running")
        bad = [n.name for n in nodes if not n.cgroup_id and not n.comm]
        if bad:
            raise TracerError(f"tracer stream cannot attribute events to node(s) {', '.join(bad)}")
        self._nodes = list(nodes)
        grpc_for_gevent()
        self._sentinels = Sentinels(self.sentinel)
        self.collector = Collector(self.collector_rate, self._sentinels.prefix)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=SERVER_OPTIONS)
        pb_grpc.add_EventCollectorServicer_to_server(self.collector, self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        self._stderr = tempfile.TemporaryFile()
        argv = [
            sys.executable,
            "-m",
            AGENT_MODULE,
            "--collector",
            f"127.0.0.1:{port}",
            "--node",
            self.node,
            "--ringbuf-pages",
            str(self.ringbuf_pages),
            "--consume-rate",
            str(self.consume_rate),
            "--queue",
            str(self.queue),
        ]
        if self.scope == "nodes" and all(n.cgroup_id for n in nodes):
            for cg in sorted({int(n.cgroup_id or 0) for n in nodes} | {cgroup_id(pid_cgroup_path())}):
                argv += ["--cgroup", str(cg)]
        env = tracer_env()  # explicit: none of the controller's secrets
        try:
            self._proc = subprocess.Popen(
                owners.dying_with_us(argv, env),  # not orphaned if we are killed
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                text=True,
                start_new_session=True,  # own session: Ctrl-C is swarmscope's to pass on
                env=env,
            )
        except OSError as e:
            self._cleanup()
            raise TracerError(f"cannot start the stream agent: {e}") from e
        try:
            self._wait_ready()
        except BaseException:
            self._kill_agent()
            self._proc = None
            self._cleanup()
            raise

    def _wait_ready(self) -> None:
        assert self._proc is not None and self.collector is not None
        deadline = time.monotonic() + self.ready_timeout_s
        pause = 0.1
        while True:
            if self._proc.poll() is not None:
                raise TracerError(
                    f"the stream agent exited (status {self._proc.returncode}) before it traced:\n"
                    + self._agent_tail()
                )
            self._exec_sentinel()
            end = time.monotonic() + pause
            while time.monotonic() < end and not self.collector.any_seen():
                time.sleep(0.01)
            if self.collector.any_seen():
                return
            if time.monotonic() >= deadline:
                raise TracerError(
                    f"the stream agent delivered no sentinel within {self.ready_timeout_s:g} s:\n"
                    + self._agent_tail()
                )
            pause = min(pause * 1.5, 0.5)

    def _drain(self) -> bool:
        """Lift the budget and exec sentinels until one arrives: all before it has arrived."""
        assert self.collector is not None
        self.collector.set_rate(0)
        deadline = time.monotonic() + self.drain_timeout_s
        while time.monotonic() < deadline:
            k = self._exec_sentinel()  # may itself be dropped while the ring buffer is full
            end = min(deadline, time.monotonic() + 0.5)
            while time.monotonic() < end:
                if self.collector.seen(k):
                    return True
                time.sleep(0.01)
        return False

    def _kill_agent(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=10)

    def _cleanup(self) -> None:
        if self._server is not None:
            self._server.stop(grace=1).wait(5)
            self._server = None
        if self._sentinels is not None:
            self._sentinels.close()
            self._sentinels = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def stop(self) -> TracerResult:
        proc, col = self._proc, self.collector
        if proc is None or col is None:
            raise TracerError("tracer stream is not running")
        warnings: list[str] = []
        error = ""
        summary: dict[str, Any] = {}
        try:
            if proc.poll() is not None:
                error = f"the stream agent exited early (status {proc.returncode}); counts are partial"
                warnings.append(self._agent_tail()[-300:])
            else:
                if not self._drain():
                    warnings.append(
                        f"swarmscope: no drain sentinel arrived within {self.drain_timeout_s:g} s; "
                        "the last events may be missing"
                    )
                proc.send_signal(signal.SIGTERM)
                try:
                    out, _ = proc.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    self._kill_agent()
                    out = ""
                    error = "the stream agent did not stop within 30 s; counts are partial"
                if proc.returncode != 0 and not error:
                    error = f"the stream agent failed (status {proc.returncode}):\n{self._agent_tail()}"
                lines = [x for x in (out or "").splitlines() if x.startswith("{")]
                if lines:
                    with contextlib.suppress(ValueError):
                        summary = json.loads(lines[-1])
        finally:
            self._proc = None
            self._cleanup()
        with col._lock:
            counts = dict(col.counts)
            finals = list(col.finals)
            messages = col.messages
        per_node, other = attribute(counts, self._nodes)
        lost: int | None = None
        if finals:
            total = sum(f.kernel_drops for f in finals)
            by_cg: dict[int, int] = {}
            for f in finals:
                for cg, n in f.drops_by_cgroup.items():
                    by_cg[cg] = by_cg.get(cg, 0) + n
            if all(n.cgroup_id for n in self._nodes):
                lost = sum(by_cg.get(int(n.cgroup_id or 0), 0) for n in self._nodes)
                if total != lost:
                    warnings.append(
                        f"stream: the kernel dropped {total} events in all traced cgroups ({self.scope})"
                    )
            else:
                lost = total
        elif not error:
            error = "the stream agent sent no closing message (kernel drop count unknown)"
        if summary and summary.get("received") not in (None, summary.get("sent")):
            warnings.append(f"stream: agent sent {summary.get('sent')}, collector took {summary['received']}")
        self.last_messages = messages
        return TracerResult(
            per_node=per_node,
            lost=lost,
            unattributed=0,
            lines=messages,
            warnings=warnings,
            error=error,
            other=other,
        )


def _check_pow2(value: Any) -> str | None:
    if isinstance(value, int) and value > 0 and value & (value - 1):
        return "must be a power of two (a BPF ring buffer's size)"
    return None


# The reference streaming tracer (controller/tracers/stream.py). Defaults: chosen so that, on a
# 2-core machine at rate_per_node=150 and 1 s bursts, loss appears past ~11-17 nodes.
FIELDS = [
    Field(
        "tracer_stream_ringbuf_pages",
        int,
        8,
        "stream tracer: BPF ring buffer size in pages (power of two; 8 pages ≈ 680 events)",
        min=1,
        max=65536,
        check=_check_pow2,
    ),
    Field(
        "tracer_stream_consume_rate",
        float,
        0.0,
        "stream tracer: events/s the node agent forwards (0: as fast as it can)",
        min=0,
        max=1e7,
    ),
    Field(
        "tracer_stream_queue",
        int,
        256,
        "stream tracer: events waiting in the agent for the gRPC sender, at most",
        min=1,
        max=1_000_000,
    ),
    Field(
        "tracer_stream_collector_rate",
        float,
        700.0,
        "stream tracer: events/s the central collector processes in total (the single pipe; 0: unlimited)",
        min=0,
        max=1e7,
    ),
    Field(
        "tracer_stream_scope",
        str,
        "nodes",
        "stream tracer: trace only the run's node cgroups (nodes) or every exec on the host (host)",
        choices=("nodes", "host"),
    ),
]


class StreamOptions(Config):
    """The stream tracer's own options, typed."""

    tracer_stream_ringbuf_pages: int
    tracer_stream_consume_rate: float
    tracer_stream_queue: int
    tracer_stream_collector_rate: float
    tracer_stream_scope: str


@register_tracer("stream", FIELDS, StreamOptions)
def stream_tracer(cfg: TracerConfig, sentinel: str | None) -> StreamTracer:
    o = cast(StreamOptions, cfg)  # the scenario's config carries every registered tracer's options
    return StreamTracer(
        ringbuf_pages=int(o.tracer_stream_ringbuf_pages),
        consume_rate=float(o.tracer_stream_consume_rate or 0.0),
        queue=int(o.tracer_stream_queue),
        collector_rate=float(o.tracer_stream_collector_rate or 0.0),
        ready_timeout_s=float(cfg.tracer_ready_timeout_s),
        drain_timeout_s=float(cfg.tracer_drain_timeout_s),
        sentinel=Path(sentinel or "/bin/true"),
        scope=str(o.tracer_stream_scope or "nodes"),
    )
