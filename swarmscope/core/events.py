"""Typed event hooks: how listeners (store, Prometheus, OTel spans, console) extend a run.

    from swarmscope.core.events import RunEvents
    events = RunEvents()
    events.iteration_done.add_listener(lambda *, run, result, **_: print(result.kernel))
    events.iteration_done.fire(run=run, result=result)

Modelled on Locust's ``locust.event``: each hook documents its keyword arguments, listeners
take them by keyword and should accept ``**kwargs`` so new arguments can be added. A listener
that raises is logged and the others still run: one broken sink must not lose a measurement.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class EventHook:
    """A list of listeners called with keyword arguments by :meth:`fire`."""

    def __init__(self, name: str, doc: str = ""):
        self.name = name
        self.__doc__ = doc
        self._listeners: list[Callable[..., Any]] = []

    def add_listener(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        self._listeners.append(fn)
        return fn

    def remove_listener(self, fn: Callable[..., Any]) -> None:
        self._listeners.remove(fn)

    def fire(self, **kwargs: Any) -> None:
        for fn in list(self._listeners):
            try:
                fn(**kwargs)
            except Exception:
                log.exception("listener %r of event %s failed", fn, self.name)


class RunEvents:
    """The hooks of one run. Keyword arguments of each are listed in its doc."""

    def __init__(self) -> None:
        self.run_started = EventHook("run_started", "run: RunInfo — fired once, before the first point.")
        self.point_started = EventHook(
            "point_started",
            "run: RunInfo, point: PointInfo — a sweep point (e.g. a node count) begins.",
        )
        self.window_opening = EventHook(
            "window_opening",
            "run: RunInfo, window: WindowInfo — before probes are told; a listener may set "
            "window.traceparent (the OTel listener does), which the probes then continue.",
        )
        self.window_opened = EventHook(
            "window_opened",
            "run: RunInfo, window: WindowInfo — probes took their opening snapshot.",
        )
        self.window_closed = EventHook(
            "window_closed",
            "run: RunInfo, window: WindowInfo, readings: list[ProbeReading], missing: list[str] — "
            "probes sent their readings (missing lists probes/nodes that did not).",
        )
        self.window_reading = EventHook(
            "window_reading",
            "run: RunInfo, window: WindowInfo, reading: LiveReading — an open window's counts so "
            "far (controller/rolling.py: elapsed_s, generated, kernel, reported, loss, missing), "
            "read every live_interval_s of a free-running swarm; the window stays open.",
        )
        self.spans_received = EventHook(
            "spans_received",
            "run: RunInfo, window_id: str, spans: list[bytes] — spans another process (a worker, a "
            "probe) sent back with a window's results, as serialized OTLP requests.",
        )
        self.iteration_done = EventHook(
            "iteration_done", "run: RunInfo, result: IterationResult — one window reconciled."
        )
        self.point_done = EventHook(
            "point_done", "run: RunInfo, point: PointInfo, results: list[IterationResult]."
        )
        self.fault = EventHook(
            "fault",
            "run: RunInfo, name: str, start_ns: int, end_ns: int, attrs: dict — a fault was injected.",
        )
        self.run_finished = EventHook(
            "run_finished",
            'run: RunInfo, status: str — "ok", "failed" or "interrupted"; fired before the report.',
        )
        self.report_written = EventHook(
            "report_written",
            "run: RunInfo, report: dict, run_dir: str — report.json and friends are on disk.",
        )

    def hooks(self) -> list[EventHook]:
        return [v for v in vars(self).values() if isinstance(v, EventHook)]
