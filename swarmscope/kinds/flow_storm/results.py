"""Flow storm reconcile and report: generated against the kernel's per-flow counts.

    reconcile(cfg, outcome)   # WindowOutcome -> IterationResult
    sections(cfg, results)        # {"flow_storm": {"points": [...], ...}} for report.json

Per node and window, the worker's generator result (packets, bytes, flows, and which flows got
one packet more when ``max_s`` stopped it) against the ``flow_count`` reading: packets are the
three-number row (generated / kernel / reported by the flow agent under test), and bytes, flows and the
packets-per-flow histogram must be equal too. Any difference is ``harness-mismatch:<node>``
with the reason in ``extra["flows"][node]["problems"]``; ``flow.drops`` (a flow the kernel
table could not hold) is ``kernel-drops:<node>``: a failed run, never a figure.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from swarmscope.controller.model import (
    IterationResult,
    NodeCount,
    ProbeReading,
    WindowOutcome,
)
from swarmscope.controller.report import render_generic
from swarmscope.controller.sections import SectionHTML, register_section
from swarmscope.probes.flowdigest import DIGEST_BITS

if TYPE_CHECKING:
    from swarmscope.kinds.flow_storm import FlowStormConfig

GEN_FIELDS = ("generated", "bytes", "flows", "flows_asked", "rounds", "partial", "stopped", "rate",
              "elapsed_s", "retries", "veth_dropped", "dev", "digest", "free", "bursts")  # fmt: skip


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
    seen = digest = 0
    for r in rs:
        for c, v in r.counters.items():
            if c.startswith(pre) and c[len(pre) :] in out:
                out[c[len(pre) :]] = int(out[c[len(pre) :]] or 0) + int(v)
        for g, x in r.gauges.items():
            if g.startswith(pre + "hist."):
                k = int(g[len(pre) + 5 :])
                hist[k] = hist.get(k, 0) + int(x)
            elif g == pre + "seen":
                seen += int(x)
            elif g == pre + "digest":
                digest = (digest + int(x)) % (1 << DIGEST_BITS)
    out.update(hist=hist, seen=seen, digest=digest)
    return out


def agent_proc(readings: Sequence[ProbeReading], node: str) -> dict[str, float]:
    """The agent's CPU (% of one core) and largest RSS (KiB) in the window (procstat)."""
    for r in readings:
        if r.node == node and "proc.ticks" in r.gauges:
            g = r.gauges
            return {
                "cpu_pct": g.get("proc.cpu_pct", 0.0),
                "rss_kib": g.get("proc.rss_max_kib", 0.0),
                "ticks": g["proc.ticks"],
            }
    return {}


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
    if k["digest"] != int(gen.get("digest", -1)):  # flow by flow (probes/flowdigest.py)
        p.append(f"per-flow digest: sent {gen['digest']}, kernel {k['digest']}")
    if k["seen"] != int(gen["flows"]):
        p.append(f"kernel table held {k['seen']} flows, {gen['flows']} sent")
    if k["drops"]:
        p.append(f"kernel table full: {k['drops']} packets not counted per flow")
    return p


def reconcile(cfg: FlowStormConfig, outcome: WindowOutcome) -> IterationResult:
    """Per node: its generator's result against its own interface's counts (``dev``)."""
    window, point, results = outcome.window, outcome.point, outcome.results
    readings, missing_probes = outcome.readings, outcome.missing_probes
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
        agent = gen.get("agent") if gen is not None else None
        nc = NodeCount(
            node=node,
            generated=int(gen["generated"]) if gen is not None else None,
            kernel=k["packets"] if k is not None else None,
            reported=int(agent["packets"]) if agent else None,
            missing=missing,
            rate=float(gen["rate"]) if gen is not None and "rate" in gen else None,
        )
        per_node.append(nc)
        row: dict[str, Any] = {"kernel": k, "problems": [], "agent": agent}
        if agent:
            row["agent_proc"] = agent_proc(readings, node)
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
        elapsed = max((float(v.get("elapsed_s") or 0) for v in rows), default=0.0)  # none: locust -f
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
                "cache_timeout_s": r.params.get("cache_timeout_s"),
                "flows_per_s": flows / elapsed if elapsed else 0.0,  # ours: distinct 5-tuples sent
                "elapsed_s": elapsed,
                "packets_per_s": sum(float(v.get("rate") or 0) for v in rows),
                "per_flow_ok": bool(rows) and not any(v["problems"] for v in rows),
                **agent_point(rows),
            }
        )
        p = points[-1]
        if "exported_flows" in p:  # the write-up's flows/s: flows the agent captured (exported)
            p["captured_flows_per_s"] = p["exported_flows"] / elapsed if elapsed else 0.0
    out: dict[str, Any] = {
        "points": points,
        "packets_per_flow": cfg.packets_per_flow,
        "frame_bytes": cfg.frame_bytes,
    }
    if any(p.get("agent_cpu_pct") is not None for p in points):
        out["write_up_cpu"] = cpu_comparisons(points)
    return {"flow_storm": out}


# The write-up's CPU comparisons: (ours, against), (cacheMaxFlows, cacheTimeout) each, and its
# figure (docs/seeds.md's table). "runaway" is the run's last and smallest map under 2K.
WRITE_UP_CPU: tuple[tuple[str, tuple[int, float] | None, tuple[int, float], int], ...] = (
    ("2K vs 10K at 5 s", (2000, 5.0), (10000, 5.0), 40),
    ("runaway vs 10K at 5 s", None, (10000, 5.0), 457),  # None: the runaway
    ("runaway vs 2K at 1 s", None, (2000, 1.0), 143),
)


def cpu_comparisons(points: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The agent's CPU change as the write-up computed it (mean CPU of one point over another,
    as a %), where the run has both points at the write-up's timeouts; None where it has not."""
    cpu: dict[tuple[int, float], list[float]] = {}
    for p in points:
        if p.get("agent_cpu_pct") is not None and p.get("cache_timeout_s") is not None:
            key = (int(p["cache_max_flows"]), float(p["cache_timeout_s"]))
            cpu.setdefault(key, []).append(float(p["agent_cpu_pct"]))
    small = [k for k in cpu if k[0] < 2000]
    runaway = min(small) if small else None
    out = []
    for label, a, b, theirs in WRITE_UP_CPU:
        ka = runaway if a is None else a
        ours = None
        if ka in cpu and b in cpu and (base := sum(cpu[b]) / len(cpu[b])) > 0:
            ours = round((sum(cpu[ka]) / len(cpu[ka]) / base - 1) * 100, 1)
        out.append({"comparison": label, "ours_pct": ours, "write_up_pct": theirs, "runaway": runaway})
    return out


def agent_point(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The agents' figures of one window, summed over nodes (the write-up's dashboard), with
    every agent's per-flow counts; a real exporter (no map, no ring buffer) has its named
    losses instead of the map's figures."""
    ags = [(v["agent"], v.get("agent_proc") or {}) for v in rows if v.get("agent")]
    if not ags:
        return {}

    def total(*path: str) -> int:
        out = 0
        for a, _ in ags:
            x: Any = a
            for k in path:
                x = x.get(k, 0) if isinstance(x, Mapping) else 0
            out += int(x or 0)
        return out

    hm, rb = total("evicted_flows", "hashmap"), total("evicted_flows", "accounter")
    procs = [p for _, p in ags if p]
    out: dict[str, Any] = {
        "cache_max_flows": ags[0][0]["cache_max_flows"],
        "reported": total("packets"),
        "reported_bytes": total("bytes"),
        "reported_flows": total("flows"),
        "flow_records": total("records"),
        "agent_cpu_pct": sum(p["cpu_pct"] for p in procs) if procs else None,
        "agent_rss_mib": sum(p["rss_kib"] for p in procs) / 1024 if procs else None,
    }
    if any("per_flow" in a for a, _ in ags):
        out.update(
            {
                f"{k}_flows": total("per_flow", k)
                for k in ("missing", "split", "short", "over", "extra", "exact")
            }
        )
    if any("l3_bytes" in a for a, _ in ags):  # a real exporter: named losses, no map or ring buffer
        out.update({k: total(k) for k in ("l3_bytes", "pcap_dropped", "lost_export_packets", "unparsed")})
        return out
    out.update({
        "hashmap_evictions": total("evictions", "hashmap"),
        "early_evictions": total("early_hashmap_evictions"),
        "hashmap_flows": hm,
        "ringbuf_flows": rb,
        "ringbuf_hashmap_ratio": rb / hm if hm else None,
        "dropped_flows": total("dropped_flows"),
        "exported_flows": total("evicted_flows", "exporter"),
        # the write-up's buffer sizes, summed over the agents as its dashboard sums its pods
        "hashmap_unique": total("buffer_sizes", "hashmap-unique"),
        "hashmap_total": total("buffer_sizes", "hashmap-total"),
    })  # fmt: skip
    if all("evictions" in a.get("scraped", {}) for a, _ in ags):  # its /metrics, scraped
        shm = total("scraped", "evicted_flows", "hashmap")
        srb = total("scraped", "evicted_flows", "accounter")
        out.update({
            "scraped_hashmap_evictions": total("scraped", "evictions", "hashmap"),
            "scraped_ringbuf_hashmap_ratio": srb / shm if shm else None,
            "scraped_dropped_flows": total("scraped", "dropped_flows"),
        })  # fmt: skip
    return out


COLUMNS = (
    "flows", "iteration", "generated", "kernel", "bytes", "kernel_bytes", "kernel_flows",
    "kernel_drops", "flows_per_s", "captured_flows_per_s", "packets_per_s", "per_flow_ok", "cache_max_flows",
    "cache_timeout_s", "hashmap_unique", "hashmap_total", "reported",
    "reported_bytes", "flow_records", "hashmap_evictions", "early_evictions", "ringbuf_hashmap_ratio",
    "dropped_flows", "missing_flows", "split_flows", "short_flows", "exact_flows", "pcap_dropped",
    "lost_export_packets", "agent_cpu_pct", "agent_rss_mib",
)  # fmt: skip


# report.json keys that report.html heads with the write-up's own names (its dashboard's)
LABELS = {"hashmap_unique": "hashmap-unique", "hashmap_total": "hashmap-total"}


@register_section("flow_storm")
def render(name: str, data: Any, report: dict[str, Any]) -> SectionHTML:
    points = data.get("points", []) if isinstance(data, dict) else []
    order = sorted(
        points,
        key=lambda p: (
            p.get("flows", 0),
            -p.get("cache_max_flows", 0),
            -(p.get("cache_timeout_s") or 0),
            p.get("iteration", 0),
        ),
    )
    rows = [{LABELS.get(c, c): p.get(c) for c in COLUMNS if c in p} for p in order]
    table = render_generic(name, rows, report) if rows else SectionHTML("<p>no windows</p>")
    from swarmscope.kinds.flow_storm.plots import flow_plots

    cmp = data.get("write_up_cpu") if isinstance(data, dict) else None
    extra = ""
    if cmp:
        cells = "".join(
            f"<tr><td>{html.escape(str(c['comparison']))}</td>"
            f"<td>{'' if c['ours_pct'] is None else html.escape(str(c['ours_pct']))}"
            f"</td><td>+{html.escape(str(c['write_up_pct']))}</td></tr>"
            for c in cmp
        )
        extra = (
            "<h3>Agent CPU change, as the write-up computed it (%)</h3><p>flows_per_s is ours "
            "(distinct 5-tuples generated per second); captured_flows_per_s is the write-up's "
            "(flows the agent exported per second).</p>"
            f"<table><tr><th>comparison</th><th>here</th><th>write-up</th></tr>{cells}</table>"
        )
    return SectionHTML(
        html="<h2>Flow storm: generated against the kernel, per flow</h2>" + table.html + extra,
        plots=flow_plots(points),
    )
