"""What a run prints on the terminal, for every kind: a progress line per window, a summary.

    printer = IterationPrinter(kind, total=10)          # windows planned (0: unknown)
    events.iteration_done.add_listener(printer)         # "[users=100 iter 1] 1/10 eta 270s | ..."
    print(kind_summary(report))                         # the kind's one-screen table, or None

Each kind says what its line and its summary show (``Kind.console_cells``,
``Kind.console_summary``: the columns of its web UI tab, so terminal and tab say the same). The
summary is built from report.json's sections, so it also works on a stored report.

Values in them (node names, params, flags) come from workers and probes: control characters
are shown escaped, never sent to the terminal (core/printable.py).

Caveat: the line goes to stderr whether or not it is a terminal (CI logs keep it); the eta is
the mean window time so far times the windows left.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from swarmscope.core.printable import printable
from swarmscope.kinds import KINDS, get_kind


class IterationPrinter:
    """The iteration_done listener: one progress line per reconciled window."""

    def __init__(self, kind: Any, total: int = 0, out: TextIO | None = None):
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
        return printable(f"{head} | {self.kind.console_cells(result)}", lines=False)

    def __call__(self, *, result: Any, **_: Any) -> None:
        print(self.line(result, time.monotonic() - self.t0), file=self.out or sys.stderr, flush=True)


def kind_summary(report: dict[str, Any]) -> str | None:
    """The kind's one-screen table of a run (report.json), None when its lines say it all."""
    name = report.get("scenario")
    text = get_kind(name).console_summary(report) if name in KINDS else None
    return None if text is None else printable(text)
