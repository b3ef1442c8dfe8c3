"""The flow storm's figures (the write-up's dashboard), drawn from report.json's ``flow_storm``.

    flow_plots(section["points"])   # [Plot, ...]: bytes/s, flows/s, RB/HM ratio, CPU & RSS, runaway

One figure each, steps on the x axis in report order (label "flows/cacheMaxFlows"):
- captured bytes/s, the agent's reported against the kernel's, on one axis (frame bytes: a real
  exporter's L3 octets + 14 per packet, docs/flow_storm.md);
- generated 5-tuples/s (ours: distinct 5-tuples generated per second, not the write-up's flows
  captured per second);
- the ring buffer / hashmap ratio with the write-up's 0.05 line (reference agent only);
- the agent's CPU % and RSS against cache_max_flows (log axis; the mean over a point's windows);
- the runaway: flows evicted from the hashmap and through the ring buffer, and dropped flows,
  against cache_max_flows, with the points over the 0.05 line marked.
A figure whose figures are absent (no agent, a real exporter without a ring buffer) is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from swarmscope.controller.plots import Plot, figure_png, new_figure

RATIO_LINE = 0.05


def _label(p: dict[str, Any]) -> str:
    c = p.get("cache_max_flows")
    return (
        f"{p['flows']}"
        + (f"/{c}" if c else "")
        + (f" #{p['iteration']}" if p.get("iteration", 1) > 1 else "")
    )


def _fig(title: str, ylabel: str) -> tuple[Any, Any]:
    fig = new_figure(8, 3.6)
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return fig, ax


def _steps(ax: Any, pts: Sequence[dict[str, Any]]) -> list[int]:
    x = list(range(len(pts)))
    ax.set_xticks(x, [_label(p) for p in pts], rotation=30, ha="right", fontsize=8)
    ax.set_xlabel("step (flows/cacheMaxFlows)")
    return x


def _rate(p: dict[str, Any], key: str) -> float:
    s = float(p.get("elapsed_s") or 0)
    return float(p.get(key) or 0) / s if s else 0.0


def bytes_plot(pts: Sequence[dict[str, Any]]) -> Plot:
    fig, ax = _fig("Captured bytes/s: reported against kernel", "frame bytes/s")
    x = _steps(ax, pts)
    ax.plot(
        x, [_rate(p, "kernel_bytes") for p in pts], "o-", ms=10, mfc="none", color="#2a9d55", label="kernel"
    )
    if any("reported_bytes" in p for p in pts):
        ax.plot(x, [_rate(p, "reported_bytes") for p in pts], "s-", ms=5, color="#dd5a2b", label="reported")
    top = max([_rate(p, "kernel_bytes") for p in pts] + [_rate(p, "reported_bytes") for p in pts])
    ax.set_ylim(0, top * 1.15 or 1)  # from zero: a 1 % gap must look like 1 %
    ax.legend(loc="lower right")
    fig.tight_layout()
    return Plot("flow_bytes.png", "captured bytes/s, reported against kernel", figure_png(fig))


def flows_plot(pts: Sequence[dict[str, Any]]) -> Plot:
    fig, ax = _fig("Distinct 5-tuples generated per second (ours, not flows captured)", "distinct 5-tuples/s")
    x = _steps(ax, pts)
    ax.bar(x, [float(p.get("flows_per_s") or 0) for p in pts], color="#4c72b0")
    fig.tight_layout()
    return Plot("flow_flows_per_s.png", "generated 5-tuples/s (ours)", figure_png(fig))


def ratio_plot(pts: Sequence[dict[str, Any]]) -> Plot | None:
    if not any(p.get("ringbuf_hashmap_ratio") is not None for p in pts):
        return None
    fig, ax = _fig("Ring buffer / hashmap ratio", "ring-buffer flows / hashmap flows")
    x = _steps(ax, pts)
    ax.bar(x, [float(p.get("ringbuf_hashmap_ratio") or 0) for p in pts], color="#8172b3")
    ax.axhline(RATIO_LINE, color="#c44e52", ls="--", label="0.05: the write-up's runaway line")
    ax.legend()
    fig.tight_layout()
    return Plot("flow_ratio.png", "ring buffer / hashmap ratio", figure_png(fig))


def _by_cache(pts: Sequence[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    acc: dict[int, list[float]] = {}
    for p in pts:
        if p.get("cache_max_flows") and p.get(key) is not None:
            acc.setdefault(int(p["cache_max_flows"]), []).append(float(p[key]))
    xs = sorted(acc)
    return xs, [sum(acc[c]) / len(acc[c]) for c in xs]


def cpu_mem_plot(pts: Sequence[dict[str, Any]]) -> Plot | None:
    cx, cpu = _by_cache(pts, "agent_cpu_pct")
    mx, rss = _by_cache(pts, "agent_rss_mib")
    if not cx:
        return None
    fig, ax = _fig("Agent CPU and memory against cacheMaxFlows", "CPU % of one core")
    ax.plot(cx, cpu, "o-", color="#dd5a2b", label="CPU %")
    ax.set_xscale("log")
    ax.set_xlabel("cacheMaxFlows")
    ax.set_ylim(bottom=0)
    ax2 = ax.twinx()
    ax2.plot(mx, rss, "s--", color="#4c72b0", label="RSS MiB")
    ax2.set_ylabel("RSS MiB")
    ax2.set_ylim(bottom=0)
    lines = ax.get_lines() + ax2.get_lines()
    ax.legend(lines, [ln.get_label() for ln in lines], loc="lower right")
    fig.tight_layout()
    return Plot("flow_cpu_mem.png", "CPU and RSS against cacheMaxFlows", figure_png(fig))


def runaway_plot(pts: Sequence[dict[str, Any]]) -> Plot | None:
    cx, hm = _by_cache(pts, "hashmap_flows")
    if not cx:
        return None
    _, rb = _by_cache(pts, "ringbuf_flows")
    _, dropped = _by_cache(pts, "dropped_flows")
    _, ratio = _by_cache(pts, "ringbuf_hashmap_ratio")
    fig, ax = _fig("The runaway: the ring buffer takes over as the map shrinks", "flow entries per window")
    ax.plot(cx, hm, "o-", color="#2a9d55", label="evicted from the hashmap")
    ax.plot(cx, rb, "s-", color="#8172b3", label="through the ring buffer")
    ax.plot(cx, dropped, "x-", color="#c44e52", label="dropped (ring buffer full)")
    over = [c for c, r in zip(cx, ratio, strict=False) if r > RATIO_LINE]
    for c in over:
        ax.axvline(c, color="#c44e52", alpha=0.25, lw=8)
    ax.set_xscale("log")
    ax.set_xlabel("cacheMaxFlows (shaded: RB/HM over 0.05)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return Plot("flow_runaway.png", "the runaway", figure_png(fig))


def flow_plots(points: Sequence[dict[str, Any]]) -> list[Plot]:
    if not points:
        return []
    pts = list(points)
    made = [bytes_plot(pts), flows_plot(pts), ratio_plot(pts), cpu_mem_plot(pts), runaway_plot(pts)]
    return [p for p in made if p is not None]
