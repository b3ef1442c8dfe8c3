"""Tables a person reads: the columns and rows the web UI's tab, the terminal's progress lines and
the run's summary share, so tab and terminal say the same.

    rows = three_number_rows(results)           # per node and window: generated, kernel, ...
    print(text_table(THREE_NUMBER_COLUMNS, rows))

A kind says what it shows through :class:`swarmscope.kinds.base.Kind` (``live_columns``,
``live_rows``, ``console_summary``); the defaults here fit a counted kind (the three numbers).
Numbers are formatted as report.json has them, with thousands separators for counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Columns = list[tuple[str, str]]  # (row key, column title)
Rows = list[dict[str, str]]

THREE_NUMBER_COLUMNS: Columns = [
    ("window", "Window"),
    ("node", "Node"),
    ("generated", "Generated"),
    ("kernel", "Kernel"),
    ("reported", "Reported"),
    ("loss", "Loss %"),
    ("harness", "Generated = kernel"),
]


def num(v: Any, digits: int | None = None) -> str:
    """A cell as the CLI prints numbers: "-" for none, thousands separated, floats to ``digits``
    places (``12,345``, ``3,013.0``); anything else as it is."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float) and digits is not None:
        return f"{v:,.{digits}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def loss_pct(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio * 100:.4f}"


def three_number_rows(results: Sequence[Any]) -> Rows:
    """One row per node and window: generated, kernel, reported, loss and the harness check."""
    rows = []
    for r in results:
        for n in r.per_node:
            ok = n.harness_ok
            rows.append(
                {
                    "window": f"{r.point}.{r.iteration}",
                    "node": n.node,
                    "generated": num(n.generated),
                    "kernel": num(n.kernel),
                    "reported": num(n.reported),
                    "loss": loss_pct(n.loss_ratio),
                    "harness": "-" if ok is None else ("yes" if ok else "MISMATCH"),
                }
            )
    return rows


def three_number_cells(result: Any) -> str:
    """A window's progress-line cells: ``node: gen G kern K rep R`` per node."""
    cells = []
    for n in result.per_node:
        rep = "-" if n.reported is None else str(n.reported)
        mark = "" if n.harness_ok is not False else " MISMATCH"
        cells.append(f"{n.node}: gen {n.generated} kern {n.kernel} rep {rep}{mark}")
    return " | ".join(cells)


def _is_number(cell: str) -> bool:
    try:
        float(cell.replace(",", ""))
    except ValueError:
        return cell == "-"
    return True


def text_table(columns: Columns, rows: Rows) -> str:
    """Columns of numbers (and "-" for none) right-aligned, the others left-aligned."""
    grid = [[title for _, title in columns], *[[r[k] for k, _ in columns] for r in rows]]
    widths = [max(len(line[i]) for line in grid) for i in range(len(columns))]
    numeric = [all(_is_number(r[k]) for r in rows) for k, _ in columns]
    out = []
    for line in grid:
        cells = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(line, widths, numeric, strict=True)]
        out.append("  " + "  ".join(cells).rstrip())
    return "\n".join(out)
