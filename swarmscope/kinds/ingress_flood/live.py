"""What the ingress flood shows live (web UI tab, progress lines) and in its terminal summary:
one row per step — load, requests, req/s, failures, merged latency percentiles, the proxy's CPU
and RSS — the figures a Locust or k6 user looks at first.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from swarmscope.controller.tables import Columns, Rows, num, text_table

COLUMNS: Columns = [
    ("step", "Step"),
    ("load", "Load"),
    ("requests", "Requests"),
    ("rps", "Req/s"),
    ("failures", "Failures"),
    ("p50", "p50 ms"),
    ("p90", "p90 ms"),
    ("p99", "p99 ms"),
    ("cpu", "Proxy CPU %"),
    ("rss", "Proxy RSS KiB"),
]


def rows(results: Sequence[Any]) -> Rows:
    out = []
    for r in results:
        for s in r.extra.get("steps", []):
            lat = s.get("latency_ms") or {}
            proxy = s.get("proxy") or {}  # the step's own (None: missing), never the window's
            load = f"users={s['users']}" if "users" in s else f"rate={s.get('rate')}"
            out.append(
                {
                    "step": num(s.get("step")),
                    "load": load,
                    "requests": num(s.get("requests")),
                    "rps": num(s.get("rps"), 1),
                    "failures": num(s.get("failures")),
                    "p50": num(lat.get("p50"), 2),
                    "p90": num(lat.get("p90"), 2),
                    "p99": num(lat.get("p99"), 2),
                    "cpu": num(proxy.get("cpu_pct"), 1),
                    "rss": num(proxy.get("rss_kib_max"), 0),
                }
            )
    return out


def summary(report: dict[str, Any]) -> str | None:
    steps = (report.get("sections") or {}).get("steps")
    if not steps:
        return None
    return "\ningress steps\n" + text_table(COLUMNS, rows([SimpleNamespace(extra={"steps": steps})]))
