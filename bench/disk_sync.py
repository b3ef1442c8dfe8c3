"""Bench helper: what one durable 4 KiB write costs on this disk, by sync method, side by side.

    .venv/bin/python bench/disk_sync.py [--dir /var/tmp] [--writes 200]
    from bench.disk_sync import sync_costs; sync_costs("/var/tmp", writes=100)

The neighbor control plane's write is bound by one sync per commit (docs/neighbors.md). This
measures the candidates in one run, interleaved round by round so a load change hits all alike,
each as the median µs of ``writes`` 4 KiB writes at consecutive offsets:

- ``append+fsync``: the file grows at each write (size and mtime change: a journal commit);
- ``append+fdatasync``: the same, fdatasync (the size change still commits the journal);
- ``prealloc+fsync``: overwrites of a file written once beforehand (fsync still writes the
  inode for the mtime change);
- ``prealloc+fdatasync``: the same overwrites, fdatasync: data and the device's cache flush only
  (what SQLite does in WAL mode: its WAL is preallocated by ``Store._warm_wal``);
- ``prealloc+O_DSYNC``: the same overwrites, a ``pwrite`` on an ``O_DSYNC`` file (one syscall);
- ``fallocate+fdatasync``: space reserved with fallocate but never written (unwritten extents:
  the first write of each converts it, a metadata change);
- ``prealloc+fdatasync after idle``: the prealloc+fdatasync write after 20 ms of sleep, as a
  lone small put meets the disk (the other cases run back to back).

Caveat: a shared disk's flush time moves with everyone else's writes; compare the rows of one
run, not runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable

BLOCK = 4096


def _case(path: str, flags: int, prep: str, sync: Callable[[int], None] | None) -> Callable[[], float]:
    """A closure that does one timed durable write (µs) into its own file at the next offset."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | flags, 0o600)
    state = {"off": 0}
    buf = os.urandom(BLOCK)

    def prepare(size: int) -> None:
        if prep == "write":  # really written and synced: later overwrites change no metadata
            for off in range(0, size, 1 << 20):
                os.pwrite(fd, bytes(min(1 << 20, size - off)), off)
            os.fsync(fd)
        elif prep == "fallocate":
            os.posix_fallocate(fd, 0, size)
            os.fsync(fd)

    def one() -> float:
        off = state["off"]
        state["off"] = off + BLOCK
        t0 = time.perf_counter_ns()
        os.pwrite(fd, buf, off)
        if sync is not None:
            sync(fd)
        return (time.perf_counter_ns() - t0) / 1000

    one.prepare = prepare  # type: ignore[attr-defined]
    one.fd = fd  # type: ignore[attr-defined]
    return one


CASES: dict[str, tuple[int, str, Callable[[int], None] | None]] = {
    "append+fsync": (0, "", os.fsync),
    "append+fdatasync": (0, "", os.fdatasync),
    "prealloc+fsync": (0, "write", os.fsync),
    "prealloc+fdatasync": (0, "write", os.fdatasync),
    "prealloc+O_DSYNC": (os.O_DSYNC, "write", None),
    "fallocate+fdatasync": (0, "fallocate", os.fdatasync),
}
IDLE = "prealloc+fdatasync after idle"


def sync_costs(
    directory: str | None = None, writes: int = 100, rounds: int = 5, idle_s: float = 0.02
) -> dict[str, float]:
    """Median µs per durable 4 KiB write, per case (see the module doc), interleaved in rounds,
    plus ``prealloc+fdatasync after idle``: the same write after ``idle_s`` of sleep, as a lone
    small put meets the disk (on the 2-core VM it cost several times the back-to-back one)."""
    d = tempfile.mkdtemp(prefix="ss-sync-", dir=directory)
    per = max(1, writes // rounds)
    fns = {name: _case(os.path.join(d, name.replace("+", "_")), *spec) for name, spec in CASES.items()}
    idle = _case(os.path.join(d, "idle"), 0, "write", os.fdatasync)
    fns_all = {**fns, IDLE: idle}
    times: dict[str, list[float]] = {name: [] for name in fns_all}
    try:
        for fn in fns_all.values():
            fn.prepare(per * rounds * BLOCK)  # type: ignore[attr-defined]
        for _ in range(rounds):
            for name, fn in fns.items():
                times[name] += [fn() for _ in range(per)]
            for _ in range(max(1, per // 4)):  # fewer: each costs idle_s of sleep
                time.sleep(idle_s)
                times[IDLE].append(idle())
    finally:
        for name, fn in fns_all.items():
            os.close(fn.fd)  # type: ignore[attr-defined]
            os.unlink(os.path.join(d, "idle" if fn is idle else name.replace("+", "_")))
        os.rmdir(d)
    return {name: round(statistics.median(t), 1) for name, t in times.items()}


def format_costs(costs: dict[str, float]) -> str:
    return "durable 4 KiB write on this disk (median µs): " + ", ".join(
        f"{k} {v:g}" for k, v in costs.items()
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None, help="a directory on the disk to measure (default: $TMPDIR)")
    ap.add_argument("--writes", type=int, default=200)
    ns = ap.parse_args(argv)
    print(format_costs(sync_costs(ns.dir, ns.writes)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
