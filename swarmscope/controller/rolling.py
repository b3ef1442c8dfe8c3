"""Rolling readings: an open window's counts so far, read without closing it.

    reading = read_so_far(controller, window, metric="exec", generated=stats_total)
    reading.kernel, reading.generated, reading.reported, reading.loss   # so far; None: no source

Every probe answers a ReadWindow (proto: the counters' deltas since the window opened, the
window left open, so its close is still exact); the controller sums the kind's ``metric`` over
them and fires ``events.window_reading``. The Locust plug-in calls this every
``live_interval_s`` of a free-running swarm (app/plugin.py); the web UI's tab draws the series.

Caveat: the three numbers are not read at the same instant. ``kernel`` is what the probes had
counted when they answered (at ``elapsed_s``); ``generated`` is what the workers had reported
to Locust's stats by then (the completed units of load: a burst counts when it ends, and a
distributed worker reports every 3 s); ``reported`` is what the tracer under test had printed
and swarmscope had read by then (a tracer with no running count, e.g. ``stream``, gives None).
So mid-window generated may lag kernel and reported may lag both: only the close reconciles.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from swarmscope.controller.model import WindowInfo, loss_ratio


@dataclass(frozen=True)
class LiveReading:
    """One read of an open window so far, summed over its nodes."""

    window_id: str
    elapsed_s: float  # since the window opened, when the probes were read
    generated: int | None  # units of load the workers had reported (None: no source)
    kernel: int | None  # the probes' count of the kind's metric (None: no probe answered)
    reported: int | None  # the tracer under test's count (None: no tracer, or it cannot tell)
    missing: list[str] = field(default_factory=list)  # probes that did not answer in time

    @property
    def loss(self) -> float | None:
        """1 - reported / kernel, as a closed window's loss (None without both)."""
        return loss_ratio(self.reported, self.kernel)


def read_so_far(
    controller: Any, win: WindowInfo, metric: str, generated: Callable[[], int | None], timeout_s: float = 2.0
) -> LiveReading:
    """Read every probe of ``win`` so far, fire ``window_reading`` and return the reading."""
    readings, missing = controller.fleet.read_window(win.window_id, timeout_s)
    counted = [int(r.counters[metric]) for r in readings if metric in r.counters]
    elapsed = (time.time_ns() - win.opened_ns) / 1e9
    so_far = getattr(controller.tracer, "so_far", None)
    reading = LiveReading(
        window_id=win.window_id,
        elapsed_s=elapsed,
        generated=generated(),
        kernel=sum(counted) if counted else None,
        reported=so_far() if so_far is not None else None,
        missing=list(missing),
    )
    controller.events.window_reading.fire(run=controller.run, window=win, reading=reading)
    return reading
