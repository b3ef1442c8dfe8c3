"""The one OpenTelemetry setup: tracer provider, OTLP exporter, W3C traceparent helpers.

    from swarmscope.core.sys import otel
    provider = otel.install_provider("swarmscope-probe", {"host.name": node})
    span = otel.tracer("swarmscope.probes").start_span("w", context=otel.extract(traceparent))
    carrier_value = otel.traceparent_of(span)     # "00-<trace id>-<span id>-01"
    provider.shutdown()                           # at exit: flushes batched spans

Export follows the standard ``OTEL_*`` variables: with ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) set and ``OTEL_TRACES_EXPORTER`` not excluding
``otlp``, spans go over OTLP, protocol from ``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL`` (``grpc``,
the default, or ``http/protobuf``). ``OTEL_SERVICE_NAME`` overrides the service name.

Caveats: the SDK allows one global provider per process. If one is already installed (Locust
makes one for ``--otel``), it is reused as it is and no exporter is added to it, so spans are
never exported twice. Without an endpoint the provider still records spans (processors added
by the caller, e.g. the controller's in-memory trace.json exporter, see them).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from swarmscope import __version__
from swarmscope.core.sys.otlpconf import otlp_endpoint as otlp_endpoint  # callers: otel.otlp_endpoint()
from swarmscope.core.sys.otlpconf import otlp_protocol

_lock = threading.Lock()


def otlp_exporter() -> SpanExporter | None:
    """An OTLP span exporter configured from OTEL_* variables, None without an endpoint."""
    if not otlp_endpoint():
        return None
    proto = otlp_protocol()
    # Imported here: each exporter pulls in its transport (grpc or requests), only one is needed.
    if proto.startswith("http"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

        return HttpExporter()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

    return GrpcExporter()


def install_provider(
    service: str = "swarmscope", attributes: Mapping[str, str] | None = None
) -> TracerProvider:
    """The process's SDK tracer provider: the one already installed, or a new one with OTLP export."""
    with _lock:
        current = trace.get_tracer_provider()
        if isinstance(current, TracerProvider):
            return current
        resource = Resource.create(
            {
                "service.name": os.getenv("OTEL_SERVICE_NAME", service),
                "service.version": __version__,
                **(attributes or {}),
            }
        )
        provider = TracerProvider(resource=resource)
        exporter = otlp_exporter()
        if exporter is not None:
            provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        return provider


def tracer(name: str) -> trace.Tracer:
    """A tracer from the global provider (a no-op one until a provider is installed)."""
    return trace.get_tracer(name, __version__)


def traceparent_of(span: trace.Span) -> str:
    """The W3C ``traceparent`` value that makes a remote span a child of ``span``."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent", "")


def extract(traceparent: str) -> Context | None:
    """The parent context carried by a ``traceparent`` value; None when there is none."""
    return propagate.extract({"traceparent": traceparent}) if traceparent else None
