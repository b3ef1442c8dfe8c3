"""Runs of scenarios that measure with their own machinery and report one section.

    report = run_section(kind, cfg, "neighbors", run_sweep, renderer="pkg.mod:render")

The neighbor-writes and ingress-flood scenarios drive their own targets and clocks (their
kernel-side timestamps come from probe programs they load for the run), and return a report
section (e.g. ``{"points": [...]}``). This wraps such a function in the same run skeleton as
the exec storm: a run id and directory, the result store, one OTel trace (the section's points
become span events with their figures), and report.json / report.html. A failure keeps what
was stored and writes the report with status "failed".
"""

from __future__ import annotations

import os
import pathlib
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from swarmscope.controller.model import PointInfo, RunInfo
from swarmscope.events import RunEvents


def run_section(
    kind: Any,
    cfg: Mapping[str, Any],
    section: str,
    fn: Callable[[Mapping[str, Any], pathlib.Path], dict[str, Any]],
    renderer: str | None = None,
    run_id: str | None = None,
    split: dict[str, str | None] | None = None,
    on_done: Callable[[RunEvents, RunInfo, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """``split`` stores some keys of the result as report sections of their own (top-level
    in report.json, e.g. ``steps``), each with its renderer; ``on_done`` may fire events from
    the result (e.g. a fault span)."""
    from swarmscope.controller.otel import RunSpans
    from swarmscope.controller.report import write_report
    from swarmscope.controller.store import ResultStore
    from swarmscope.process import new_run_id

    rid = run_id or new_run_id(kind.name)
    out = os.path.abspath(cfg["out"])
    run_dir = os.path.join(out, rid)
    os.makedirs(run_dir, exist_ok=True)
    run = RunInfo(rid, kind.name, kind.metric, dict(cfg), time.time_ns(), run_dir=run_dir)
    events = RunEvents()
    spans = RunSpans.attach(events)
    store = ResultStore(os.path.join(out, "swarmscope.sqlite"))
    store.attach(events)
    print(f"swarmscope: run {rid} -> {run_dir}", file=sys.stderr)
    events.run_started.fire(run=run)
    point = PointInfo(0, {"scenario": kind.name}, 0)  # no windows: the section holds the results
    events.point_started.fire(run=run, point=point)
    status = "failed"
    data: dict[str, Any] | None = None
    try:
        data = fn(cfg, pathlib.Path(run_dir))
        status = "ok"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        if data is not None:
            rest = dict(data)
            for key, key_renderer in (split or {}).items():
                if key in rest:
                    store.add_section(rid, key, rest.pop(key), renderer=key_renderer)
            store.add_section(rid, section, rest, renderer=renderer)
            if on_done is not None:
                on_done(events, run, data)
            span = spans.point_spans.get(0)
            for p in data.get("points", []) if isinstance(data, dict) else []:
                if span is not None and isinstance(p, dict):
                    attrs = {
                        f"swarmscope.{k}": v for k, v in p.items() if isinstance(v, int | float | str | bool)
                    }
                    span.add_event(f"{section} point", attributes=attrs)
        events.point_done.fire(run=run, point=point, results=[])
        events.run_finished.fire(run=run, status=status)
        report = write_report(store, rid, run_dir)
    return report
