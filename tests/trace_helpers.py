"""Test helpers for run traces: trace.json (OTLP JSON) read as a flat list and as a tree."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from swarmscope.sys.otlpjson import attributes, spans_of

OTEL_VARS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SERVICE_NAME",
    "OTEL_TRACES_EXPORTER",
)


def read_spans(run_dir: pathlib.Path) -> list[dict[str, Any]]:
    """trace.json's spans, flat: {"service", "pid", "name", "id", "parent", "start", "end",
    "attrs", "events"}."""
    doc = json.loads((run_dir / "trace.json").read_text())
    assert set(doc) == {"resourceSpans"}, sorted(doc)
    return [
        {
            "service": s["service"],
            "pid": s["resource"].get("process.pid"),
            "name": s["name"],
            "trace": s["traceId"],
            "id": s["spanId"],
            "parent": s.get("parentSpanId"),
            "start": int(s["startTimeUnixNano"]),
            "end": int(s["endTimeUnixNano"]),
            "attrs": attributes(s.get("attributes", [])),
            "events": [
                {"name": e["name"], "t": int(e["timeUnixNano"]), "attrs": attributes(e.get("attributes", []))}
                for e in s.get("events", [])
            ],
        }
        for s in spans_of(doc)
    ]


def tree_lines(spans: list[dict[str, Any]]) -> list[str]:
    """The span tree as indented "service: name" lines, children in start order."""
    kids: dict[str | None, list[dict[str, Any]]] = {}
    for s in spans:
        kids.setdefault(s["parent"], []).append(s)
    out: list[str] = []

    def walk(parent: str | None, depth: int) -> None:
        for s in sorted(kids.get(parent, []), key=lambda s: (s["start"], s["name"])):
            out.append("  " * depth + f"{s['service']}: {s['name']}")
            walk(s["id"], depth + 1)

    walk(None, 0)
    return out
