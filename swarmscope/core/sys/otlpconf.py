"""OTLP settings from the standard ``OTEL_*`` environment, and the span limits of swarmscope's
window spans; no OpenTelemetry import, so the probe reads them without the SDK.

    otlp_endpoint()      # "" when spans are not to be exported
    otlp_protocol()      # "grpc" (the default) or "http/protobuf"
"""

from __future__ import annotations

import os

# A window span carries one event per reading and per sample; more are counted as dropped.
EVENT_LIMIT = 20_000
ATTRIBUTE_LIMIT = 2_000


def otlp_endpoint() -> str:
    """The OTLP traces endpoint from the environment, "" when spans are not to be exported."""
    endpoint = os.getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
    exporters = {e.strip().lower() for e in os.getenv("OTEL_TRACES_EXPORTER", "otlp").split(",")}
    return (endpoint or "") if "otlp" in exporters else ""


def otlp_protocol() -> str:
    proto = os.getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
    return proto or "grpc"
