"""The neighbor section's summary: one row per (mode, N), medians over the repeated windows.

    rows = summarize(points)   # [{"mode", "neighbors", "repeats", "per_neighbor_us", ...}]

Each figure is the median over the point's windows (``repeats``), next to Arion's
(``arion_per_neighbor_us`` with ``arion_per_neighbor_source``: published or derived;
``arion_total_ms``: the overall latency as published) and the ratio Arion / ours (> 1: we are
faster). ``like_for_like`` says whether the point is Arion's workload (write + watch + program:
only with per-neighbor writes, ``batch_size`` 1); ``beats_arion`` is set only where it is and
every window of the row was verified, and
``arion_over_ours`` is still given elsewhere, labelled by ``workload``. ``programming_ms`` =
list + program − watch only at the same N (the write-up's "overhead of 100k ebpf rule
programming" = 601.4 − 380 ms). The master side's own latencies are medians too, with Arion's
published figures in ``ARION_MASTER_US``. A row is ``verified`` only when every window of it was.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from swarmscope.kinds.neighbor_writes.arion import (
    ARION_NOTES,
    ARION_TOTAL_MS,
    like_for_like,
    per_neighbor,
)

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
    "rtt_grpc_p50_us",  # agent -> control plane (transport grpc): docs/cluster.md
    "rtt_tcp_us",
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
        row["control_plane"] = ps[0].get("control_plane")
        for key in MEDIANS:
            row[key] = _median([p.get(key) for p in ps])
        arion, source = per_neighbor(mode, n)
        ours = row["per_neighbor_us"]
        batch = ps[0].get("batch_size")
        same = like_for_like(mode, batch)
        row["batch_size"] = batch
        row["workload"] = _workload(mode, batch)
        row["arion_per_neighbor_us"] = arion
        row["arion_per_neighbor_source"] = source
        row["arion_total_ms"] = ARION_TOTAL_MS.get(mode, {}).get(n)  # as published
        if (mode, n) in ARION_NOTES:
            row["arion_note"] = ARION_NOTES[(mode, n)]
        row["arion_over_ours"] = round(arion / ours, 2) if arion and ours else None
        row["like_for_like"] = same
        row["verified"] = all(p.get("verified") for p in ps)
        # counted only like for like, and only when every window of the row was verified
        counted = arion and ours is not None and same and row["verified"]
        row["beats_arion"] = ours < arion if counted else None
        row["kernel_entries"] = [p.get("kernel_entries") for p in ps]
        rows.append(row)
    by = {(r["mode"], r["neighbors"]): r for r in rows}
    for (mode, n), r in by.items():
        w = by.get(("watch_only", n))
        if mode == "list_program" and w and r["total_ms"] is not None and w["total_ms"] is not None:
            r["programming_ms"] = round(r["total_ms"] - w["total_ms"], 4)
    return rows


def _workload(mode: str, batch: Any) -> str:
    if mode != "write_watch_program":
        return "list + program" if mode == "list_program" else "watch only"
    if batch == 1:
        return "per-neighbor writes (Arion's)"
    return f"batched writes, {batch} per commit (ours)"
