"""The one sentinel-exec helper: numbered, recognisable execs that tell a tracer's output is live.

    from swarmscope.core.sys.sentinel import Sentinels, online_cpus
    with Sentinels("/bin/true") as s:             # s.prefix == "ss-sync-3fa" (fresh per window)
        k = s.exec()                              # runs /bin/true as comm "ss-sync-3fa0"
        sent = {cpu: [s.exec(cpu)] for cpu in online_cpus()}   # one pinned to each CPU
        s.number("ss-sync-3fa0")                  # -> 0; None for anything else

A tracer under test sees a sentinel like any exec; its comm is the symlink's name, so a line
naming ``<prefix><k>`` proves every event before exec k on that CPU has come out (readiness:
the first one seen; drain: one seen per CPU). Per-CPU pinning matters because a BPF
perf buffer is per CPU and the kernel writes a CPU's "lost" record only at that CPU's next
event (docs/platform.md#tracers-and-lost-events). The prefix is random per window so sentinels
of an earlier window, or of another swarmscope on the host, are never taken for this one's.

Caveats: sentinels run in the caller's cgroup, never a node's, so they are not counted as node
events. ``exec(cpu)`` pins the *calling thread* for the spawn (the child inherits it) and
restores it; an offline or disallowed CPU raises OSError. Comm is cut at 15 bytes by the
kernel: the prefix (11) leaves room for 4 digits, plenty for one window.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
import threading
from collections.abc import Container, Iterable, Mapping
from pathlib import Path
from types import TracebackType

from swarmscope.core.errors import TracerError

PREFIX = "ss-sync-"  # what tracer filters match on (e.g. bpftrace strncmp(comm, "ss-sync-", 8))


def new_prefix() -> str:
    """A fresh per-window prefix: ``ss-sync-`` and three random hex digits."""
    return f"{PREFIX}{secrets.token_hex(2)[:3]}"


def sentinel_number(prefix: str, comm: str) -> int | None:
    """The sentinel number in ``comm`` for window ``prefix``; None when it is no such sentinel."""
    rest = comm[len(prefix) :] if comm.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None


def online_cpus() -> list[int]:
    """CPUs this process may run on (the ones whose buffers a drain must reach)."""
    return sorted(os.sched_getaffinity(0))


class Sentinels:
    """Numbered sentinel execs of ``binary`` for one window; ``close()`` removes the symlinks."""

    def __init__(
        self, binary: str | os.PathLike[str] = "/bin/true", prefix: str | None = None, first: int = 0
    ):
        self.binary = Path(binary)
        self.prefix = prefix or new_prefix()
        self._dir: Path | None = Path(tempfile.mkdtemp(prefix="swarmscope-sentinel-"))
        self._next = first

    @property
    def next(self) -> int:
        """The number the next exec will get."""
        return self._next

    def __enter__(self) -> Sentinels:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def number(self, comm: str) -> int | None:
        """The sentinel number in ``comm``, None when it is not one of this window's."""
        return sentinel_number(self.prefix, comm)

    def _path(self, k: int) -> Path:
        if self._dir is None:
            raise TracerError("sentinel exec after close()")
        p = self._dir / f"{self.prefix}{k}"
        if not p.is_symlink():
            # A symlink, not a copy: comm is the name the binary was exec'd by.
            p.symlink_to(self.binary.resolve())
        return p

    def exec(self, cpu: int | None = None) -> int:
        """Exec the next sentinel (pinned to ``cpu`` when given), wait for it, return its number."""
        k = self._next
        self._next += 1
        path = self._path(k)
        saved = None
        if cpu is not None:
            # posix_spawn children inherit the calling thread's affinity: pin it for the spawn.
            saved = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {cpu})
        try:
            pid = os.posix_spawn(str(path), [path.name], {})
        except OSError as e:
            raise TracerError(f"cannot exec the sentinel {self.binary}: {e}") from e
        finally:
            if saved is not None:
                os.sched_setaffinity(0, saved)
        os.waitpid(pid, 0)
        return k

    def close(self) -> None:
        if self._dir is None:
            return
        d, self._dir = self._dir, None
        for p in d.iterdir():
            p.unlink()
        d.rmdir()


# A node's drain (run by its probe): one round now, then rounds this long after the one before.
DRAIN_GAPS_S = (0.5, 0.5, 1.0, 2.0, 4.0, 8.0)
MAX_NUMBER = 9999  # comm keeps 15 bytes: the prefix (11) and 4 digits


def drain(
    prefix: str, first: int, rounds: int, stop: threading.Event, binary: str | os.PathLike[str] = "/bin/true"
) -> list[int]:
    """A node's drain for a tracer that streams each node apart: ``rounds`` rounds of one sentinel
    pinned to each CPU, numbered from ``first`` round by round; a later round reaches a CPU whose
    earlier sentinel the tracer dropped. Round 0 runs now, the others in a thread, DRAIN_GAPS_S
    apart, until ``stop`` is set. Returns every round's numbers; raises TracerError when
    they would not fit in comm."""
    cpus = online_cpus()
    rounds = max(1, min(rounds, len(DRAIN_GAPS_S) + 1))
    if first + rounds * len(cpus) - 1 > MAX_NUMBER:
        raise TracerError(f"{rounds} rounds of {len(cpus)} drain sentinels from {first} do not fit in comm")
    s = Sentinels(binary, prefix, first)

    def one_round() -> None:
        for cpu in cpus:  # a CPU that refuses the pin keeps its number, unseen
            with contextlib.suppress(OSError, TracerError):
                s.exec(cpu)

    def later() -> None:
        try:
            for gap in DRAIN_GAPS_S[: rounds - 1]:
                if stop.wait(gap):
                    return
                one_round()
        finally:
            s.close()

    try:
        one_round()
    except BaseException:
        s.close()
        raise
    threading.Thread(target=later, name="drain-rounds", daemon=True).start()
    return list(range(first, first + rounds * len(cpus)))


def dropped(sent_by_cpu: Mapping[int, Iterable[int]], seen: Container[int]) -> int:
    """Sentinels the tracer must have dropped (they are inside its own "lost" count).

    A CPU's events leave its buffer in order, so an unseen sentinel exec'd on a CPU *before* a
    sentinel seen on the same CPU was dropped, not delayed.
    """
    lost = 0
    for ks in sent_by_cpu.values():
        ks = list(ks)
        last_seen = max((k for k in ks if k in seen), default=None)
        if last_seen is not None:
            lost += sum(1 for k in ks if k < last_seen and k not in seen)
    return lost
