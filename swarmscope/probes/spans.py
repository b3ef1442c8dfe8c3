"""The probe's window spans, built as OTLP protobuf directly: no OpenTelemetry SDK in the probe.

    spans = ProbeSpans("swarmscope-probe", {"host.name": node})
    span = spans.start("probe window", traceparent, start_ns, {"swarmscope.window_id": "w1"})
    span.add_event("reading", {"node": "n1", "exec": 5}, timestamp=t)
    span.set_attribute("swarmscope.kernel.n1.exec", 5); span.set_error("a reading has an error")
    span.end(end_ns)
    blob = spans.take("w1")     # OTLP ExportTraceServiceRequest bytes (b"" when none), removed
    spans.shutdown()            # flush what is queued for OTLP export (bounded, 5 s)

Why not the SDK: the OpenTelemetry API, SDK and OTLP encoder add about 7 MiB to a process that
must stay under 40 MiB (docs/probe.md); a probe makes one span per window with attributes and
events, which is all this writes. The span is a child of the W3C ``traceparent`` given (a new
trace without one). With ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`` set (core.sys.otlpconf) each
ended span is also exported from a background thread, over OTLP/gRPC (insecure) or OTLP/HTTP
protobuf (``OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf``). Caveats: ``OTEL_EXPORTER_OTLP_HEADERS``
and TLS to the collector are not read; attributes past ATTRIBUTE_LIMIT and events past
EVENT_LIMIT are dropped and counted (``dropped_*_count``), as the SDK's limits would.
"""

from __future__ import annotations

import os
import queue
import secrets
import threading
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1 import trace_pb2

from swarmscope import __version__
from swarmscope.core.sys.otlpconf import ATTRIBUTE_LIMIT, EVENT_LIMIT, otlp_endpoint, otlp_protocol

WINDOW_ATTR = "swarmscope.window_id"
_EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _value(v: Any) -> AnyValue:
    if isinstance(v, bool):
        return AnyValue(bool_value=v)
    if isinstance(v, int):
        return AnyValue(int_value=v)
    if isinstance(v, float):
        return AnyValue(double_value=v)
    return AnyValue(string_value=str(v))


def _attrs(items: Mapping[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=_value(v)) for k, v in items.items()]


def parse_traceparent(tp: str) -> tuple[bytes, bytes] | None:
    """(trace id, parent span id) of a W3C traceparent, None if it is not a valid one."""
    parts = tp.strip().split("-")
    if len(parts) < 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id, span_id = bytes.fromhex(parts[1]), bytes.fromhex(parts[2])
    except ValueError:
        return None
    return (trace_id, span_id) if any(trace_id) and any(span_id) else None


class WindowSpan:
    """One span: what the agent and probes.window_span write on it."""

    def __init__(
        self, owner: ProbeSpans, name: str, traceparent: str, start_ns: int, attrs: Mapping[str, Any]
    ):
        self._owner = owner
        parent = parse_traceparent(traceparent)
        trace_id, parent_id = parent if parent else (secrets.token_bytes(16), b"")
        self.pb = trace_pb2.Span(
            trace_id=trace_id,
            span_id=secrets.token_bytes(8),
            parent_span_id=parent_id,
            name=name,
            kind=trace_pb2.Span.SPAN_KIND_INTERNAL,
            start_time_unix_nano=start_ns,
        )
        self._attrs: dict[str, Any] = {}
        self.window_id = str(attrs.get(WINDOW_ATTR, ""))
        for k, v in attrs.items():
            self.set_attribute(k, v)

    def set_attribute(self, key: str, value: Any) -> None:
        if key in self._attrs or len(self._attrs) < ATTRIBUTE_LIMIT:
            self._attrs[key] = value
        else:
            self.pb.dropped_attributes_count += 1

    def add_event(self, name: str, attributes: Mapping[str, Any], timestamp: int) -> None:
        if len(self.pb.events) >= EVENT_LIMIT:
            self.pb.dropped_events_count += 1
            return
        self.pb.events.add(name=name, time_unix_nano=timestamp, attributes=_attrs(attributes))

    def set_error(self, message: str) -> None:
        self.pb.status.code = trace_pb2.Status.STATUS_CODE_ERROR
        self.pb.status.message = message

    def end(self, end_time: int | None = None) -> None:
        if self.pb.end_time_unix_nano:
            return  # ended once only, as an SDK span
        self.pb.end_time_unix_nano = end_time or time.time_ns()
        self.pb.attributes.extend(_attrs(self._attrs))
        self._owner._ended(self)


class ProbeSpans:
    """The probe's spans by window, and their OTLP export when an endpoint is set."""

    def __init__(self, service: str, attributes: Mapping[str, str] | None = None) -> None:
        # OTEL_RESOURCE_ATTRIBUTES ("k=v,k2=v2", values percent-encoded), as the OTel SDK reads
        # it: the chart sets k8s.pod.name and the node through it.
        from_env = dict(
            (k.strip(), urllib.parse.unquote(v.strip()))
            for k, _, v in (kv.partition("=") for kv in os.getenv("OTEL_RESOURCE_ATTRIBUTES", "").split(","))
            if k.strip() and v
        )
        res = {
            **from_env,
            "service.name": os.getenv("OTEL_SERVICE_NAME", service),
            "service.version": __version__,
            "process.pid": os.getpid(),
            **(attributes or {}),
        }
        self._resource = Resource(attributes=_attrs(res))
        self._scope = InstrumentationScope(name=service, version=__version__)
        self._lock = threading.Lock()
        self._done: dict[str, list[trace_pb2.Span]] = {}
        self._endpoint = otlp_endpoint()
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=1024)
        self._sender: threading.Thread | None = None
        if self._endpoint:
            self._sender = threading.Thread(target=self._send_loop, name="otlp-export", daemon=True)
            self._sender.start()

    def start(self, name: str, traceparent: str, start_ns: int, attributes: Mapping[str, Any]) -> WindowSpan:
        return WindowSpan(self, name, traceparent, start_ns, attributes)

    def _request(self, spans: list[trace_pb2.Span]) -> bytes:
        req = ExportTraceServiceRequest()
        rs = req.resource_spans.add(resource=self._resource)
        rs.scope_spans.add(scope=self._scope, spans=spans)
        return req.SerializeToString()

    def _ended(self, span: WindowSpan) -> None:
        with self._lock:
            self._done.setdefault(span.window_id, []).append(span.pb)
        if self._sender is not None:
            try:
                self._queue.put_nowait(self._request([span.pb]))
            except queue.Full:
                pass  # the collector is not keeping up: the span still rides back in WindowDone

    def take(self, window_id: str) -> bytes:
        """The ended spans of a window as OTLP request bytes (b"" when none), removed here."""
        with self._lock:
            spans = self._done.pop(window_id, [])
        return self._request(spans) if spans else b""

    def _send_loop(self) -> None:
        send = self._http if otlp_protocol().startswith("http") else self._grpc()
        while (body := self._queue.get()) is not None:
            try:
                send(body)
            except Exception as e:  # a collector that is down must never stop the probe
                import sys

                print(f"probe: OTLP export to {self._endpoint} failed: {e}", file=sys.stderr)

    def _http(self, body: bytes) -> None:
        import urllib.request

        url = self._endpoint
        if not os.getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
            url = url.rstrip("/") + "/v1/traces"  # the generic endpoint names the collector only
        req = urllib.request.Request(url, body, {"Content-Type": "application/x-protobuf"})
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()

    def _grpc(self) -> Any:
        import grpc

        target = self._endpoint.split("://", 1)[-1].rstrip("/")
        call = grpc.insecure_channel(target).unary_unary(_EXPORT_METHOD)

        def send(body: bytes) -> None:
            call(body, timeout=10)

        return send

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Send what is queued (bounded), then stop the export thread."""
        if self._sender is not None:
            try:
                self._queue.put(None, timeout=timeout_s)
            except queue.Full:
                return
            self._sender.join(timeout_s)
            self._sender = None
