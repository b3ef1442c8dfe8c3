"""Test helpers for run traces: trace.json (OTLP JSON) read as a flat list and as a tree."""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

from swarmscope.core.sys.otlpjson import attributes, spans_of

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


def run_without_otlp(*args: str) -> pathlib.Path:
    """``swarmscope <args>`` with no OTLP variable set (so nothing is exported); its run dir."""
    from helpers import only_run_dir, run_cli

    saved = {k: os.environ.pop(k) for k in OTEL_VARS if k in os.environ}
    try:
        p = run_cli(*args)
    finally:
        os.environ.update(saved)
    assert p.returncode == 0, p.stderr[-3000:]
    return only_run_dir(pathlib.Path(args[args.index("--out") + 1]))


def distributed_exec_run(out: pathlib.Path) -> pathlib.Path:
    """The exec storm in distributed mode: 2 worker processes, 2 nodes, 2 windows; its run dir."""
    from helpers import free_port

    return run_without_otlp(
        "run", "scenarios/exec_storm.yaml", "--set", "mode=distributed", "--set", "workers=2",
        "--set", "nodes=2", "--set", "iterations=2", "--set", "burst_s=0.2", "--set", "pause_s=0",
        "--set", f"master_bind=127.0.0.1:{free_port()}", "--out", str(out),
    )  # fmt: skip
