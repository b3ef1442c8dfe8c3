"""A minimal process sampler (pidstat's job): CPU % usr/sys/guest, faults/s, VSZ, RSS, %MEM.

    s = ProcSampler(pids=lambda: target.lb_pids(), interval_s=1.0)   # or names=["nginx"]
    s.start()
    ...
    samples = s.stop()      # [{"t": wall, "dt": 1.0, "pid": 123, "name": "nginx", "usr_pct": 3.0, ...}]
    ProcSampler.totals(samples)  # per-timestamp sums over the sampled processes

Every interval it reads /proc/<pid>/stat (utime, stime, minflt, majflt) and statm (RSS) and
reports rates over the interval, like ``pidstat -u -r 1`` (VSZ from statm, guest time from
stat, %MEM as RSS over the machine's memory; ``usr_pct`` includes guest time, as utime does).
The PID set is re-evaluated each tick (a callable), so a restarted process is picked up. A
process seen for the first time produces its first rate one interval later (a rate needs two
readings), as pidstat does.

Caveats: percentages are of one core (200 % = two cores busy). Runs in a thread; under gevent
(Locust) the thread is a greenlet, which is fine since it only sleeps and reads files.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_MEM_TOTAL = _PAGE * os.sysconf("SC_PHYS_PAGES")  # pidstat's %MEM: RSS over MemTotal


def read_stat(pid: int) -> tuple[str, float, float, int, int, int] | None:
    """(comm, utime_s, stime_s, minflt, majflt, rss_bytes) of ``pid``, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            raw = fh.read()
        with open(f"/proc/{pid}/statm", encoding="ascii") as fh:
            rss_pages = int(fh.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    # comm may contain spaces and parentheses: split on the last ')'.
    lpar, rpar = raw.index("("), raw.rindex(")")
    comm = raw[lpar + 1 : rpar]
    f = raw[rpar + 2 :].split()
    # After ')' field 3 is index 0: minflt=10 majflt=12 utime=14 stime=15 (1-based in proc(5)).
    minflt, majflt = int(f[7]), int(f[9])
    utime, stime = int(f[11]) / _TICK, int(f[12]) / _TICK
    return comm, utime, stime, minflt, majflt, rss_pages * _PAGE


def read_vsz_guest(pid: int) -> tuple[int, float] | None:
    """(vsz_bytes, guest_s) of ``pid`` (pidstat's VSZ and %guest inputs), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/statm", encoding="ascii") as fh:
            vsz_pages = int(fh.read().split()[0])
        return vsz_pages * _PAGE, int(f[40]) / _TICK  # guest_time is field 43 in proc(5)
    except (OSError, IndexError, ValueError):
        return None


def pids_by_name(names: Iterable[str]) -> list[int]:
    wanted = set(names)
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/comm", encoding="ascii", errors="replace") as fh:
                    if fh.read().strip() in wanted:
                        out.append(int(d))
            except OSError:
                continue
    return out


class ProcSampler:
    """Samples a set of processes every ``interval_s`` into a list of per-process rows."""

    def __init__(
        self,
        pids: Callable[[], Iterable[int]] | Iterable[int] | None = None,
        names: Iterable[str] | None = None,
        interval_s: float = 1.0,
    ):
        if pids is None and names is None:
            raise ValueError("give pids or names")
        self._pids = pids
        self._names = list(names or [])
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._samples: list[dict[str, Any]] = []
        self._guest: dict[int, float] = {}  # pid -> guest seconds at its last tick

    def _current_pids(self) -> list[int]:
        out: list[int] = []
        if callable(self._pids):
            out += list(self._pids())
        elif self._pids is not None:
            out += list(self._pids)
        if self._names:
            out += pids_by_name(self._names)
        return sorted(set(out))

    def sample_once(self, prev: dict[int, tuple[float, tuple[str, float, float, int, int, int]]]) -> None:
        now_m, now_w = time.monotonic(), time.time()
        seen: dict[int, tuple[float, tuple[str, float, float, int, int, int]]] = {}
        for pid in self._current_pids():
            st = read_stat(pid)
            if st is None:
                continue
            seen[pid] = (now_m, st)
            if pid in prev:
                t0, (_, u0, s0, mi0, ma0, _) = prev[pid]
                dt = max(now_m - t0, 1e-6)
                comm, u, s, mi, ma, rss = st
                vg = read_vsz_guest(pid) or (0, self._guest.get(pid, 0.0))
                self._samples.append(
                    {
                        "t": now_w,
                        "dt": dt,  # the interval the rates are over (the tick began at t - dt)
                        "pid": pid,
                        "name": comm,
                        "usr_pct": 100.0 * (u - u0) / dt,
                        "sys_pct": 100.0 * (s - s0) / dt,
                        "cpu_pct": 100.0 * ((u - u0) + (s - s0)) / dt,
                        "minflt_s": (mi - mi0) / dt,
                        "majflt_s": (ma - ma0) / dt,
                        "rss_kib": rss // 1024,
                        "vsz_kib": vg[0] // 1024,
                        "guest_pct": 100.0 * (vg[1] - self._guest.get(pid, vg[1])) / dt,
                        "mem_pct": 100.0 * rss / _MEM_TOTAL,
                    }
                )
                self._guest[pid] = vg[1]
            elif (vg0 := read_vsz_guest(pid)) is not None:
                self._guest[pid] = vg0[1]
        prev.clear()
        prev.update(seen)
        for gone in set(self._guest) - set(seen):
            del self._guest[gone]

    def _loop(self) -> None:
        prev: dict[int, tuple[float, tuple[str, float, float, int, int, int]]] = {}
        next_t = time.monotonic()
        while True:
            self.sample_once(prev)
            next_t += self.interval_s
            now = time.monotonic()
            if next_t < now:  # fell behind (a stalled process): skip ticks, no burst of tiny ones
                next_t = now + self.interval_s
            if self._stop.wait(max(0.0, next_t - now)):
                break
        self.sample_once(prev)  # the partial last interval

    def start(self) -> ProcSampler:
        self._thread = threading.Thread(target=self._loop, name="procstat", daemon=True)
        self._thread.start()
        return self

    def samples(self) -> list[dict[str, Any]]:
        """A copy of the rows so far (safe while the sampler runs)."""
        return list(self._samples)

    def prune(self, before_t: float) -> None:
        """Drop rows older than wall time ``before_t`` (a long-lived user bounds memory)."""
        # Rebinding (not mutating) keeps a concurrent append safe: the thread appends to the
        # list it reads through self._samples, at worst one row lands in the old list.
        self._samples = [s for s in self._samples if s["t"] >= before_t]

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 5)
        return list(self._samples)

    @staticmethod
    def totals(samples: list[dict[str, Any]]) -> list[dict[str, float]]:
        """Sum the processes per tick (one row per sampling time)."""
        by_t: dict[float, dict[str, float]] = {}
        for s in samples:
            key = round(s["t"], 1)
            row = by_t.setdefault(
                key, {"t": s["t"], "cpu_pct": 0.0, "usr_pct": 0.0, "sys_pct": 0.0, "rss_kib": 0.0}
            )
            for k in ("cpu_pct", "usr_pct", "sys_pct", "rss_kib"):
                row[k] += s[k]
        return [by_t[k] for k in sorted(by_t)]
