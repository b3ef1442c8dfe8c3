"""What the neighbor sweep shows live (web UI tab, progress lines) and in its terminal summary:
one row per point — µs per neighbor next to Arion's figure, p99; a ``locust -f`` window shows the
entries written and the batch latency instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from swarmscope.controller.tables import Columns, Rows, num, text_table

COLUMNS: Columns = [
    ("neighbors", "Neighbors"),
    ("mode", "Mode"),
    ("perneighbor", "µs / neighbor"),
    ("arion", "Arion µs / neighbor"),
    ("p99", "p99 µs"),
    ("entries", "Entries written"),
    ("batchp99", "Batch p99 ms"),
]


def rows(results: Sequence[Any]) -> Rows:
    out = []
    for r in results:
        p = r.extra.get("neighbors") or {}
        free = r.extra.get("locust") or {}
        out.append(
            {
                "neighbors": num(p.get("neighbors")),
                "mode": str(p.get("mode", "locust -f")),
                "perneighbor": num(p.get("per_neighbor_us"), 3),
                "arion": _arion(p),
                "p99": num(p.get("p99_us"), 1),
                "entries": num(free.get("entries_written", p.get("generated"))),
                "batchp99": num((free.get("batch_latency_ms") or {}).get("p99"), 2),
            }
        )
    return out


def _arion(p: dict[str, Any]) -> str:
    """Arion's figure, labelled where it is derived or the workload is ours (batched writes)."""
    cell = num(p.get("arion_per_neighbor_us"), 3)
    if p.get("arion_per_neighbor_source") == "derived":
        return f"{cell} (derived)"
    if p.get("mode") == "write_watch_program" and p.get("arion_per_neighbor_us") and p.get("batch_size") != 1:
        return f"{cell} (per-neighbor writes; ours batched)"
    return str(cell)


def summary(report: dict[str, Any]) -> str | None:
    points = ((report.get("sections") or {}).get("neighbors") or {}).get("points")
    if not points:
        return None
    table = text_table(COLUMNS, rows([SimpleNamespace(extra={"neighbors": p}) for p in points]))
    return "\nneighbor sweep\n" + table
