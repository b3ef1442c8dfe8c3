"""The exec storm, worker side: run ``execstorm`` in a node and return exactly what it generated.

    tools = ensure_built()
    node = create_sim_nodes("g1", ["n1"], pids_max=256)[0]
    r = run_burst(tools, node, duration_s=1.0, concurrency=2, max_execs=100_000)
    r.execs, r.rate          # execs that really happened (children that exited 0), per second

    h = start_burst(tools, node, 10.0, 2, 100_000)   # stoppable
    h.stop(); r = h.wait()                            # early stop: counts are still exact

Safe inside a gevent-monkey-patched process (every Locust process): it only uses
``subprocess`` (gevent makes ``communicate``/``wait`` cooperative), so the hub is never
blocked while a burst runs. Bounds are enforced before anything starts (duration <= 60 s,
concurrency <= 64, max_execs <= 1,000,000, and the node's pids limit must fit the storm's
tasks); out-of-range values raise :class:`LoadGenError`.

Caveat: ``execs`` counts the children that exited 0, which is every exec the kernel saw in the
node's cgroup unless a child is killed after its exec (nothing here does that).
"""

from __future__ import annotations

import json
import signal
import subprocess
from dataclasses import dataclass

from swarmscope.core.errors import LoadGenError
from swarmscope.workers.native import NativeTools
from swarmscope.workers.nodes import SimNode

MAX_DURATION_S = 60.0
MAX_CONCURRENCY = 64
MAX_EXECS = 1_000_000
# Past the duration, how long execstorm gets to reap its children and print before we kill it.
GRACE_S = 10.0


@dataclass(frozen=True)
class BurstResult:
    node: str
    execs: int
    failed: int
    elapsed_s: float
    rate: float  # execs per second of elapsed time


def pids_needed(concurrency: int) -> int:
    """Tasks one storm holds at most: main thread + one spawner thread and one child each."""
    return 2 * concurrency + 1


def check_bounds(node: SimNode, duration_s: float, concurrency: int, max_execs: int) -> None:
    """Raise LoadGenError listing every out-of-range parameter (all at once)."""
    bad = []
    if not 0 < duration_s <= MAX_DURATION_S:
        bad.append(f"duration_s={duration_s} (must be > 0 and <= {MAX_DURATION_S:g})")
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        bad.append(f"concurrency={concurrency} (must be 1..{MAX_CONCURRENCY})")
    if not 1 <= max_execs <= MAX_EXECS:
        bad.append(f"max_execs={max_execs} (must be 1..{MAX_EXECS})")
    if node.pids_max is not None and 1 <= concurrency and pids_needed(concurrency) > node.pids_max:
        bad.append(
            f"concurrency={concurrency} needs {pids_needed(concurrency)} tasks but node {node.name} "
            f"allows pids.max={node.pids_max}"
        )
    if bad:
        raise LoadGenError("exec storm out of bounds: " + "; ".join(bad))


class BurstHandle:
    """A running burst. ``stop()`` ends it early (SIGTERM); ``wait()`` returns its exact counts."""

    def __init__(self, node: SimNode, proc: subprocess.Popen[str], duration_s: float):
        self.node = node
        self.proc = proc
        self.duration_s = duration_s
        self._result: BurstResult | None = None
        self._stopped = False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self._stopped = True
            self.proc.send_signal(signal.SIGTERM)

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout_s: float | None = None) -> BurstResult:
        """Wait for the end (default: duration + grace), parse the one JSON line, return counts."""
        if self._result is not None:
            return self._result
        limit = self.duration_s + GRACE_S if timeout_s is None else timeout_s
        try:
            out, err = self.proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired as e:
            self.proc.kill()
            self.proc.communicate()
            raise LoadGenError(
                f"exec storm on node {self.node.name} did not finish within {limit:g} s"
            ) from e
        lines = [ln for ln in out.splitlines() if ln.strip()]
        if not lines and self._stopped and self.proc.returncode == -signal.SIGTERM:
            # Stopped while still starting (before execstorm blocked SIGTERM, i.e. before it
            # could spawn anything): exactly nothing was generated.
            self._result = BurstResult(node=self.node.name, execs=0, failed=0, elapsed_s=0.0, rate=0.0)
            return self._result
        try:
            d = json.loads(lines[-1])
            execs, failed, elapsed_ns = int(d["execs"]), int(d["failed"]), int(d["elapsed_ns"])
        except (IndexError, ValueError, KeyError, TypeError) as e:
            raise LoadGenError(
                f"exec storm on node {self.node.name} failed (exit {self.proc.returncode}): "
                f"{err.strip() or 'no result line'}"
            ) from e
        if self.proc.returncode != 0:
            raise LoadGenError(
                f"exec storm on node {self.node.name} failed (exit {self.proc.returncode}) after "
                f"{execs} execs: {err.strip()}"
            )
        elapsed_s = elapsed_ns / 1e9
        self._result = BurstResult(
            node=self.node.name,
            execs=execs,
            failed=failed,
            elapsed_s=elapsed_s,
            rate=execs / elapsed_s if elapsed_s > 0 else 0.0,
        )
        return self._result


def start_burst(
    tools: NativeTools,
    node: SimNode,
    duration_s: float = 1.0,
    concurrency: int = 1,
    max_execs: int = MAX_EXECS,
    argv0: str | None = None,
    rate: float = 0.0,
) -> BurstHandle:
    """Start a burst in ``node`` and return at once (the burst runs in its own process).

    ``rate`` paces the burst at that many execs per second (0: as fast as it can)."""
    check_bounds(node, duration_s, concurrency, max_execs)
    if not 0 <= rate <= 1e7:
        raise LoadGenError(f"rate={rate} (must be 0..1e7 execs/s)")
    cmd = [
        str(tools.execstorm),
        "--binary",
        str(tools.tiny),
        "--duration-s",
        repr(float(duration_s)),
        "--concurrency",
        str(concurrency),
        "--max-execs",
        str(max_execs),
    ]
    if argv0:
        cmd += ["--argv0", argv0]
    if rate:
        cmd += ["--rate", repr(float(rate))]
    if node.cgroup_path is not None:
        cmd += ["--cgroup", str(node.cgroup_path)]
    if node.pids_path is not None:
        cmd += ["--pids-cgroup", str(node.pids_path)]
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # Its own session: a Ctrl-C meant for the worker does not cut the storm's counts short
            # behind our back (we stop it with SIGTERM and still read them).
            start_new_session=True,
            # A minimal environment: every exec copies it onto the new stack, and a pod's
            # environment can hold hundreds of service variables.
            env={"LC_ALL": "C"},
        )
    except OSError as e:
        raise LoadGenError(f"cannot start {tools.execstorm}: {e}") from e
    return BurstHandle(node, proc, float(duration_s))


def run_burst(
    tools: NativeTools,
    node: SimNode,
    duration_s: float = 1.0,
    concurrency: int = 1,
    max_execs: int = MAX_EXECS,
    argv0: str | None = None,
    rate: float = 0.0,
) -> BurstResult:
    """Run one burst to its end (duration or max_execs) and return the exact counts."""
    h = start_burst(tools, node, duration_s, concurrency, max_execs, argv0, rate)
    try:
        return h.wait()
    except BaseException:
        h.stop()
        raise
