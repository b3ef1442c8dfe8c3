"""Spans as OTLP data: the OTLP JSON file format, the OTLP protobuf request, and a per-window span
buffer that lets a process send its spans back with its window results.

    buf = WindowSpans("swarmscope-worker", {"host.name": host})   # the process's own provider
    span = buf.tracer.start_span("burst n1", context=otel.extract(tp),
                                 attributes={WINDOW_ATTR: window_id})
    span.end()
    blob = buf.take(window_id)          # OTLP ExportTraceServiceRequest bytes, spans removed
    doc = to_json([blob])               # {"resourceSpans": [...]}: what trace.json holds
    request = from_json(doc)            # back to the protobuf request (``swarmscope trace push``)

The JSON is the OTLP/JSON encoding (opentelemetry-proto's JSON mapping with the OTLP rules:
lowerCamelCase keys, trace and span ids as hex, enums as integers, 64-bit integers as strings),
the format Jaeger's UI opens with "upload JSON" and OTLP/HTTP receivers take. Converting goes
through the SDK's own OTLP encoder, so a span reads the same here as on the wire.

Caveats: a WindowSpans provider is not the global one. It exports over OTLP itself only when
the standard ``OTEL_*`` variables name an endpoint (swarmscope.core.sys.otel.otlp_exporter); its
buffered spans leave only through ``take``. Spans without the window attribute are buffered
under "" and taken with ``take("")``.
"""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from swarmscope import __version__
from swarmscope.core.errors import ResultsError
from swarmscope.core.sys import otel

# Span limits of a WindowSpans provider: a neighbor window's probe span carries one event per
# map-update call (the SDK's default keeps 128).
from swarmscope.core.sys.otlpconf import ATTRIBUTE_LIMIT, EVENT_LIMIT

WINDOW_ATTR = "swarmscope.window_id"
_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def encode(spans: Sequence[ReadableSpan]) -> bytes:
    """Finished SDK spans as a serialized OTLP ExportTraceServiceRequest."""
    return bytes(encode_spans(spans).SerializeToString()) if spans else b""


def to_json(blobs: Iterable[bytes | ExportTraceServiceRequest]) -> dict[str, Any]:
    """Serialized (or parsed) OTLP requests merged into one OTLP JSON document, each span once."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for blob in blobs:
        if not blob:
            continue
        req = (
            blob
            if isinstance(blob, ExportTraceServiceRequest)
            else ExportTraceServiceRequest.FromString(blob)
        )
        doc = json_format.MessageToDict(req, use_integers_for_enums=True)
        for rs in doc.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                spans = []
                for s in ss.get("spans", []):
                    _ids(s, _b64_to_hex)
                    for link in s.get("links", []):
                        _ids(link, _b64_to_hex)
                    # A span can come twice: in one process's own trace and in the copy a
                    # remote part sent back (same provider in one process, e.g. tests).
                    if s["spanId"] not in seen:
                        seen.add(s["spanId"])
                        spans.append(s)
                ss["spans"] = spans
            rs["scopeSpans"] = [ss for ss in rs.get("scopeSpans", []) if ss["spans"]]
            if rs["scopeSpans"]:
                out.append(rs)
    return {"resourceSpans": out}


def from_json(doc: Mapping[str, Any]) -> ExportTraceServiceRequest:
    """An OTLP JSON document (trace.json) as the protobuf request an OTLP endpoint takes."""
    if not isinstance(doc, Mapping) or "resourceSpans" not in doc:
        raise ResultsError('not an OTLP JSON trace (no "resourceSpans")')
    copy: dict[str, Any] = {"resourceSpans": []}
    for rs in doc["resourceSpans"]:
        scopes = []
        for ss in rs.get("scopeSpans", []):
            spans = []
            for s in ss.get("spans", []):
                s = dict(s)
                _ids(s, _hex_to_b64)
                s["links"] = [_ids(dict(link), _hex_to_b64) for link in s.get("links", [])]
                spans.append(s)
            scopes.append({**ss, "spans": spans})
        copy["resourceSpans"].append({**rs, "scopeSpans": scopes})
    try:
        return json_format.ParseDict(copy, ExportTraceServiceRequest())
    except (json_format.ParseError, ValueError) as e:
        raise ResultsError(f"not a valid OTLP JSON trace: {e}") from e


def spans_of(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every span of an OTLP JSON document, flat, each with its ``service`` (service.name) and
    ``resource`` (its resource's attributes) added."""
    out = []
    for rs in doc.get("resourceSpans", []):
        attrs = attributes(rs.get("resource", {}).get("attributes", []))
        for ss in rs.get("scopeSpans", []):
            for s in ss.get("spans", []):
                out.append({**s, "service": str(attrs.get("service.name", "")), "resource": attrs})
    return out


def attributes(kvs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """OTLP key/value attributes as a plain dict (ints from their JSON strings)."""
    out: dict[str, Any] = {}
    for kv in kvs:
        v = kv.get("value", {})
        if "intValue" in v:
            out[kv["key"]] = int(v["intValue"])
        elif "doubleValue" in v:
            out[kv["key"]] = float(v["doubleValue"])
        elif "boolValue" in v:
            out[kv["key"]] = bool(v["boolValue"])
        elif "stringValue" in v:
            out[kv["key"]] = v["stringValue"]
        elif "arrayValue" in v:
            out[kv["key"]] = [next(iter(x.values()), None) for x in v["arrayValue"].get("values", [])]
    return out


def _ids(d: dict[str, Any], conv: Any) -> dict[str, Any]:
    for k in _ID_KEYS:
        if d.get(k):
            d[k] = conv(d[k])
        else:
            d.pop(k, None)
    return d


def _b64_to_hex(v: str) -> str:
    return base64.b64decode(v).hex()


def _hex_to_b64(v: str) -> str:
    try:
        return base64.b64encode(bytes.fromhex(v)).decode()
    except ValueError as e:
        raise ResultsError(f"bad trace/span id {v!r}: {e}") from e


class _Buffer(SpanExporter):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_window: dict[str, list[ReadableSpan]] = {}

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            for s in spans:
                key = str((s.attributes or {}).get(WINDOW_ATTR, ""))
                self._by_window.setdefault(key, []).append(s)
        return SpanExportResult.SUCCESS

    def take(self, window_id: str) -> list[ReadableSpan]:
        with self._lock:
            return self._by_window.pop(window_id, [])

    def shutdown(self) -> None:
        pass


class WindowSpans:
    """A process's own tracer provider (worker, probe) whose spans go back with window results."""

    def __init__(self, service: str, attributes: Mapping[str, str] | None = None):
        resource = Resource.create(
            {
                "service.name": os.getenv("OTEL_SERVICE_NAME", service),
                "service.version": __version__,
                "process.pid": os.getpid(),
                **(attributes or {}),
            }
        )
        limits = SpanLimits(max_events=EVENT_LIMIT, max_span_attributes=ATTRIBUTE_LIMIT)
        self.provider = TracerProvider(resource=resource, span_limits=limits)
        self._buf = _Buffer()
        self.provider.add_span_processor(SimpleSpanProcessor(self._buf))
        exporter = otel.otlp_exporter()
        if exporter is not None:
            self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer(service, __version__)

    def take(self, window_id: str) -> bytes:
        """The finished spans of a window as OTLP request bytes (b"" when none), removed here."""
        return encode(self._buf.take(window_id))

    def shutdown(self) -> None:
        self.provider.shutdown()
