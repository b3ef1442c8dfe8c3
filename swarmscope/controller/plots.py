"""The report's PNG plots, drawn with matplotlib's Agg backend from a report.json dict.

    for plot in core_plots(report):
        open(plot.filename, "wb").write(plot.png)

Plots (only those the data supports are made):

- ``point<i>_counts.png`` — per point, generated / kernel / reported per window over the
  iterations (x = iteration 1..N): the exec-storm figure, for any metric;
- ``loss_vs_nodes.png`` — loss % (mean, with min..max bars) against the node count, across
  points that have a node count and a reported number; only for two node counts or more;
- ``point<i>_per_node.png`` — per point with more than one node, each node's totals (bars up
  to 16 nodes, marker lines beyond).

Caveat: figures are built with ``matplotlib.figure.Figure`` (no pyplot state), so plotting is
safe in a long-lived controller and never opens a window. Importing matplotlib costs ~0.5 s of
a run's wall time, so it is imported by the first figure drawn: a report with nothing to plot
(one window, one node) never loads it.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# One colour per number, the same in every plot and in the HTML.
COLORS = {"generated": "#4c72b0", "kernel": "#2a9d55", "reported": "#dd5a2b"}
BAR_NODES = 16  # up to this many nodes the per-node plot is grouped bars, beyond it lines


@dataclass
class Plot:
    filename: str  # written into the run directory; a plain name, no path
    title: str
    png: bytes


def new_figure(width: float, height: float) -> Figure:
    """A fresh figure (matplotlib imported here, on the first one drawn)."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def figure_png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    # Software metadata off: the same data draws byte-identical PNGs (easier to diff runs).
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()


def point_label(point: dict[str, Any]) -> str:
    params = ", ".join(f"{k}={v}" for k, v in point.get("params", {}).items())
    return f"point {point['index']}" + (f" ({params})" if params else "")


def counts_plot(point: dict[str, Any], metric: str) -> Plot | None:
    its = point.get("iterations", [])
    if len(its) < 2:
        return None  # one window is one dot on a made-up axis: its figures are in the table
    x = list(range(1, len(its) + 1))
    fig = new_figure(8, 4)
    ax = fig.add_subplot()
    # generated and kernel usually coincide: a big hollow marker under a small filled one
    # keeps both visible.
    styles = {"generated": ("--", "o", 8), "kernel": ("-", "s", 4), "reported": (":", "^", 5)}
    drawn = 0
    for name, (ls, marker, size) in styles.items():
        ys = [it.get(name) for it in its]
        if all(y is None for y in ys):
            continue
        # None becomes NaN: a gap in the line where a source was missing, not a fake zero.
        ax.plot(
            x,
            [float("nan") if y is None else y for y in ys],
            linestyle=ls,
            marker=marker,
            markersize=size,
            markerfacecolor="none" if name == "generated" else COLORS[name],
            color=COLORS[name],
            label=name,
        )
        drawn += 1
    if not drawn:
        return None
    ax.set_xlabel("iteration")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(f"{metric} per window")
    ax.set_title(f"{point_label(point)}: generated / kernel / reported")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    return Plot(f"point{point['index']}_counts.png", f"{point_label(point)} per iteration", figure_png(fig))


def percent_axis(ax: Any, top_pct: float) -> None:
    """A y axis of percents from 0: ticks say so ("5%"), and an all-zero series gets 0..1 %
    rather than matplotlib's default 0..0.05, which read as a ratio under a "loss %" label."""
    from matplotlib.ticker import PercentFormatter

    ax.yaxis.set_major_formatter(PercentFormatter(xmax=100))
    ax.set_ylim(bottom=0, top=max(1.0, top_pct * 1.05))


def loss_vs_nodes_plot(points: list[dict[str, Any]]) -> Plot | None:
    rows = []
    for p in points:
        s = p.get("summary", {}).get("loss_ratio", {})
        if isinstance(p.get("nodes"), int) and s.get("n"):
            rows.append((p["nodes"], s["mean"] * 100, s["min"] * 100, s["max"] * 100))
    # One node count draws a lone dot, not a trend: no plot (the summary table has the number).
    if len({r[0] for r in rows}) < 2:
        return None
    rows.sort()
    xs = [r[0] for r in rows]
    means = [r[1] for r in rows]
    err = [[r[1] - r[2] for r in rows], [r[3] - r[1] for r in rows]]
    fig = new_figure(7, 4)
    ax = fig.add_subplot()
    ax.errorbar(xs, means, yerr=err, marker="o", capsize=4, color=COLORS["reported"], label="mean (min..max)")
    ax.set_xlabel("nodes")
    ax.set_ylabel("loss (1 - reported / kernel)")
    ax.set_title("loss vs node count")
    ax.set_xticks(xs)
    percent_axis(ax, max(r[3] for r in rows))
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return Plot("loss_vs_nodes.png", "loss % vs node count", figure_png(fig))


def per_node_plot(point: dict[str, Any], metric: str) -> Plot | None:
    nodes = point.get("per_node", [])
    if len(nodes) < 2:
        return None
    names = [n["node"] for n in nodes]
    series = [k for k in ("generated", "kernel", "reported") if any(n.get(k) is not None for n in nodes)]
    if not series:
        return None
    xs = list(range(len(names)))
    if len(names) <= BAR_NODES:
        width = 0.8 / len(series)
        fig = new_figure(min(14.0, max(7.0, 0.4 * len(names) * len(series) + 2)), 4)
        ax = fig.add_subplot()
        for i, key in enumerate(series):
            ax.bar(
                [j + (i - (len(series) - 1) / 2) * width for j in xs],
                [n.get(key) or 0 for n in nodes],
                width=width,
                color=COLORS[key],
                label=key,
            )
        ax.set_xticks(xs)
        many = len(names) > 6
        ax.set_xticklabels(names, rotation=45 if many else 0, ha="right" if many else "center")
    else:
        # Too many nodes for readable bars: one marker line per number, every k-th name shown.
        fig = new_figure(12, 4)
        ax = fig.add_subplot()
        for key in series:
            ys = [float("nan") if n.get(key) is None else n[key] for n in nodes]
            ax.plot(xs, ys, marker=".", linestyle="-", linewidth=0.8, color=COLORS[key], label=key)
        step = max(1, len(names) // 32)
        ax.set_xticks(xs[::step])
        ax.set_xticklabels(names[::step], rotation=90, fontsize=7)
        ax.set_xlim(-0.5, len(names) - 0.5)
        ax.set_ylim(bottom=0)
    ax.set_ylabel(f"{metric}, sum over iterations")
    ax.set_title(f"{point_label(point)}: per node")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_ylim(top=ax.get_ylim()[1] * 1.15)  # room for the legend above the bars
    ax.legend(loc="upper right", ncol=len(series))
    fig.tight_layout()
    return Plot(f"point{point['index']}_per_node.png", f"{point_label(point)} per node", figure_png(fig))


def core_plots(report: dict[str, Any]) -> dict[str, Plot]:
    """Every core plot the report's data supports, keyed by filename, in display order."""
    metric = report.get("metric") or "count"
    out: dict[str, Plot] = {}
    loss = loss_vs_nodes_plot(report.get("points", []))
    if loss:
        out[loss.filename] = loss
    for p in report.get("points", []):
        for plot in (counts_plot(p, metric), per_node_plot(p, metric)):
            if plot:
                out[plot.filename] = plot
    return out
