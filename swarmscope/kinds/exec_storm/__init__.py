"""Scenario kind ``exec_storm``: every node execs as fast as it can (or paced) for a burst.

    swarmscope run scenarios/exec_storm.yaml --set nodes=2,5 --set tracer=bpftrace
    swarmscope run scenarios/exec_storm.yaml --set load=stress-ng   # the write-up's stress-ng

Points are node counts, each with ``iterations`` windows of one ``burst_s`` burst. Workers
burst on their simulated nodes (cgroup v2 children; the real node in a cluster) and count every
exec that succeeded; the probe's ``exec_count`` counts them per cgroup in the kernel; the tracer
under test says what it saw. generated == kernel in every window, or the harness is wrong.

``load: stress-ng`` makes each burst with Debian's ``stress-ng --exec`` instead of the native
helper (workers/stress_ng.py): generated is stress-ng's own bogo-op count plus its one exec
into the node, and each window's ``extra.stress_ng`` keeps the two apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swarmscope.controller.model import IterationResult, PointInfo, WindowOutcome
from swarmscope.controller.options import RunConfig
from swarmscope.controller.tracers.base import TracerConfig
from swarmscope.core.config import Field, list_of
from swarmscope.kinds.base import CrossCheck, Kind


class ExecStormConfig(RunConfig, TracerConfig):
    """An exec storm's validated options (fields: :meth:`ExecStorm.fields`)."""

    nodes: list[int]
    iterations: int
    burst_s: float
    concurrency: int
    pids_max: int
    max_execs: int
    pause_s: float
    rate_per_node: float
    load: str
    stress_ng_ops: int


LOADS = ("native", "stress-ng")
# The exec-scaling write-up's own figures (docs/seeds.md's table, tests/test_seed_figures.py):
# p99 over 30 iterations of generated and of reported execs, their difference, and the loss
# relative to reported, at the two node counts it gives numbers for (23-39: plots only).
WRITEUP_NODES = (2, 5, 11, 17, 23, 31, 39)
WRITEUP_ITERATIONS = 30
WRITEUP_P99 = {
    2: {"generated_p99": 9082.91, "reported_p99": 9036.37, "difference": 46.54, "loss_vs_reported_pct": 0.5},
    17: {
        "generated_p99": 65014.75,
        "reported_p99": 47986.23,
        "difference": 17028.52,
        "loss_vs_reported_pct": 35.5,
    },
}
# What the stream tracer is when it stands for the write-up's tracer: a model, not a tracer.
STREAM_MODEL = (
    "tracer stream is swarmscope's model of a per-event streaming tracer, not Inspektor Gadget: "
    "its loss comes from two chosen knobs, the collector's budget (tracer_stream_collector_rate "
    "events/s, the single pipe) and the load (rate_per_node execs/s per node). For a real tracer "
    "use tracer=ig (ig trace exec) or tracer=bpftrace."
)


def _exec_checks(v: dict[str, Any]) -> list[tuple[str, str]]:
    from swarmscope.workers.exec_storm import pids_needed  # the worker's own bound, checked up front

    out = []
    need = pids_needed(v["concurrency"])
    if v["pids_max"] < need:
        out.append(("pids_max", f"must be at least 2 * concurrency + 1 = {need} (the storm's tasks)"))
    if v["load"] == "stress-ng":
        if v["rate_per_node"]:
            out.append(("rate_per_node", "stress-ng cannot pace its execs: use 0 with load stress-ng"))
        burst = v["burst_s"]
        if not v["stress_ng_ops"] and (burst != int(burst) or not 1 <= burst <= 60):
            out.append(("burst_s", "stress-ng's --timeout takes whole seconds (1..60); or set stress_ng_ops"))
    elif v["stress_ng_ops"]:
        out.append(("stress_ng_ops", "applies to load stress-ng only"))
    return out


class ExecStorm(Kind[ExecStormConfig]):
    name = "exec_storm"
    metric = "exec"
    description = "exec() bursts per node; does a tracer report every exec?"
    config_cls = ExecStormConfig

    def fields(self) -> list[Field]:
        from swarmscope.controller.tracers.base import TRACER_FIELDS

        return [
            Field(
                "nodes",
                list_of(int),
                [2],
                "node counts to sweep (one point each): simulated nodes, shared among the workers, or "
                "real ones (one per worker in a cluster)",
                min=1,
                max=10_000,
            ),
            Field("iterations", int, 10, "measurement windows (bursts) per point", min=1, max=10000),
            Field("burst_s", float, 1.0, "length of each burst, seconds", min=0.01, max=60),
            Field("concurrency", int, 2, "exec children in flight per node", min=1, max=64),
            Field("pids_max", int, 256, "pids limit of each simulated node's cgroup", min=8, max=4096),
            Field("max_execs", int, 1_000_000, "hard cap on execs per node per burst", min=1, max=1_000_000),
            Field("pause_s", float, 0.2, "pause between iterations, seconds", min=0, max=60),
            Field(
                "rate_per_node",
                float,
                0.0,
                "pace each node's storm at this many execs/s (0: as fast as it can). On one machine a "
                "paced storm emulates many modest nodes, so the total grows with the node count",
                min=0,
                max=1e6,
            ),
            Field(
                "load",
                str,
                "native",
                "what makes each burst: the native vfork helper, or Debian's stress-ng --exec (as the "
                "published scaling test; run as nobody in the node, counted as bogo ops + its own exec)",
                choices=LOADS,
            ),
            Field(
                "stress_ng_ops",
                int,
                0,
                "load stress-ng: stop each node's burst after this many exec bogo ops (--exec-ops); "
                "0: run for burst_s (--timeout)",
                min=0,
                max=1_000_000,
            ),
            *TRACER_FIELDS,
        ]

    def cross_checks(self) -> list[CrossCheck]:
        from swarmscope.controller.tracers.base import tracer_cross_check

        return [_exec_checks, tracer_cross_check]

    # -- controller side ------------------------------------------------------------------
    def programs(self, cfg: ExecStormConfig, shared: Mapping[str, Any]) -> dict[str, dict[str, str]]:
        return {"exec_count": {}}

    def points(self, cfg: ExecStormConfig) -> list[PointInfo]:
        return [PointInfo(i, {"nodes": n}, int(cfg.iterations)) for i, n in enumerate(cfg.nodes)]

    def sim_nodes(self, cfg: ExecStormConfig) -> int:
        return max(cfg.nodes)

    def window_nodes(self, cfg: ExecStormConfig, point: PointInfo, ordered: list[str]) -> list[str]:
        return ordered[: int(point.params["nodes"])]

    def payload(
        self, cfg: ExecStormConfig, point: PointInfo, iteration: int, shared: Mapping[str, Any]
    ) -> dict[str, Any]:
        return {
            "duration_s": cfg.burst_s,
            "concurrency": cfg.concurrency,
            "rate": cfg.rate_per_node,
            "max_execs": cfg.max_execs,
        }

    def window_timeout_s(self, cfg: ExecStormConfig, point: PointInfo) -> float:
        return float(cfg.burst_s) + float(cfg.window_timeout_s)

    def expected_per_node(self, cfg: ExecStormConfig) -> float | None:
        return float(cfg.rate_per_node) * float(cfg.burst_s) or None

    def sections(self, cfg: ExecStormConfig, results: Any, run_dir: str) -> dict[str, Any]:
        """How the load was made: paced, or at maximum rate as the write-up's stress-ng ran."""
        rate = float(cfg.rate_per_node)
        section: dict[str, Any] = {
            "load": "paced" if rate > 0 else "max",
            "rate_per_node": rate or None,
            "burst_s": float(cfg.burst_s),
            "concurrency": int(cfg.concurrency),
            "generator": cfg.load,
            # the write-up's published p99 rows, to read beside points[].p99_comparison
            "write_up_p99": [{"nodes": n, **v} for n, v in WRITEUP_P99.items()],
        }
        if cfg.tracer == "stream":
            section["tracer_model"] = {
                "what": STREAM_MODEL,
                "collector_rate": getattr(cfg, "tracer_stream_collector_rate", None),
                "rate_per_node": rate or None,
            }
        if cfg.load == "stress-ng":
            from swarmscope.workers.stress_ng import STARTUP_EXECS, command_line

            section["stress_ng"] = {
                "command": command_line(
                    float(cfg.burst_s),
                    int(cfg.concurrency),
                    int(cfg.stress_ng_ops),
                    int(cfg.pids_max),
                    int(cfg.max_execs),
                ),
                "startup_execs": STARTUP_EXECS,
                "bogo_ops": sum(_bogo(r) for r in results),
            }
        return {"exec_storm": section}

    def reconcile(self, cfg: ExecStormConfig, outcome: WindowOutcome) -> IterationResult:
        """The generic rule; with stress-ng, each node's bogo ops and start-up execs beside it."""
        out = super().reconcile(cfg, outcome)
        if cfg.load == "stress-ng":
            from swarmscope.workers.stress_ng import STARTUP_EXECS

            out.extra["stress_ng"] = {
                node: {
                    "bogo_ops": int(r["bogo_ops"]),
                    "startup_execs": int(r.get("bursts", 1)) * STARTUP_EXECS,
                }
                for node, r in outcome.results.items()
                if r.get("bogo_ops") is not None
            }
        return out

    def console_summary(self, report: dict[str, Any]) -> str | None:
        """The write-up's own p99 rows, and what the stream tracer is, after the run's tables."""
        sec = (report.get("sections") or {}).get("exec_storm") or {}
        lines = ["\nthe write-up's published p99 (Inspektor Gadget on AKS, 30 iterations):"]
        lines += [
            f"  {r['nodes']:>2} nodes: generated {r['generated_p99']:,.2f}, "
            f"reported {r['reported_p99']:,.2f}, difference {r['difference']:,.2f}, "
            f"loss vs reported {r['loss_vs_reported_pct']:g} %"
            for r in sec.get("write_up_p99") or []
        ]
        if model := sec.get("tracer_model"):
            lines.append(f"note: {model['what']}")
        return "\n".join(lines) if len(lines) > 1 else None

    def register_renderers(self) -> None:
        import swarmscope.kinds.exec_storm.report  # noqa: F401  (registers "exec_storm")

    # -- worker side ----------------------------------------------------------------------
    def prepare(self, cfg: ExecStormConfig) -> None:
        if cfg.tracer == "ig" and not cfg.tracer_command:
            from swarmscope.targets.ebpf_tools import ig_binary

            ig_binary()

    def make_driver(self, cfg: ExecStormConfig, sim_nodes: int, prefix: str) -> Any:
        import os

        from swarmscope.workers.role import WorkerRole

        group = f"{prefix or 'local'}-{os.getpid()}"
        return WorkerRole.create(
            sim_nodes,
            group=group,
            pids_max=int(cfg.pids_max),
            max_execs=int(cfg.max_execs),
            prefix=prefix,
            load=cfg.load,
            stress_ng_ops=int(cfg.stress_ng_ops),
        )

    def free_run_nodes(self, cfg: ExecStormConfig) -> int:
        return int(cfg.nodes[0])


def _bogo(r: IterationResult) -> int:
    return sum(int(v["bogo_ops"]) for v in r.extra.get("stress_ng", {}).values())


KIND = ExecStorm()
