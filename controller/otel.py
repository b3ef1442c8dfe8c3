"""Every run is one OpenTelemetry trace: run → point → iteration → window/load spans.

    spans = RunSpans.attach(events)     # a listener, like the store and the metrics
    # ... run ...
    run.trace_id                        # set at run_started; written into report.json

Export follows the standard ``OTEL_*`` variables: with ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) set, spans go over OTLP (``OTEL_EXPORTER_OTLP_PROTOCOL``
grpc or http/protobuf); a provider Locust made for ``--otel`` is reused as it is. Spans are
also kept in memory and written to ``<run_dir>/trace.json``, so a run's trace survives without
a collector. Window and load spans are created when the window is reconciled, with their
real start and end times, since only then are their counts known.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from swarmscope import __version__
from swarmscope.controller.model import IterationResult, PointInfo, RunInfo, WindowInfo
from swarmscope.events import RunEvents

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


def _otlp_exporter() -> SpanExporter | None:
    endpoint = os.getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
    exporters = {e.strip().lower() for e in os.getenv("OTEL_TRACES_EXPORTER", "otlp").split(",")}
    if not endpoint or "otlp" not in exporters:
        return None
    proto = (
        os.getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.getenv("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc"
    )
    if proto.startswith("http"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

        return HttpExporter()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

    return GrpcExporter()


def install_provider() -> TracerProvider:
    """Use the SDK provider already installed (Locust --otel), or install ours; add the memory exporter."""
    global _installed
    with _provider_lock:
        current = trace.get_tracer_provider()
        if isinstance(current, TracerProvider):
            provider = current
        else:
            resource = Resource.create(
                {"service.name": os.getenv("OTEL_SERVICE_NAME", "swarmscope"), "service.version": __version__}
            )
            provider = TracerProvider(resource=resource)
            exporter = _otlp_exporter()
            if exporter is not None:
                provider.add_span_processor(BatchSpanProcessor(exporter))
            trace.set_tracer_provider(provider)
        if not _installed:
            provider.add_span_processor(SimpleSpanProcessor(_memory))
            _installed = True
        return provider


def traceparent_of(span: trace.Span) -> str:
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent", "")


class RunSpans:
    """The OTel listener. Holds the open spans of one run."""

    def __init__(self) -> None:
        self.provider = install_provider()
        self.tracer = trace.get_tracer("swarmscope", __version__)
        self.run_span: trace.Span | None = None
        self.point_spans: dict[int, trace.Span] = {}
        self.iter_spans: dict[str, trace.Span] = {}
        self.trace_id = 0

    @classmethod
    def attach(cls, events: RunEvents) -> RunSpans:
        s = cls()
        events.run_started.add_listener(s.on_run_started)
        events.point_started.add_listener(s.on_point_started)
        events.window_opening.add_listener(s.on_window_opening)
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
        window.traceparent = traceparent_of(span)

    def on_iteration_done(self, run: RunInfo, result: IterationResult, **_: Any) -> None:
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
            w = self.tracer.start_span(
                f"window {n.node}", context=ctx, start_time=result.started_ns, attributes=attrs
            )
            w.end(end_time=result.ended_ns or None)
            if n.generated is not None:
                load = self.tracer.start_span(
                    f"load {n.node}",
                    context=ctx,
                    start_time=result.started_ns,
                    attributes={
                        "swarmscope.node": n.node,
                        "swarmscope.generated": n.generated,
                        "swarmscope.rate": n.rate or 0.0,
                    },
                )
                load.end(end_time=result.ended_ns or None)
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

    def write_json(self, path: str) -> None:
        spans = _memory.take(self.trace_id)
        out = []
        for s in sorted(spans, key=lambda s: s.start_time or 0):
            ctx = s.context
            out.append(
                {
                    "name": s.name,
                    "trace_id": format(ctx.trace_id, "032x") if ctx else "",
                    "span_id": format(ctx.span_id, "016x") if ctx else "",
                    "parent_span_id": format(s.parent.span_id, "016x") if s.parent else None,
                    "start_ns": s.start_time,
                    "end_ns": s.end_time,
                    "attributes": dict(s.attributes or {}),
                }
            )
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({"trace_id": format(self.trace_id, "032x"), "spans": out}, fh, indent=1)
