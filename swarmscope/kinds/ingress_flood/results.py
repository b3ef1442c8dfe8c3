"""The ingress flood's controller side: one window reconciled, and the run's report sections.

    result = reconcile_window(cfg, window, point, results, readings, missing_probes)
    result.extra["steps"]     # [{"step", "users"|"rate", "requests", "latency_ms", "proxy", ...}]
    sections = build_sections(cfg, results, run_dir)   # {"steps", "faults", "ingress"} + PNGs

Per node: generated = the worker's successful requests (kernel: none, this kind counts no
kernel events; reported: none per node). Per window: the workers' HdrHistograms merged exactly
(added, never averaged), the target's access-log lines (``server_requests``, None for a remote
host) and ``server-mismatch`` when they differ from the successes, pidstat's rows of each proxy
process per second (the probe's ``procstat`` samples, ``proxy_per_second``), and from those
rows alone each step's proxy CPU/RSS (``proxy``) and row per process (``proxy_processes``),
and the fault records the target worker sent back.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from swarmscope.controller.model import (
    IterationResult,
    NodeCount,
    PointInfo,
    ProbeReading,
    WindowOutcome,
)
from swarmscope.kinds.ingress_flood.config import IngressConfig
from swarmscope.probes.programs.procstat import COLUMNS
from swarmscope.probes.programs.procstat import SERIES as PROC_SERIES
from swarmscope.workers.http_stats import StepRecorder

SIZES = ("VSZ", "RSS", "%MEM")  # pidstat's columns that are sizes (the rest are rates)


def proxy_per_second(
    readings: list[ProbeReading], master: int | None, span: tuple[float, float] | None = None
) -> list[dict[str, Any]]:
    """pidstat's rows of a window: one per proxy process per second (the probe's procstat
    ticks), in time order, the master first within a second: ``time`` (HH:MM:SS, local, as
    pidstat prints it), ``t_ns`` (the tick's end), ``pid``, ``role``, ``comm`` and COLUMNS.
    With ``span`` (wall seconds), only the ticks whose middle falls in it: one step's of a
    window holding several (locust -f), each tick in at most one step."""

    def ticks(r: ProbeReading) -> list[Any]:
        return [s for s in r.samples if s.series == PROC_SERIES and _within(s, span)]

    # every node reads all chosen processes: the reading with the most rows tells it
    best = max((ticks(r) for r in readings), key=len, default=[])
    rows = []
    for s in best:
        pid = int(s.labels["pid"])
        row: dict[str, Any] = {"time": time.strftime("%H:%M:%S", time.localtime(s.end_ns / 1e9)),
                               "t_ns": s.end_ns, "pid": pid, "role": "master" if pid == master else "worker",
                               "comm": s.labels.get("comm", "")}  # fmt: skip
        row.update({col: float(s.labels[col]) for col in COLUMNS})
        rows.append(row)
    return sorted(rows, key=lambda r: (r["t_ns"], r["pid"] != master, r["pid"]))


def _within(s: Any, span: tuple[float, float] | None) -> bool:
    return span is None or span[0] <= (s.start_ns + s.end_ns) / 2e9 <= span[1]


def proxy_of_rows(per_second: list[dict[str, Any]]) -> dict[str, float] | None:
    """A step's proxy figures from its rows per second: CPU % the mean over ticks of the
    per-tick sum, RSS the largest per-tick sum, ``processes`` the pids seen (None: no tick in
    the step, so the proxy is missing from it, not idle)."""
    by_tick: dict[int, list[dict[str, Any]]] = {}
    for r in per_second:
        by_tick.setdefault(int(r["t_ns"]), []).append(r)
    if not by_tick:
        return None
    n = len(by_tick)
    out = {k: sum(float(r[col]) for rs in by_tick.values() for r in rs) / n
           for k, col in (("cpu_pct", "%CPU"), ("usr_pct", "%usr"), ("sys_pct", "%system"))}  # fmt: skip
    out["rss_kib_max"] = max(sum(float(r["RSS"]) for r in rs) for rs in by_tick.values())
    out["processes"] = float(len({r["pid"] for r in per_second}))
    out["ticks"] = float(n)
    return out


def proxy_processes(per_second: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The step's row per process from its rows per second: rates and percentages the mean over
    the seconds, sizes the largest (master first, as the rows come)."""
    by_pid: dict[int, list[dict[str, Any]]] = {}
    for r in per_second:
        by_pid.setdefault(int(r["pid"]), []).append(r)
    out = []
    for pid, rs in sorted(by_pid.items(), key=lambda kv: (kv[1][0]["role"] != "master", kv[0])):
        row: dict[str, Any] = {"pid": pid, "role": rs[0]["role"]}
        for col in COLUMNS:
            vals = [float(r[col]) for r in rs]
            row[col] = max(vals) if col in SIZES else sum(vals) / len(vals)
        out.append(row)
    return out


def reconcile_window(cfg: IngressConfig, outcome: WindowOutcome) -> IterationResult:
    window, point, results = outcome.window, outcome.point, outcome.results
    readings, missing_probes = outcome.readings, outcome.missing_probes
    flags: list[str] = []
    per_node = []
    for node in window.nodes:
        r = results.get(node)
        per_node.append(
            NodeCount(node=node, generated=None if r is None else int(r["generated"]), kernel=None,
                      missing=[] if r is not None else ["worker"])
        )  # fmt: skip
        if r is None:
            flags.append(f"missing:{node}:worker")
    got = [results[n] for n in window.nodes if n in results]
    blobs = {n: results[n]["recorder"] for n in window.nodes if n in results}
    key = "rate" if cfg.model == "open" else "users"
    master = _master(got)
    whole = proxy_per_second(readings, master)  # the window's rows: a swept step's are these
    # procstat answered for the window (its gauges come with every reading it makes, even one
    # that matched no process): without it the proxy is missing once, for the window.
    read = any("proc.ticks" in r.gauges for r in readings)
    rows: list[dict[str, Any]] = []
    merged = StepRecorder.merge(blobs.values()) if blobs else None
    if merged is not None:
        rows = merged.summary(cfg.generator_bound_pct)
    swept = key in point.params
    if swept:  # swarmscope run: this window is one step, the point's
        if not rows:
            rows = [{"step": 0, "requests": 0, "failures": 0, "rps": 0.0, "generator_bound": False}]
        rows[0]["step"] = point.index
        rows[0][key] = point.params[key]
        _step_proxy(rows[0], whole, read, flags)
        reps = next((int(r["backends"]) for r in got if r.get("backends") is not None), None)
        if reps is not None:  # the local target: the replicas that served this step
            rows[0]["backends"] = reps
        if "request_count" in point.params:  # boom's -n: the count asked, the time it took
            _count_row(cfg, rows[0], int(point.params["request_count"]), got, flags)
    else:  # locust -f: one window holds every step StepShape ran
        _free_run_rows(cfg, rows, merged, got, flags)
        for row in rows:  # each step's proxy: the window's ticks within it
            st = merged.steps.get(int(row["step"])) if merged is not None else None
            span = (st.first_t, st.last_t) if st is not None and st.first_t <= st.last_t else (0.0, -1.0)
            _step_proxy(row, proxy_per_second(readings, master, span), read, flags)
    for row in rows:
        if row.get("generator_bound"):
            flags.append(f"generator-bound:step{row['step']}")
    successes = sum(int(r["generated"]) for r in got)
    servers = [int(r["server_requests"]) for r in got if r.get("server_requests") is not None]
    server = sum(servers) if servers else None
    faults = [f for r in got for f in r.get("faults", [])]
    struck = [n for r in got for n in r.get("faults_struck", [])]
    cut = _cut_by_kill(cfg, point, struck, successes, server, len(got))
    if cut:
        flags.append(f"server-log-cut-by-kill:{cut} answered requests unlogged (SIGKILL after the reply)")
    elif server is not None and server != successes:
        flags.append(f"server-mismatch:client {successes} != server {server}")
    if not read:
        flags.append("missing:proxy:probe")
    for rd in readings:
        if rd.error:
            flags.append(f"probe-error:{rd.node}:{rd.error}")
    target = next((r for r in got if "server_requests" in r or "url" in r), {})
    extra: dict[str, Any] = {
        "steps": rows,
        "requests": sum(int(r["requests"]) for r in got),
        # Sent outside the load (the preflight, before the first window): counted once, in the
        # first window the target's worker reports, so requests + these = the server's log.
        "preflight_requests": sum(int(r.get("preflight_requests", 0)) for r in got),
        "successes": successes,
        "server_requests": server,
        "server_log_cut_by_kill": cut,
        "proxy": proxy_of_rows(whole),
        "faults": faults,
        "faults_struck": struck,
        "fault_spans": [fault_span(f) for f in faults if fault_span(f) is not None],
        "restarts": target.get("restarts", []),
        "url": target.get("url"),
        "k6_dropped_iterations": sum(int(r.get("k6_dropped_iterations", 0)) for r in got),
        "recorders": blobs,  # the workers' exact HdrHistograms: re-mergeable, per node
    }
    baseline = next((r["network_baseline"] for r in got if r.get("network_baseline")), None)
    if baseline is not None:  # iperf3 before the first step: in the first window only
        extra["network_baseline"] = baseline
    if missing_probes:
        extra["missing_probes"] = list(missing_probes)
    return IterationResult.for_window(window, point, per_node, flags=flags, extra=extra)


def _master(got: list[dict[str, Any]]) -> int | None:
    """The local LB's master pid (nginx's first), None for another target (Traefik: one process)."""
    return next((int(r["lb_pids"][0]) for r in got if r.get("lb_pids")), None)


def _step_proxy(row: dict[str, Any], per_s: list[dict[str, Any]], read: bool, flags: list[str]) -> None:
    """A step's proxy rows (the window's ticks within a ``locust -f`` step, from its first send to
    its last answer; a swept step's: all of them) and its figures from them. A step without a
    tick says so: ``proxy`` None and flagged, never left out (a report reading ``proxy`` found
    no key: KeyError) nor zero (no process sampled is not an idle proxy)."""
    row["proxy"] = proxy_of_rows(per_s)
    row["proxy_per_second"] = per_s
    row["proxy_processes"] = proxy_processes(per_s)
    if row["proxy"] is None and read:  # no reading at all is flagged once, for the window
        flags.append(f"missing:proxy:step{row['step']}")


def _cut_by_kill(
    cfg: IngressConfig,
    point: PointInfo,
    struck: list[str],
    successes: int,
    server: int | None,
    workers: int,
) -> int:
    """Answered requests a SIGKILL of the LB kept out of its access log, else 0.

    nginx writes a request's log line after it has sent the reply, so a SIGKILL between the two
    leaves a request answered and never logged. Only requests in flight at the kill can be lost
    that way: at most one per user (closed model) or per VU (open model). A shortfall within
    that bound, in a window where ``kill-lb-local`` struck (``struck``: the faults' names that
    struck in it; their records may follow with a later window, once recovered), is named as
    such; anything else stays a ``server-mismatch``."""
    if server is None or "kill-lb-local" not in struck:
        return 0
    if cfg.model == "open":
        bound = cfg.open_users * max(workers, 1)
    else:
        key = point.params.get("users")
        bound = int(key) if key is not None else int(max(cfg.steps, default=0))
    short = successes - server
    return short if 0 < short <= bound else 0


def _count_row(
    cfg: IngressConfig, row: dict[str, Any], asked: int, got: list[dict[str, Any]], flags: list[str]
) -> None:
    """A request-count step's row: the count asked, the slowest worker's time, the rate and the
    generators' CPU % over that time (not over ``step_duration``, the step's mere limit)."""
    elapsed = max((float(r["elapsed_s"]) for r in got if r.get("elapsed_s") is not None), default=0.0)
    scale = float(cfg.step_duration) / elapsed if elapsed > 0 else 0.0
    _set_count(cfg, row, asked, elapsed, [c * scale for c in row.get("generator_cpu_pct") or []], flags)


def _set_count(
    cfg: IngressConfig, row: dict[str, Any], asked: int, elapsed: float, cpu: list[float], flags: list[str]
) -> None:
    row["request_count"] = asked
    row["elapsed_s"] = elapsed
    if elapsed > 0:
        row["rps"] = row["requests"] / elapsed
        row["generator_cpu_pct"] = cpu
        row["generator_bound"] = any(c >= cfg.generator_bound_pct for c in cpu)
    if row["requests"] != asked:
        flags.append(f"count-incomplete:step{row['step']}:sent {row['requests']} of {asked}")


def _free_run_rows(
    cfg: IngressConfig,
    rows: list[dict[str, Any]],
    merged: StepRecorder | None,
    got: list[dict[str, Any]],
    flags: list[str],
) -> None:
    """locust -f: each step's load, and with ``requests`` its count, its time (first send to last
    answer), its own log lines and the replicas that served it (the target worker's tally)."""
    key = "rate" if cfg.model == "open" else "users"
    by_step: dict[str, dict[str, int]] = {}
    for r in got:
        by_step.update(r.get("server_requests_by_step") or {})
    for row in rows:
        i = row["step"]
        row[key] = _num(cfg.steps[i]) if i < len(cfg.steps) else None
        mine = by_step.get(str(i), {})
        if "backends" in mine:  # the replicas the target's worker reloaded the LB onto
            row["backends"] = int(mine["backends"])
        if "server_requests" in mine:
            row["server_requests"] = int(mine["server_requests"])
        if cfg.requests and cfg.model == "closed" and merged is not None and i < len(cfg.steps):
            st = merged.steps[i]
            elapsed = st.last_t - st.first_t
            cpu = [100.0 * w.get(i, 0.0) / elapsed for w in merged.workers_cpu or []] if elapsed > 0 else []
            asked = int(cfg.requests[i] if len(cfg.requests) > 1 else cfg.requests[0])
            _set_count(cfg, row, asked, elapsed, cpu, flags)


def fault_span(f: Mapping[str, Any]) -> dict[str, Any] | None:
    """The OTel span of a fault: from the last success before it to the first one after."""
    start = f.get("last_success_before") or f.get("at")
    if start is None:
        return None
    end = f.get("first_success_after") or start
    attrs = {k: v for k, v in f.items() if isinstance(v, int | float | str | bool)}
    return {"name": str(f.get("name", "fault")), "start_ns": int(float(start) * 1e9),
            "end_ns": int(float(end) * 1e9), "attrs": attrs}  # fmt: skip


def build_sections(cfg: IngressConfig, results: Sequence[IterationResult], run_dir: str) -> dict[str, Any]:
    """``steps`` (one row per step, merged percentiles, proxy from the probe), ``faults`` and the
    ``ingress`` summary, with the PNG plots written into ``run_dir``."""
    ordered = sorted(results, key=lambda r: (r.point, r.iteration))
    steps = [row for r in ordered for row in r.extra.get("steps", [])]
    restarts: list[Any] = next(
        (r.extra["restarts"] for r in reversed(ordered) if r.extra.get("restarts")), []
    )
    faults = [{**f, "restarts": restarts} for r in ordered for f in r.extra.get("faults", [])]
    servers = [r.extra.get("server_requests") for r in ordered]
    requests = sum(int(r.extra.get("requests", 0)) for r in ordered)
    preflights = sum(int(r.extra.get("preflight_requests", 0)) for r in ordered)
    summary: dict[str, Any] = {
        "url": next((r.extra["url"] for r in ordered if r.extra.get("url")), cfg.host or None),
        "engine": cfg.engine,
        "model": cfg.model,
        "windows": len(ordered),
        "requests": requests,
        "successes": sum(int(r.extra.get("successes", 0)) for r in ordered),
        "preflight_requests": preflights,
        "target_requests": requests + preflights,
        "server_requests": None if not ordered or None in servers else sum(int(s or 0) for s in servers),
        "k6_dropped_iterations": sum(int(r.extra.get("k6_dropped_iterations", 0)) for r in ordered),
    }
    summary["network_baseline"] = network_summary(ordered, steps)
    # Exact: every success is a log line, or one the LB's SIGKILL cut (named per window).
    summary["server_log_cut_by_kill"] = sum(int(r.extra.get("server_log_cut_by_kill") or 0) for r in ordered)
    summary["exact"] = (
        None
        if summary["server_requests"] is None
        else (summary["server_requests"] + summary["server_log_cut_by_kill"] == summary["successes"])
    )
    t0 = ordered[0].started_ns / 1e9 if ordered else 0.0
    from swarmscope.kinds.ingress_flood.plots import write_plots

    plots = write_plots({"steps": steps, "faults": faults, "model": cfg.model, "t0": t0}, Path(run_dir))
    summary["plots"] = plots
    return {"steps": steps, "faults": faults, "ingress": summary}


def network_summary(ordered: Sequence[IterationResult], steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """iperf3's baseline (None: not measured) with the HTTP throughput beside it: the step with
    the most requests/s, its rate and mean latency."""
    base = next((r.extra["network_baseline"] for r in ordered if r.extra.get("network_baseline")), None)
    if base is None:
        return None
    top = max(steps, key=lambda s: float(s.get("rps") or 0.0), default=None)
    if top is not None:
        base = {**base, "http_peak": {
            "step": top.get("step"), "users": top.get("users"), "rate": top.get("rate"),
            "rps": top.get("rps"), "mean_ms": (top.get("latency_ms") or {}).get("mean"),
        }}  # fmt: skip
    return dict(base)


def _num(v: float) -> int | float:
    return int(v) if float(v).is_integer() else float(v)
