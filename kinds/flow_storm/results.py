"""Flow storm reconcile and report: generated against the kernel's per-flow counts.

    reconcile(cfg, window, point, results, readings, missing)  # IterationResult
    sections(cfg, results)        # {"flow_storm": {"points": [...], ...}} for report.json

Per node and window, the worker's generator result (packets, bytes, flows, and which flows got
one packet more when ``max_s`` stopped it) against the ``flow_count`` reading: packets are the
three-number row (generated / kernel / reported; nothing reports yet), and bytes, flows and the
packets-per-flow histogram must be equal too. Any difference is ``harness-mismatch:<node>``
with the reason in ``extra["flows"][node]["problems"]``; ``flow.drops`` (a flow the kernel
table could not hold) is ``kernel-drops:<node>``: a failed run, never a figure.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from swarmscope.controller.model import IterationResult, NodeCount, PointInfo, ProbeReading, WindowInfo
from swarmscope.controller.report import SectionHTML, register_section

if TYPE_CHECKING:
    from swarmscope.kinds.flow_storm import FlowStormConfig

GEN_FIELDS = ("generated", "bytes", "flows", "flows_asked", "rounds", "partial", "stopped", "rate",
              "elapsed_s", "retries", "veth_dropped", "dev")  # fmt: skip


def shares(n: int, nodes: list[str]) -> dict[str, list[int]]:
    """Split N flows over the nodes in name order: {node: [first flow, count]}, disjoint."""
    k = max(1, len(nodes))
    out, at = {}, 0
    for i, node in enumerate(sorted(nodes)):
        c = n // k + (1 if i < n % k else 0)
        out[node] = [at, c]
        at += c
    return out


def expected_hist(gen: Mapping[str, Any]) -> dict[int, int]:
    """Flows per packet count the generator sent: every flow ``rounds``, the first ``partial``
    one more (a generator stopped by max_s)."""
    rounds, partial, asked = (
        int(gen.get("rounds", 0)),
        int(gen.get("partial", 0)),
        int(gen.get("flows_asked", 0)),
    )
    out = {rounds + 1: partial, rounds: asked - partial}
    return {k: v for k, v in out.items() if k > 0 and v > 0}


def kernel_view(rs: Sequence[ProbeReading], dev: str) -> dict[str, Any]:
    """The flow_count figures of one receiving interface (``flow.dev.<dev>.*``) in readings."""
    pre = f"flow.dev.{dev}."
    out: dict[str, Any] = {"packets": None, "bytes": None, "flows": None, "drops": 0, "other": 0}
    hist: dict[int, int] = {}
    seen = 0
    for r in rs:
        for c, v in r.counters.items():
            if c.startswith(pre) and c[len(pre) :] in out:
                out[c[len(pre) :]] = int(out[c[len(pre) :]] or 0) + int(v)
        for g, v in r.gauges.items():
            if g.startswith(pre + "hist."):
                k = int(g[len(pre) + 5 :])
                hist[k] = hist.get(k, 0) + int(v)
            elif g == pre + "seen":
                seen += int(v)
    out.update(hist=hist, seen=seen)
    return out


def check_node(gen: Mapping[str, Any], k: Mapping[str, Any]) -> list[str]:
    """Every difference between what one node's generator sent and its interface's counts."""
    p: list[str] = []
    if int(gen["bytes"]) != k["bytes"]:
        p.append(f"bytes: generated {gen['bytes']}, kernel {k['bytes']}")
    if gen.get("free"):  # locust -f: bursts repeat the same flows; packets and bytes only
        return p + ([f"kernel table full: {k['drops']} packets"] if k["drops"] else [])
    if int(gen["flows"]) != k["flows"]:
        p.append(f"flows: generated {gen['flows']}, kernel {k['flows']}")
    want = expected_hist(gen)
    if k["hist"] != want:
        p.append(f"packets per flow: sent {want}, kernel {k['hist']}")
    if k["seen"] != int(gen["flows"]):
        p.append(f"kernel table held {k['seen']} flows, {gen['flows']} sent")
    if k["drops"]:
        p.append(f"kernel table full: {k['drops']} packets not counted per flow")
    return p


def reconcile(
    cfg: FlowStormConfig,
    window: WindowInfo,
    point: PointInfo,
    results: dict[str, dict[str, Any]],
    readings: list[ProbeReading],
    missing_probes: list[str],
) -> IterationResult:
    """Per node: its generator's result against its own interface's counts (``dev``)."""
    per_node: list[NodeCount] = []
    flags: list[str] = []
    per: dict[str, Any] = {}
    for node in window.nodes:
        gen = results.get(node)
        rs = [r for r in readings if r.node == node and "flow.packets" in r.counters]
        k = kernel_view(rs, str(gen.get("dev", ""))) if gen is not None and rs else None
        if k is not None and k["packets"] is None:
            k = None  # no probe counted this node's interface (not on this machine?)
        missing = ([] if gen is not None else ["worker"]) + ([] if rs and (k or gen is None) else ["probe"])
        nc = NodeCount(
            node=node,
            generated=int(gen["generated"]) if gen is not None else None,
            kernel=k["packets"] if k is not None else None,
            missing=missing,
            rate=float(gen["rate"]) if gen is not None and "rate" in gen else None,
        )
        per_node.append(nc)
        row: dict[str, Any] = {"kernel": k, "problems": []}
        if gen is not None and gen.get("errors"):
            flags.append(f"worker-error:{node}:{gen['errors'][0]}")
        elif gen is not None and k is not None:
            row.update({f: gen.get(f) for f in GEN_FIELDS})
            row["problems"] = check_node(gen, k)
            if k["drops"]:
                flags.append(f"kernel-drops:{node}")
        if nc.harness_ok is False or row["problems"]:
            flags.append(f"harness-mismatch:{node}")
        if missing:
            flags.append(f"missing:{node}:{','.join(missing)}")
        flags += [f"probe-error:{node}:{r.error}" for r in readings if r.node == node and r.error]
        per[node] = row
    extra: dict[str, Any] = {"flows": per}
    if missing_probes:
        extra["missing_probes"] = list(missing_probes)
    return IterationResult.for_window(window, point, per_node, flags, extra)


def sections(cfg: FlowStormConfig, results: Sequence[IterationResult]) -> dict[str, Any]:
    points: list[dict[str, Any]] = []
    for r in results:
        rows = [v for v in r.extra.get("flows", {}).values() if v.get("kernel") and "generated" in v]
        elapsed = max((float(v["elapsed_s"]) for v in rows), default=0.0)
        flows = sum(int(v["flows"]) for v in rows)
        points.append(
            {
                "flows": int(r.params.get("flows", 0)),
                "iteration": r.iteration,
                "generated": sum(int(v["generated"]) for v in rows),
                "kernel": sum(int(v["kernel"]["packets"] or 0) for v in rows),
                "bytes": sum(int(v["bytes"]) for v in rows),
                "kernel_bytes": sum(int(v["kernel"]["bytes"] or 0) for v in rows),
                "kernel_flows": sum(int(v["kernel"]["flows"] or 0) for v in rows),
                "kernel_drops": sum(int(v["kernel"]["drops"]) for v in rows),
                "flows_per_s": flows / elapsed if elapsed else 0.0,
                "packets_per_s": sum(float(v["rate"]) for v in rows),
                "per_flow_ok": bool(rows) and not any(v["problems"] for v in rows),
            }
        )
    return {
        "flow_storm": {
            "points": points,
            "packets_per_flow": cfg.packets_per_flow,
            "frame_bytes": cfg.frame_bytes,
        }
    }


COLUMNS = (
    "flows", "iteration", "generated", "kernel", "bytes", "kernel_bytes", "kernel_flows",
    "kernel_drops", "flows_per_s", "packets_per_s", "per_flow_ok",
)  # fmt: skip


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.1f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return html.escape(str(v))


@register_section("flow_storm")
def render(name: str, data: Any, report: dict[str, Any]) -> SectionHTML:
    points = data.get("points", []) if isinstance(data, dict) else []
    head = "".join(f"<th>{c}</th>" for c in COLUMNS)
    rows = "".join(
        "<tr>" + "".join(f"<td>{_cell(p.get(c, ''))}</td>" for c in COLUMNS) + "</tr>"
        for p in sorted(points, key=lambda p: (p.get("flows", 0), p.get("iteration", 0)))
    )
    return SectionHTML(
        html="<h2>Flow storm: generated against the kernel, per flow</h2>"
        f"<table><tr>{head}</tr>{rows}</table>"
    )
