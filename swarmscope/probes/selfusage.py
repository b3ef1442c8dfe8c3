"""This process's CPU % since the last call and its RSS, for the probe's heartbeats.

    u = SelfUsage(); ...; u.cpu_percent(); u.rss_bytes()

From os.times and /proc/self/statm: psutil's figures without its ~1 MiB of imports in a probe
that must stay under 40 MiB (docs/probe.md).
"""

from __future__ import annotations

import os
import time


class SelfUsage:
    """This process's CPU % since the last call and its RSS, from os.times and /proc (psutil's
    figures, without its ~1 MiB of imports in a probe that must stay small)."""

    _PAGE = os.sysconf("SC_PAGE_SIZE")

    def __init__(self) -> None:
        self._last = self._sample()

    @staticmethod
    def _sample() -> tuple[float, float]:
        t = os.times()
        return time.monotonic(), t.user + t.system

    def cpu_percent(self) -> float:
        (w0, c0), (w1, c1) = self._last, self._sample()
        self._last = (w1, c1)
        return 100.0 * (c1 - c0) / (w1 - w0) if w1 > w0 else 0.0

    def rss_bytes(self) -> int:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * self._PAGE
