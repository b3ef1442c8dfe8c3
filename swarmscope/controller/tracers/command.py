"""The ``command`` tracer adapter: run any tracer's command for a window and count its lines.

    t = CommandTracer(["bpftrace", "-B", "line", "-e", PROG], match=r"^(?P<comm>.*) (?P<cgroup>\\d+)$")
    t.start("w1", [NodeKey("n1", cgroup_id=4711)])   # returns once a sentinel exec was printed
    ...                                              # the exec storm runs
    res = t.stop()                                   # per-CPU sentinels drained, then SIGINT

How it knows the tracer is live and has printed everything:

- **readiness**: after starting the command, it execs a *sentinel* (a trivial binary run
  through a symlink named ``ss-sync-<tok><k>``, so comm carries the name; outside the nodes'
  cgroups) again and again until the tracer prints a line naming one.
- **drain**: at stop it execs one sentinel pinned to *each CPU* and waits for all of them.
  This also flushes the per-CPU "lost" records, which the kernel writes only at that CPU's
  next event (docs/platform.md#tracers-and-lost-events); swarmscope.core.sys.sentinel
  makes the execs. Only then is the tracer sent SIGINT (then SIGKILL).
- **drain on every node** (``sentinel_node``: ig-cluster, one stream per node merged): each
  node's probe execs the per-CPU sentinels in its own pod at the window's close (node_drain()
  asks, expect_drained() is told their numbers) and stop() waits for one of each CPU in that
  node's lines; sentinels dropped before a later one of the same CPU leave that node's loss.

Sentinel lines are never counted. **Transport pressure** (issue 4): the tracer writes into a
pipe that this adapter reads line by line; ``read_rate`` caps the lines read per second and
``stall_s`` stops reading for that long once the tracer is ready, so the pipe and then the
tracer's own buffers fill and it drops events, as behind a congested ``kubectl exec`` stream.
Both are lifted at stop so what the tracer did deliver is all read.

Caveats: ``lost`` is host-wide (the tracer's own number). A tracer that buffers its output
(not line-buffered) may hold the sentinel back: the readiness wait then times out; ask the
tracer for line buffering (bpftrace ``-B line``).
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import importlib
import logging
import os
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from swarmscope.controller.tracers.base import (
    DEFAULT_LOST_REGEX,
    NodeKey,
    TracerConfig,
    TracerResult,
    command_argv,
    register_tracer,
    tracer_env,
)
from swarmscope.controller.tracers.parse import LineParser
from swarmscope.core.errors import ConfigError, Problem, TracerError
from swarmscope.core.sys import owners
from swarmscope.core.sys.sentinel import DRAIN_GAPS_S, Sentinels, dropped, online_cpus

log = logging.getLogger(__name__)

DRAIN_ROUNDS = len(DRAIN_GAPS_S) + 1  # of a node's drain, one each DRAIN_GAPS_S apart
F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ exists only from Python 3.10 on some builds
MAX_WARNINGS = 20
TAIL_LINES = 30


def _original(module: str, name: str) -> Any:
    """The unpatched stdlib object, also inside a gevent-patched process (every Locust process).

    The reader must be a real OS thread blocking in read(): a greenlet doing so would freeze
    the gevent hub. The waits in start()/stop() poll with ``time.sleep`` instead, which gevent
    makes cooperative, so a Locust master stays responsive while a tracer starts or drains.
    """
    try:
        from gevent import monkey

        if monkey.is_module_patched(module):
            return monkey.get_original(module, name)
    except ImportError:
        pass
    return getattr(importlib.import_module(module), name)


_real_sleep = _original("time", "sleep")


class CommandTracer:
    """A tracer run as a command for one window at a time. See the module docstring."""

    def __init__(
        self,
        argv: list[str],
        *,
        name: str = "command",
        match: str | None = None,
        json_field: str | None = None,
        lost_regex: str | None = DEFAULT_LOST_REGEX,
        ready_timeout_s: float = 60.0,
        drain_timeout_s: float = 10.0,
        sentinel: Path = Path("/bin/true"),
        read_rate: float | None = None,
        stall_s: float = 0.0,
        pipe_bytes: int | None = None,
        env: Mapping[str, str] | None = None,
        argv_for: Callable[[list[NodeKey], str], list[str]] | None = None,
        sentinel_node: str | None = None,
    ):
        if not argv:
            raise TracerError("the tracer command is empty")
        if not match and not json_field:
            raise TracerError("the tracer needs a match regex or a JSON field to count events")
        self.name = name
        self.argv = list(argv)
        self.match = match
        self.json_field = json_field
        self.lost_regex = lost_regex or None
        self.ready_timeout_s = ready_timeout_s
        self.drain_timeout_s = drain_timeout_s
        self.sentinel = Path(sentinel)
        self.read_rate = read_rate
        self.stall_s = stall_s
        self.pipe_bytes = pipe_bytes
        self.env = dict(env) if env is not None else None
        # argv_for(nodes, sentinel_prefix): the command for one window, built at start() (a
        # preset filters its program to the window's cgroups); ``argv`` when it is None.
        self.argv_for = argv_for
        # A regex whose `node` group names the node a sentinel line came from: set for a tracer
        # that merges streams of nodes it traces apart (ig-cluster), whose drain each node's
        # probe runs (node_drain(), expect_drained()) instead of this process.
        self.sentinel_node = sentinel_node
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = _original("_thread", "allocate_lock")()  # shared by the reader thread
        self._reset()

    # ------------------------------------------------------------------ state
    def _reset(self) -> None:
        self._nodes: list[NodeKey] = []
        self._per_node: dict[str, int] = {}
        self._lost = 0
        self._lost_by_node: dict[str, int] = {}
        self._splits_lost = False
        self._unattributed = 0
        self._other = 0
        self._lines = 0
        self._warnings: list[str] = []
        self._tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._sentinels_seen: set[int] = set()
        self._sentinels: Sentinels | None = None
        self._ready = False
        self._eof = False
        self._pressure_lifted = False  # stop() lifts the stall / rate limit
        self._reader_done = True
        self._window_id = ""
        self._drain_sent: dict[int, list[int]] = {}
        self._node_sentinels: dict[tuple[str, int], float] = {}  # (node, number) -> when seen
        self._drain_asked = 0.0
        # node -> CPU index -> the numbers its probe exec'd on that CPU, round by round
        self._node_drain: dict[str, dict[int, list[int]]] | None = None
        self._node_sentinels_lost = 0
        self._rfd = -1

    def so_far(self) -> int:
        """Events reported for the window's nodes so far (lines the reader has parsed by now)."""
        with self._lock:
            return sum(self._per_node.values())

    def _warn(self, text: str) -> None:
        if text not in self._warnings and len(self._warnings) < MAX_WARNINGS:
            self._warnings.append(text)

    # ------------------------------------------------------------------ sentinel
    def _exec_sentinel(self, cpu: int | None = None) -> int:
        assert self._sentinels is not None
        return self._sentinels.exec(cpu)

    # ------------------------------------------------------------------ reader
    def _read_loop(self, stream: IO[bytes], parser: LineParser) -> None:
        interval = 1.0 / self.read_rate if self.read_rate else 0.0
        next_t = time.monotonic()
        stall_until: float | None = None
        for raw in iter(stream.readline, b""):
            text = raw.decode("utf-8", "replace").rstrip("\r\n")
            res = parser.feed(text)
            with self._lock:
                self._lines += 1
                self._tail.append(text)
                if res.kind == "sentinel":
                    assert res.sentinel is not None
                    self._sentinels_seen.add(res.sentinel)
                    if res.node is not None:
                        self._node_sentinels.setdefault((res.node, res.sentinel), time.monotonic())
                    if not self._ready:
                        self._ready = True
                        if self.stall_s > 0:
                            stall_until = time.monotonic() + self.stall_s
                elif res.kind == "lost":
                    self._lost += res.lost
                    if res.node is not None:
                        self._lost_by_node[res.node] = self._lost_by_node.get(res.node, 0) + res.lost
                    self._warn(text[:300])
                elif res.kind == "event":
                    assert res.node is not None
                    self._per_node[res.node] = self._per_node.get(res.node, 0) + 1
                elif res.kind == "other":
                    self._other += 1
                else:
                    self._unattributed += 1
                    low = text.lower()
                    if "warn" in low or "error" in low or "lost" in low or "drop" in low:
                        self._warn(text[:300])
            # Transport pressure: a stalled or slow reader lets the pipe, then the tracer, fill.
            if stall_until is not None:
                self._pause_until(stall_until)
                stall_until = None
                next_t = time.monotonic()
            if interval and not self._pressure_lifted:
                next_t += interval
                if next_t > time.monotonic():
                    self._pause_until(next_t)
                else:
                    next_t = time.monotonic()
        with self._lock:
            self._eof = True

    def _pause_until(self, t: float) -> None:
        """Reader-thread sleep (real, not a greenlet's) that ends early when stop() lifts it."""
        while not self._pressure_lifted:
            left = t - time.monotonic()
            if left <= 0:
                return
            _real_sleep(min(left, 0.02))

    def _reader_main(self, stream: IO[bytes], parser: LineParser) -> None:
        try:
            self._read_loop(stream, parser)
        except Exception as e:  # a reader bug must not hang stop(): record it
            log.exception("tracer %s: reader failed", self.name)
            with self._lock:
                self._warn(f"swarmscope: reading the tracer failed: {e!r}")
                self._eof = True
        finally:
            stream.close()
            self._reader_done = True

    def _wait(self, pred: Callable[[], bool], timeout: float) -> bool:
        """Poll ``pred`` (under the lock) until true or timeout; cooperative under gevent."""
        end = time.monotonic() + timeout
        while True:
            with self._lock:
                if pred():
                    return True
            if time.monotonic() >= end:
                return False
            time.sleep(0.01)

    # ------------------------------------------------------------------ lifecycle
    def start(self, window_id: str, nodes: list[NodeKey]) -> None:
        if self._proc is not None:
            raise TracerError(f"tracer {self.name} is already running (window {self._window_id})")
        self._reset()
        self._window_id = window_id
        self._nodes = list(nodes)
        self._per_node = {n.name: 0 for n in nodes}
        # A fresh random prefix per window: sentinels of an earlier window or another
        # swarmscope on the host can never be taken for this one's.
        self._sentinels = Sentinels(self.sentinel)
        self._prefix = self._sentinels.prefix
        parser = LineParser(
            nodes,
            match=self.match,
            json_field=self.json_field,
            lost_regex=self.lost_regex,
            sentinel_prefix=self._prefix,
            sentinel_node=self.sentinel_node,
        )
        self._splits_lost = parser.lost is not None and "node" in parser.lost.groupindex
        bad = parser.unattributable(nodes)
        if bad:
            raise TracerError(
                f"tracer {self.name} cannot attribute events to node(s) {', '.join(bad)}: its lines "
                "carry only what those nodes lack (a comm-only tracer needs NodeKey.comm, i.e. the "
                "node's exec storm running its binary under the node's own name)"
            )
        argv = self.argv_for(self._nodes, self._prefix) if self.argv_for else self.argv
        r, w = os.pipe2(os.O_CLOEXEC)
        if self.pipe_bytes:
            with contextlib.suppress(OSError):  # the size is a pressure knob, not a must
                fcntl.fcntl(w, F_SETPIPE_SZ, self.pipe_bytes)
        env = tracer_env(self.env)  # explicit: none of the controller's secrets
        try:
            self._proc = subprocess.Popen(
                # not orphaned if we are killed; stopped by SIGINT even when we were started
                # with it ignored (in the background)
                owners.dying_with_us(argv, env, default_sigint=True),
                stdin=subprocess.DEVNULL,
                stdout=w,
                stderr=w,
                start_new_session=True,  # own process group: SIGINT/SIGKILL reach all its children
                env=env,
            )
        except OSError as e:
            os.close(r)
            self._sentinels.close()
            raise TracerError(f"cannot start tracer {self.name} ({argv[0]}): {e}") from e
        finally:
            os.close(w)  # only the tracer writes: EOF on r once it (and its children) exit
        self._rfd = r
        stream = os.fdopen(r, "rb")
        self._reader_done = False
        _original("_thread", "start_new_thread")(self._reader_main, (stream, parser))
        try:
            self._wait_ready()
        except BaseException:
            self._terminate()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        pause = 0.05
        while True:
            self._exec_sentinel()
            if self._wait(lambda: self._ready or self._eof, pause) and self._ready:
                return
            eof = self._eof
            assert self._proc is not None
            if eof or self._proc.poll() is not None:
                try:
                    code: int | None = self._proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    code = None  # it closed its output but lives on; _terminate() ends it
                raise TracerError(
                    f"tracer {self.name} ended its output (exit status {code}) before it traced anything:\n"
                    + self._tail_text()
                )
            if time.monotonic() >= deadline:
                raise TracerError(
                    f"tracer {self.name} printed no sentinel exec within {self.ready_timeout_s:g} s "
                    f"(not tracing, or buffering its output). Its last lines:\n" + self._tail_text()
                )
            pause = min(pause * 1.5, 0.5)

    def _tail_text(self) -> str:
        with self._lock:
            return "\n".join(f"  | {t}" for t in self._tail) or "  (no output)"

    def _pipe_backlog(self) -> int:
        """Bytes the tracer wrote that the reader has not taken yet (FIONREAD on the pipe)."""
        try:
            buf = fcntl.ioctl(self._rfd, termios.FIONREAD, b"\0\0\0\0")
        except OSError:
            return 0
        return int(struct.unpack("i", buf)[0])

    def _wait_caught_up(self, limit: float) -> None:
        """Wait until the reader has emptied the pipe twice in a row (the tracer's backlog is out).

        Nudging while the tracer's buffers are still full (right after a stall) would only get
        the sentinels dropped too; this keeps that rare. Bounded by ``limit`` seconds.
        """
        end = time.monotonic() + limit
        empty = 0
        while empty < 2 and time.monotonic() < end and not self._eof:
            empty = empty + 1 if self._pipe_backlog() == 0 else 0
            time.sleep(0.05)  # cooperative under gevent

    def _drain(self) -> list[int]:
        """Nudge every CPU with a pinned sentinel until each shows up; return CPUs never seen."""
        deadline = time.monotonic() + self.drain_timeout_s
        self._wait_caught_up(self.drain_timeout_s / 2)
        pending: dict[int, list[int]] = {}
        for cpu in online_cpus():
            try:
                pending[cpu] = [self._exec_sentinel(cpu)]
            except OSError as e:
                self._warn(f"swarmscope: cannot pin a sentinel to CPU {cpu}: {e}")
        self._drain_sent = {cpu: ks for cpu, ks in pending.items()}
        while pending:
            self._wait(
                lambda: self._eof or any(set(ks) & self._sentinels_seen for ks in pending.values()), 0.5
            )
            with self._lock:
                for cpu in [c for c, ks in pending.items() if set(ks) & self._sentinels_seen]:
                    del pending[cpu]
                eof = self._eof
            if not pending or eof or time.monotonic() >= deadline:
                break
            # A sentinel can itself be dropped while the tracer's buffer is still full: retry
            # on the CPUs not yet seen (sentinels_lost() accounts for the dropped ones).
            for cpu, ks in pending.items():
                if len(ks) < 50:
                    ks.append(self._exec_sentinel(cpu))
        return sorted(pending)

    def node_drain(self) -> tuple[str, int, int] | None:
        """(prefix, first number, rounds) of the drain every node's probe runs at window close;
        None when this tracer drains from here. Numbers from the next one this process would
        exec, so a node's drain sentinels are never taken for the readiness ones."""
        if self.sentinel_node is None or self._sentinels is None:
            return None
        self._drain_asked = time.monotonic()
        return self._prefix, self._sentinels.next, DRAIN_ROUNDS

    def expect_drained(self, by_node: Mapping[str, Sequence[int]]) -> None:
        """The drain sentinels each node's probe exec'd (its reading's ``drained``, round by round)."""
        self._node_drain = {}
        for n in (k.name for k in self._nodes):
            ks = list(by_node.get(n, ()))
            cpus = len(ks) // DRAIN_ROUNDS
            self._node_drain[n] = {i: ks[i::cpus] for i in range(cpus)}

    def _node_drained(self, node: str, numbers: list[int]) -> float | None:
        """When the first of ``numbers`` came back in ``node``'s stream (lock held); None: none did."""
        at = [self._node_sentinels[node, k] for k in numbers if (node, k) in self._node_sentinels]
        return min(at) if at else None

    def _wait_nodes_drained(self) -> None:
        """Wait until, on every node, one drain sentinel of each CPU is in that node's stream: it
        follows all that CPU's earlier events and loss records of the node's gadget. Bounded by
        ``drain_timeout_s``; _drain_result() says which were not."""
        want = self._node_drain or {}

        def drained() -> bool:
            return all(
                self._node_drained(n, ks) is not None for n, cpus in want.items() for ks in cpus.values()
            )

        self._wait(lambda: self._eof or drained(), self.drain_timeout_s)

    def _drain_result(self) -> dict[str, dict[str, float]]:
        """Per node (lock held, the output read to its end): its CPUs, those drained (``seen``),
        the drain's sentinels the node's gadget dropped (taken out of its ``lost_by_node``: they
        are no events of the window) and ``s``, from asking for the drain until the node's last
        CPU was drained. A node not drained is warned of."""
        want = self._node_drain or {n.name: {} for n in self._nodes}
        out: dict[str, dict[str, float]] = {}
        for n, cpus in sorted(want.items()):
            at = [self._node_drained(n, ks) for ks in cpus.values()]
            seen = {k for (node, k) in self._node_sentinels if node == n}
            lost = dropped(cpus, seen)
            if lost:
                self._lost_by_node[n] = self._lost_by_node.get(n, 0) - lost
                self._node_sentinels_lost += lost
            c: dict[str, float] = {"cpus": len(cpus), "seen": sum(t is not None for t in at), "dropped": lost}
            if at and all(t is not None for t in at):
                c["s"] = round(max(t for t in at if t is not None) - self._drain_asked, 3)
            out[n] = c
            if not cpus:
                self._warn(
                    f"swarmscope: node {n}: its probe ran no drain sentinels; its last events may be missing"
                )
            elif c["seen"] < c["cpus"]:
                self._warn(
                    f"swarmscope: node {n}: no drain sentinel back from {c['cpus'] - c['seen']} of its "
                    f"{c['cpus']} CPUs within {self.drain_timeout_s:g} s; its last events may be missing"
                )
        return out

    def _sentinels_lost(self) -> int:
        """Drain sentinels the tracer must have dropped (so they are inside its "lost" count).

        A CPU's events come out of its buffer in order, so an unseen sentinel exec'ed on a CPU
        *before* a sentinel that was seen on the same CPU was dropped, not delayed.
        """
        return dropped(self._drain_sent, self._sentinels_seen)

    def _terminate(self) -> int | None:
        proc = self._proc
        if proc is None:
            return None
        self._pressure_lifted = True
        code = proc.poll()
        if code is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
            try:
                code = proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                code = proc.wait(timeout=10)
                self._warn(f"swarmscope: tracer {self.name} ignored SIGINT for 10 s; killed")
        # Children left in the group (e.g. under unshare) hold the pipe open: end them too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if not self._wait(lambda: self._reader_done, 10):
            self._warn("swarmscope: the tracer's output did not reach end-of-file within 10 s")
        self._proc = None
        if self._sentinels is not None:
            self._sentinels.close()
        return code

    def stop(self) -> TracerResult:
        if self._proc is None:
            raise TracerError(f"tracer {self.name} is not running")
        error = ""
        self._pressure_lifted = True  # lift the stall / rate limit: read all the tracer delivered
        exited = self._proc.poll()
        drained = None
        if exited is not None:
            error = f"tracer {self.name} exited early (status {exited}); counts are partial"
        elif self.sentinel_node is not None:
            self._wait_nodes_drained()
        else:
            unseen = self._drain()
            if unseen:
                self._warn(
                    f"swarmscope: drain sentinels on CPU {unseen} not seen within "
                    f"{self.drain_timeout_s:g} s; the last events may be missing"
                )
        self._terminate()
        with self._lock:
            if self.sentinel_node is not None and exited is None:
                drained = self._drain_result()
            return TracerResult(
                per_node=dict(self._per_node),
                lost=self._lost if self.lost_regex else None,
                unattributed=self._unattributed,
                lines=self._lines,
                warnings=list(self._warnings),
                error=error,
                other=self._other,
                sentinels_lost=self._sentinels_lost() + self._node_sentinels_lost,
                lost_by_node=dict(self._lost_by_node) if self._splits_lost else None,
                drained=drained,
            )


def build_command(cfg: TracerConfig, sentinel: str | None, **preset: Any) -> CommandTracer:
    """A CommandTracer from the flat scenario keys; ``preset`` supplies what the keys leave null."""
    # Popped whatever wins: a preset's argv left in ``preset`` would be passed twice below.
    preset_argv = preset.pop("argv", None)
    cmd = cfg.tracer_command or preset_argv
    if not cmd:
        raise ConfigError([Problem("config", "tracer_command", "is required for this tracer")])
    match = cfg.tracer_match or None
    json_field = cfg.tracer_json_field or None
    if not match and not json_field:
        match, json_field = preset.pop("match", None), preset.pop("json_field", None)
    else:
        preset.pop("match", None)
        preset.pop("json_field", None)
    return CommandTracer(
        command_argv(cmd),
        name=preset.pop("name", "command"),
        match=match,
        json_field=json_field,
        lost_regex=cfg.tracer_lost_regex,
        ready_timeout_s=float(cfg.tracer_ready_timeout_s),
        drain_timeout_s=float(cfg.tracer_drain_timeout_s),
        sentinel=Path(sentinel or preset.pop("sentinel", "/bin/true")),
        read_rate=cfg.tracer_read_rate,
        stall_s=float(cfg.tracer_stall_s or 0.0),
        pipe_bytes=cfg.tracer_pipe_bytes,
        **preset,
    )


@register_tracer("command")
def _command_factory(cfg: TracerConfig, sentinel: str | None) -> CommandTracer:
    return build_command(cfg, sentinel)
