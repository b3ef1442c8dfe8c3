"""Every run is one OpenTelemetry trace: run → point → iteration (the window span) → the
controller's per-node window spans, the workers' burst / step / batch spans and the probes'
window spans.

    spans = RunSpans.attach(events)     # a listener, like the store and the metrics
    # ... run ...
    run.trace_id                        # set at run_started; written into report.json

Provider and export are swarmscope.core.sys.otel's (the standard ``OTEL_*`` variables; a provider
Locust made for ``--otel`` is reused as it is). Spans are also kept in memory and, with the
spans workers and probes sent back with their window results (event ``spans_received``),
written to ``<run_dir>/trace.json`` in the OTLP JSON file format (``{"resourceSpans": [...]}``),
so a run's whole trace survives without a collector (``swarmscope trace push`` replays it).
Per-node window spans are created when the window is reconciled, with their real start and end
times, since only then are their counts known. Spans sent back are not exported again from here:
each process exports its own when it has an OTLP endpoint.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from swarmscope.controller.model import IterationResult, PointInfo, RunInfo, WindowInfo
from swarmscope.core.events import RunEvents
from swarmscope.core.sys import otel, otlpjson
from swarmscope.core.sys.trust import atomic_write

log = logging.getLogger(__name__)


class MemoryExporter(SpanExporter):
    """Keeps finished spans so a run can write its own trace.json."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def take(self, trace_id: int) -> list[ReadableSpan]:
        with self._lock:
            mine = [s for s in self.spans if s.context is not None and s.context.trace_id == trace_id]
            self.spans = [s for s in self.spans if s not in mine]
        return mine


_memory = MemoryExporter()
_provider_lock = threading.Lock()
_installed = False


def install_provider() -> TracerProvider:
    """The process's provider (swarmscope.core.sys.otel: Locust's, or ours with OTLP export), plus the
    memory exporter that trace.json is written from (added once per process)."""
    global _installed
    provider = otel.install_provider("swarmscope")
    with _provider_lock:
        if not _installed:
            provider.add_span_processor(SimpleSpanProcessor(_memory))
            _installed = True
    return provider


class RunSpans:
    """The OTel listener. Holds the open spans of one run."""

    def __init__(self) -> None:
        self.provider = install_provider()
        self.tracer = otel.tracer("swarmscope")
        self.run_span: trace.Span | None = None
        self.point_spans: dict[int, trace.Span] = {}
        self.iter_spans: dict[str, trace.Span] = {}
        self.set_up_named = False  # the "set up" span, before the first point, is drawn once
        self.trace_id = 0
        self.remote: list[bytes] = []  # spans workers and probes sent back (OTLP request bytes)
        self._remote_lock = threading.Lock()

    @classmethod
    def attach(cls, events: RunEvents) -> RunSpans:
        s = cls()
        events.run_started.add_listener(s.on_run_started)
        events.point_started.add_listener(s.on_point_started)
        events.window_opening.add_listener(s.on_window_opening)
        events.spans_received.add_listener(s.on_spans_received)
        events.iteration_done.add_listener(s.on_iteration_done)
        events.point_done.add_listener(s.on_point_done)
        events.fault.add_listener(s.on_fault)
        events.run_finished.add_listener(s.on_run_finished)
        return s

    def on_run_started(self, run: RunInfo, **_: Any) -> None:
        self.run_span = self.tracer.start_span(
            f"run {run.scenario}",
            start_time=run.started_ns,
            attributes={"swarmscope.run_id": run.run_id, "swarmscope.scenario": run.scenario},
        )
        self.trace_id = self.run_span.get_span_context().trace_id
        run.trace_id = format(self.trace_id, "032x")

    def _ctx(self, span: trace.Span | None) -> Any:
        return trace.set_span_in_context(span) if span is not None else None

    def on_point_started(self, run: RunInfo, point: PointInfo, **_: Any) -> None:
        if not self.set_up_named and self.run_span is not None:
            self.set_up_named = True
            # What came before the first point, named: the probes, the workers and the system
            # under test being set up (otherwise an unexplained gap at the trace's start).
            self.tracer.start_span(
                "set up", context=self._ctx(self.run_span), start_time=run.started_ns
            ).end()
        label = " ".join(f"{k}={v}" for k, v in point.params.items()) or str(point.index)
        attrs = {f"swarmscope.{k}": v for k, v in point.params.items() if isinstance(v, int | float | str)}
        self.point_spans[point.index] = self.tracer.start_span(
            f"point {label}", context=self._ctx(self.run_span), attributes=attrs
        )

    def on_window_opening(self, run: RunInfo, window: WindowInfo, **_: Any) -> None:
        parent = self.point_spans.get(window.point, self.run_span)
        span = self.tracer.start_span(
            f"iteration {window.iteration}",
            context=self._ctx(parent),
            attributes={"swarmscope.window_id": window.window_id, "swarmscope.nodes": len(window.nodes)},
        )
        self.iter_spans[window.window_id] = span
        window.traceparent = otel.traceparent_of(span)

    def on_iteration_done(self, run: RunInfo, result: IterationResult, **_: Any) -> None:
        # A kind whose faults strike on a worker sends their records back with the window's
        # results; its reconcile puts their spans in extra["fault_spans"].
        for f in result.extra.get("fault_spans", []):
            self.on_fault(run, f["name"], f["start_ns"], f["end_ns"], f.get("attrs", {}))
        span = self.iter_spans.pop(result.window_id, None)
        if span is None:
            return
        ctx = self._ctx(span)
        for n in result.per_node:
            attrs: dict[str, Any] = {"swarmscope.node": n.node}
            for key in ("generated", "kernel", "reported"):
                v = getattr(n, key)
                if v is not None:
                    attrs[f"swarmscope.{key}"] = v
            if n.loss_ratio is not None:
                attrs["swarmscope.loss_ratio"] = n.loss_ratio
            if n.missing:
                attrs["swarmscope.missing"] = ",".join(n.missing)
            if n.pod:
                attrs["swarmscope.pod"] = n.pod
            w = self.tracer.start_span(
                f"window {n.node}", context=ctx, start_time=result.started_ns, attributes=attrs
            )
            w.end(end_time=result.ended_ns or None)
        for key in ("generated", "kernel", "reported", "loss_ratio", "tracer_lost"):
            v = getattr(result, key)
            if v is not None:
                span.set_attribute(f"swarmscope.{key}", v)
        if result.flags:
            span.set_attribute("swarmscope.flags", ",".join(result.flags)[:1000])
        span.end(end_time=result.ended_ns or None)

    def on_point_done(self, point: PointInfo, **_: Any) -> None:
        span = self.point_spans.pop(point.index, None)
        if span is not None:
            span.end()

    def on_fault(
        self, run: RunInfo, name: str, start_ns: int, end_ns: int, attrs: dict[str, Any], **_: Any
    ) -> None:
        parent = next(iter(self.point_spans.values()), self.run_span)
        span = self.tracer.start_span(
            f"fault {name}",
            context=self._ctx(parent),
            start_time=start_ns,
            attributes={k: v for k, v in attrs.items() if v is not None},
        )
        span.end(end_time=end_ns)

    def on_run_finished(self, run: RunInfo, status: str, **_: Any) -> None:
        for s in [*self.iter_spans.values(), *self.point_spans.values()]:
            s.end()
        self.iter_spans.clear()
        self.point_spans.clear()
        if self.run_span is not None:
            self.run_span.set_attribute("swarmscope.status", status)
            self.run_span.end()
        self.provider.force_flush(10_000)
        if run.run_dir:
            self.write_json(os.path.join(run.run_dir, "trace.json"))

    def on_spans_received(self, run: RunInfo, window_id: str, spans: list[bytes], **_: Any) -> None:
        with self._remote_lock:
            self.remote.extend(spans)

    def write_json(self, path: str) -> None:
        """trace.json: this process's spans of the run and every span sent back, OTLP JSON."""
        with self._remote_lock:
            remote, self.remote = self.remote, []
        doc = otlpjson.to_json([otlpjson.encode(_memory.take(self.trace_id)), *remote])
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        atomic_write(path, json.dumps(doc, indent=1).encode())
