"""What a run prints on the terminal, for every kind: a progress line per window, a summary.

    printer = IterationPrinter("ingress_flood", total=10)   # windows planned (0: unknown)
    events.iteration_done.add_listener(printer)             # "[users=100 iter 1] 1/10 eta 270s | ..."
    print(kind_summary(report))                             # the steps / neighbor points table

The exec storm's line keeps its per-node generated / kernel / reported cells; the ingress
steps and the neighbor sweep print their own figures, the columns of the web UI's tab
(``swarmscope.app.webui.KINDS``), so terminal and tab say the same. The summary is the same table
over the whole run, built from report.json's sections, so it also works on a stored report.

Caveat: the line goes to stderr whether or not it is a terminal (CI logs keep it); the eta is
the mean window time so far times the windows left.
"""

from __future__ import annotations

import sys
import time
from types import SimpleNamespace
from typing import Any, TextIO

from swarmscope.app.webui import KINDS, Columns

# Columns the line leaves out: they are already in its "[params iter i]" prefix.
_IN_PREFIX = {"step", "load", "neighbors", "mode"}


def exec_cells(result: Any) -> str:
    cells = []
    for n in result.per_node:
        rep = "-" if n.reported is None else str(n.reported)
        mark = "" if n.harness_ok is not False else " MISMATCH"
        cells.append(f"{n.node}: gen {n.generated} kern {n.kernel} rep {rep}{mark}")
    return " | ".join(cells)


def figure_cells(kind: str, result: Any) -> str:
    """The kind's tab columns of one window, ``title value`` pairs, one group per row."""
    columns, rows_of = KINDS[kind]
    return " | ".join(
        ", ".join(f"{title} {row[key]}" for key, title in columns if key not in _IN_PREFIX)
        for row in rows_of([result])
    )


class IterationPrinter:
    """The iteration_done listener: one progress line per reconciled window."""

    def __init__(self, kind: str, total: int = 0, out: TextIO | None = None):
        self.kind, self.total, self.done = kind, total, 0
        self.out = out
        self.t0 = time.monotonic()

    def line(self, result: Any, elapsed_s: float) -> str:
        self.done += 1
        params = " ".join(f"{k}={v}" for k, v in result.params.items())
        head = f"[{params} iter {result.iteration}]"
        if self.total:
            left = max(self.total - self.done, 0)
            head += f" {self.done}/{self.total} eta {elapsed_s / self.done * left:.0f}s"
        cells = figure_cells(self.kind, result) if self.kind in KINDS and self.kind != "exec_storm" else ""
        return f"{head} | {cells or exec_cells(result)}"

    def __call__(self, *, result: Any, **_: Any) -> None:
        print(self.line(result, time.monotonic() - self.t0), file=self.out or sys.stderr, flush=True)


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return cell == "-"
    return True


def text_table(columns: Columns, rows: list[dict[str, str]]) -> str:
    """Columns of numbers (and "-" for none) right-aligned, the others left-aligned."""
    grid = [[title for _, title in columns], *[[r[k] for k, _ in columns] for r in rows]]
    widths = [max(len(line[i]) for line in grid) for i in range(len(columns))]
    numeric = [all(_is_number(r[k]) for r in rows) for k, _ in columns]
    out = []
    for line in grid:
        cells = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(line, widths, numeric, strict=True)]
        out.append("  " + "  ".join(cells).rstrip())
    return "\n".join(out)


def kind_summary(report: dict[str, Any]) -> str | None:
    """The one-screen table of an ingress flood (per step) or a neighbor sweep (per point)
    from report.json's sections; None for kinds whose console table says it all (exec)."""
    sections = report.get("sections") or {}
    if (sections.get("ebpf_cost") or {}).get("text"):  # pre-rendered in the write-up's columns
        return "\nebpf cost\n" + str(sections["ebpf_cost"]["text"])
    if report.get("scenario") == "ingress_flood" and sections.get("steps"):
        columns, rows_of = KINDS["ingress_flood"]
        title = "ingress steps"
        rows = rows_of([SimpleNamespace(extra={"steps": sections["steps"]})])
    elif report.get("scenario") == "neighbor_writes" and (sections.get("neighbors") or {}).get("points"):
        columns, rows_of = KINDS["neighbor_writes"]
        title = "neighbor sweep"
        rows = rows_of([SimpleNamespace(extra={"neighbors": p}) for p in sections["neighbors"]["points"]])
    else:
        return None
    return f"\n{title}\n{text_table(columns, rows)}"
