"""The neighbor section's summary: one row per (mode, N), medians over the repeated windows.

    rows = summarize(points)   # [{"mode", "neighbors", "repeats", "per_neighbor_us", ...}]

Each figure is the median over the point's windows (``repeats``), next to Arion's published
one (``arion_per_neighbor_us``, ``arion_total_ms``) and the ratio Arion / ours (> 1: we are
faster). ``programming_ms`` = list + program − watch only at the same N (the write-up's
"overhead of 100k ebpf rule programming" = 601.4 − 380 ms). The master side's own latencies
(get, write, watch per state) are medians too, with Arion's figures in ``ARION_MASTER_US``.
A row is ``verified`` only when every window of it was.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from swarmscope.kinds.neighbor_writes.arion import ARION_MASTER_US, ARION_US

MEDIANS = (
    "total_ms",
    "per_neighbor_us",
    "p50_us",
    "p99_us",
    "master_get_us",
    "master_write_us",
    "watch_p50_us",
    "watch_per_state_us",
    "commit_p50_us",
    "commit_to_datapath_p50_us",
)


def _median(vals: Sequence[Any]) -> float | None:
    xs = [float(v) for v in vals if v is not None]
    return round(statistics.median(xs), 4) if xs else None


def summarize(points: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for p in points:
        groups.setdefault((str(p["mode"]), int(p["neighbors"])), []).append(p)
    rows = []
    for (mode, n), ps in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        row: dict[str, Any] = {"mode": mode, "neighbors": n, "repeats": len(ps)}
        row["durability"] = str(ps[0].get("durability") or "fsync")
        for key in MEDIANS:
            row[key] = _median([p.get(key) for p in ps])
        arion = ARION_US.get(mode, {}).get(n)
        ours = row["per_neighbor_us"]
        row["arion_per_neighbor_us"] = arion
        row["arion_total_ms"] = round(arion * n / 1000, 4) if arion else None
        row["arion_over_ours"] = round(arion / ours, 2) if arion and ours else None
        row["beats_arion"] = None if not arion or ours is None else ours < arion
        row["verified"] = all(p.get("verified") for p in ps)
        row["kernel_entries"] = [p.get("kernel_entries") for p in ps]
        rows.append(row)
    by = {(r["mode"], r["neighbors"]): r for r in rows}
    for (mode, n), r in by.items():
        w = by.get(("watch_only", n))
        if mode == "list_program" and w and r["total_ms"] is not None and w["total_ms"] is not None:
            r["programming_ms"] = round(r["total_ms"] - w["total_ms"], 4)
    return rows


def master_reference() -> dict[str, float]:
    return dict(ARION_MASTER_US)
