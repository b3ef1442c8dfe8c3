"""One trace from a Jaeger query API (the chart's Jaeger), as a flat list of spans with parents.

    spans = fetch_trace("http://10.232.7.3:16686", trace_id)   # retries until the trace is there
    print(span_tree(spans))                                   # service  name  (parent)

Each span is a dict: ``id``, ``parent`` (the CHILD_OF reference's span id, "" for a root),
``name``, ``service`` and ``resource`` (the process tags: k8s.pod.name, host.name, ...).
Caveats: Jaeger's HTTP JSON API (``/api/traces/<id>``, what its UI reads), not the gRPC one;
spans arrive in batches, so the caller says how many services it waits for.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any


def _get(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return dict(json.load(r))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _flatten(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for t in doc.get("data") or []:
        procs = t.get("processes", {})
        for s in t.get("spans", []):
            proc = procs.get(s.get("processID"), {})
            parents = [r["spanID"] for r in s.get("references", []) if r.get("refType") == "CHILD_OF"]
            out.append({
                "id": s["spanID"],
                "parent": parents[0] if parents else "",
                "name": s["operationName"],
                "service": proc.get("serviceName", ""),
                "resource": {kv["key"]: kv["value"] for kv in proc.get("tags", [])},
                "tags": {kv["key"]: kv["value"] for kv in s.get("tags", [])},
            })  # fmt: skip
    return out


def fetch_trace(base: str, trace_id: str, services: set[str], timeout: float = 60.0) -> list[dict[str, Any]]:
    """The trace's spans once every one of ``services`` has some (or what there is at the timeout)."""
    deadline = time.monotonic() + timeout
    spans: list[dict[str, Any]] = []
    while True:
        doc = _get(f"{base}/api/traces/{trace_id}")
        spans = _flatten(doc) if doc else spans
        if services <= {s["service"] for s in spans} or time.monotonic() > deadline:
            return spans
        time.sleep(1.0)


def span_tree(spans: list[dict[str, Any]]) -> str:
    """Indented: each span under its parent, ``service  name  [k8s.pod.name]``; orphans marked."""
    by_id = {s["id"]: s for s in spans}
    kids: dict[str, list[dict[str, Any]]] = {}
    for s in spans:
        kids.setdefault(s["parent"] if s["parent"] in by_id else "", []).append(s)
    lines: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for s in sorted(kids.get(parent, []), key=lambda s: (s["service"], s["name"])):
            pod = s["resource"].get("k8s.pod.name", "")
            orphan = " (parent missing!)" if depth == 0 and s["parent"] else ""
            lines.append(f"{'  ' * depth}{s['service']}  {s['name']}  [{pod}]{orphan}")
            walk(s["id"], depth + 1)

    walk("", 0)
    return "\n".join(lines)
