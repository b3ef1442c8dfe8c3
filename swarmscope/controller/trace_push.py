"""``swarmscope trace push RUN_DIR [--otlp URL]``: replay a stored run's trace into an OTLP endpoint.

    swarmscope trace push results/<run-id> --otlp http://127.0.0.1:4317          # gRPC (default)
    swarmscope trace push results/<run-id> --otlp http://127.0.0.1:4318 --protocol http/protobuf

Reads ``<run_dir>/trace.json`` (OTLP JSON: every process's spans of the run) and sends it as one
OTLP ExportTraceServiceRequest, spans keeping their ids, times and services, so the run shows in
a Jaeger (or any OTLP collector) as the one trace it was. Without ``--otlp`` the standard
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT`` is used, and
``--protocol`` defaults to ``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL``, else grpc.

Caveats: pushing a run that was exported live as well stores its spans twice in backends that
do not deduplicate. A refused or failed export is retried a bounded number of times, then
reported as an error.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from swarmscope.core.errors import ConfigError, Problem, ResultsError
from swarmscope.core.sys import otel, otlpjson

ATTEMPTS = 4


def load_trace(run_dir: str) -> dict[str, Any]:
    path = os.path.join(run_dir, "trace.json") if os.path.isdir(run_dir) else run_dir
    try:
        with open(path, encoding="utf-8") as fh:
            doc: dict[str, Any] = json.load(fh)
    except (OSError, ValueError) as e:
        raise ResultsError(f"cannot read the trace {path}: {e}") from e
    return doc


def push(doc: dict[str, Any], url: str, protocol: str, timeout_s: float = 10.0) -> int:
    """Send an OTLP JSON document to ``url``; returns the number of spans sent."""
    request = otlpjson.from_json(doc)
    n = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
    last: Exception | None = None
    for attempt in range(ATTEMPTS):
        try:
            if protocol.startswith("http"):
                _push_http(request.SerializeToString(), url, timeout_s)
            else:
                _push_grpc(request, url, timeout_s)
            return n
        except OSError as e:
            last = e
            time.sleep(0.5 * 2**attempt)
    raise ResultsError(f"OTLP export to {url} failed after {ATTEMPTS} attempts: {last}") from last


def _push_http(body: bytes, url: str, timeout_s: float) -> None:
    # The OTLP/HTTP signal path, unless the URL already names one (as the TRACES_ variable does).
    if not urlsplit(url).path.rstrip("/"):
        url = url.rstrip("/") + "/v1/traces"
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            r.read()
    except urllib.error.HTTPError as e:
        if e.code < 500 and e.code != 429:  # a rejection; retrying it will not help
            raise ResultsError(f"OTLP endpoint {url} refused the trace: HTTP {e.code} {e.reason}") from e
        raise


def _push_grpc(request: Any, url: str, timeout_s: float) -> None:
    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    parts = urlsplit(url if "://" in url else "http://" + url)
    target = parts.netloc or parts.path
    channel = (
        grpc.secure_channel(target, grpc.ssl_channel_credentials())
        if parts.scheme == "https"
        else grpc.insecure_channel(target)
    )
    try:
        trace_service_pb2_grpc.TraceServiceStub(channel).Export(request, timeout=timeout_s)
    except grpc.RpcError as e:  # retried like a failed HTTP connection
        raise ConnectionError(f"{e.code().name}: {e.details()}") from e
    finally:
        channel.close()


def _cmd_push(args: argparse.Namespace) -> int:
    url = args.otlp or otel.otlp_endpoint()
    if not url:
        raise ConfigError(
            [
                Problem(
                    "--otlp", "otlp", "no OTLP endpoint: give --otlp URL or set OTEL_EXPORTER_OTLP_ENDPOINT"
                )
            ]
        )
    protocol = (
        args.protocol
        or os.getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"
    )
    doc = load_trace(args.run_dir)
    n = push(doc, url, protocol)
    ids = sorted({s.get("traceId", "") for s in otlpjson.spans_of(doc)})
    print(f"pushed {n} spans of trace {', '.join(ids)} to {url} ({protocol})")
    return 0


def register(sub: Any) -> None:
    ap = sub.add_parser("trace", help="a stored run's trace (trace.json)")
    tsub = ap.add_subparsers(dest="trace_command", metavar="ACTION", required=True)
    p = tsub.add_parser("push", help="replay a run's trace.json into an OTLP endpoint (Jaeger, a collector)")
    p.add_argument("run_dir", help="a run directory (or its trace.json)")
    p.add_argument("--otlp", default="", help="OTLP endpoint URL (default: $OTEL_EXPORTER_OTLP_ENDPOINT)")
    p.add_argument(
        "--protocol",
        choices=("grpc", "http/protobuf"),
        default=None,
        help="OTLP protocol (default: $OTEL_EXPORTER_OTLP_PROTOCOL, else grpc)",
    )
    p.set_defaults(func=_cmd_push)
