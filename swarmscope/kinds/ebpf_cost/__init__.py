"""Scenario kind ``ebpf_cost``: what third-party eBPF tools cost, busy loop against idle.

    swarmscope run scenarios/ebpf_cost.yaml [--set tools=seccomp,open,ig-open --set duration_s=10]
    locust -f scenarios/ebpf_cost.py --headless -u 1 -r 1 -t 10s     # one busy window, free-running

The top-ebpf write-up's experiment (docs/seeds.md#top-ebpf): tools watch one node (a cgroup)
from set-up on (targets/ebpf_tools.py: a bpftrace syscall recorder of ours standing in for the
seccomp advisor, a trace-open bpftrace script, Inspektor Gadget's ``ig trace open``); then a
``busy`` window runs ``while true; do cat /dev/null; done`` in the node for ``duration_s``, and an
``idle`` window runs nothing. Per window, each tool program's run count, runtime and CPU share
(the probe's ``bpf_stats``), its map memory, and the loop's syscall and exec rate (the probe's
``syscall_count`` and ``exec_count`` for the node). generated (the loop's execs, counted by the
shell, + 1 for the shell) == kernel exec count for the node, as every kind reconciles.

Caveat: the programs are host-wide, so their counts include every other process's syscalls and
opens on the machine (as in the write-up, where idle still cost); the tools' own output volume
is part of the load on a busy machine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from swarmscope.controller.model import IterationResult, PointInfo, WindowOutcome
from swarmscope.controller.options import RunConfig
from swarmscope.core.config import Field, list_of
from swarmscope.core.errors import ConfigError, Problem
from swarmscope.kinds.base import CrossCheck, Kind

PHASES = ("busy", "idle")
TOOL_CHOICES = ("seccomp", "open", "ig-open")  # targets/ebpf_tools.TOOLS


class EbpfCostConfig(RunConfig):
    duration_s: float
    iterations: int
    pause_s: float
    tools: list[str]
    phases: list[str]


class EbpfCost(Kind[EbpfCostConfig]):
    not_in_cluster = (
        "its worker makes its node as a child cgroup, and a pod's cgroupfs is read-only; its tools "
        "are host-wide tracers (bpftrace, and ig, which is not in the image) that need the host PID "
        "namespace and CAP_SYS_ADMIN: run it on the machine it measures with swarmscope run or "
        "swarmscope controller and one swarmscope worker"
    )
    name = "ebpf_cost"
    metric = "exec"
    description = "third-party eBPF tools' cost (run count, runtime, CPU, map memory), busy loop vs idle"
    config_cls = EbpfCostConfig

    def fields(self) -> list[Field]:
        return [
            Field(
                "duration_s",
                float,
                10.0,
                "length of each phase's window (the write-up: 10 s)",
                min=0.5,
                max=120,
            ),
            Field("iterations", int, 1, "windows per phase", min=1, max=100),
            Field("pause_s", float, 0.5, "pause between windows, seconds", min=0, max=60),
            Field(
                "tools",
                list_of(str),
                ["seccomp", "ig-open"],
                "eBPF tools watching the node: seccomp (bpftrace syscall recorder), open (bpftrace "
                "trace-open), ig-open (Inspektor Gadget's ig trace open)",
                choices=TOOL_CHOICES,
            ),
            Field(
                "phases",
                list_of(str),
                list(PHASES),
                "phases in order: busy (the loop) and idle",
                choices=PHASES,
            ),
        ]

    def cross_checks(self) -> list[CrossCheck]:
        # One machine, one set of tools: a second worker would start its own copies, and its
        # host reading would count every program on the machine a second time.
        return [
            lambda v: [("workers", "ebpf_cost measures one machine with one set of tools: one worker")]
            if v.get("mode", "embedded") != "embedded" and v.get("workers", 1) != 1
            else []
        ]

    def shared(self, cfg: EbpfCostConfig, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        if len(infos) > 1:  # hand-started workers of a free-running master: the check above, at set-up
            why = f"{len(infos)} connected: ebpf_cost measures one machine with one set of tools: one worker"
            raise ConfigError([Problem("set-up", "workers", why)])
        return {}

    def programs(self, cfg: EbpfCostConfig, shared: Mapping[str, Any]) -> dict[str, dict[str, str]]:
        return {"bpf_stats": {}, "syscall_count": {}, "exec_count": {}}

    def points(self, cfg: EbpfCostConfig) -> list[PointInfo]:
        return [PointInfo(i, {"phase": p}, int(cfg.iterations)) for i, p in enumerate(cfg.phases)]

    def payload(
        self, cfg: EbpfCostConfig, point: PointInfo, iteration: int, shared: Mapping[str, Any]
    ) -> dict[str, Any]:
        return {"phase": point.params["phase"], "duration_s": float(cfg.duration_s)}

    def window_timeout_s(self, cfg: EbpfCostConfig, point: PointInfo) -> float:
        return float(cfg.duration_s) + float(cfg.window_timeout_s)

    def reconcile(self, cfg: EbpfCostConfig, outcome: WindowOutcome) -> IterationResult:
        """The loop's node by the generic rule; the host reading's program stats as extra."""
        from dataclasses import replace

        from swarmscope.controller.reconcile import reconcile
        from swarmscope.kinds.ebpf_cost.table import per_window

        window, results = outcome.window, outcome.results
        loop_nodes = [n for n in window.nodes if n in results]
        host_nodes = [n for n in window.nodes if n not in results]
        loop = [r for r in outcome.readings if r.node in loop_nodes]
        host = [r for r in outcome.readings if r.node in host_nodes]
        out = reconcile(
            replace(outcome, window=replace(window, nodes=loop_nodes), readings=loop), self.metric
        )
        out.flags += [f"probe-error:{r.node}:{r.error}" for r in host if r.error]
        if not host:
            out.flags.append("missing:host:probe")
        # The window as the probe measured it (open to close), else as the controller did.
        spans = [(r.end_ns - r.start_ns) / 1e9 for r in host if r.end_ns > r.start_ns]
        seconds = max(spans) if spans else (window.closed_ns - window.opened_ns) / 1e9
        tools: list[dict[str, Any]] = next((r["tools"] for r in results.values() if r.get("tools")), [])
        out.extra["ebpf_cost"] = {
            "phase": outcome.point.params.get("phase", "busy"),  # a free run is one busy window
            **per_window(tools, host, loop, seconds),
        }
        return out

    def sections(
        self, cfg: EbpfCostConfig, results: Sequence[IterationResult], run_dir: str
    ) -> dict[str, Any]:
        from swarmscope.kinds.ebpf_cost.table import CAVEAT, text_table

        phases = [
            {"iteration": r.iteration, **r.extra["ebpf_cost"]} for r in results if "ebpf_cost" in r.extra
        ]
        text = "\n\n".join(text_table(p) for p in phases)
        return {"ebpf_cost": {"caveat": CAVEAT, "tools": list(cfg.tools), "phases": phases, "text": text}}

    def register_renderers(self) -> None:
        import swarmscope.kinds.ebpf_cost.report  # noqa: F401  (registers "ebpf_cost")

    def console_summary(self, report: dict[str, Any]) -> str | None:
        text = ((report.get("sections") or {}).get("ebpf_cost") or {}).get("text")
        return "\nebpf cost\n" + str(text) if text else None  # in the write-up's columns

    # -- worker side ----------------------------------------------------------------------
    def prepare(self, cfg: EbpfCostConfig) -> None:
        if "ig-open" in cfg.tools:
            from swarmscope.targets.ebpf_tools import ig_binary

            ig_binary()

    def make_driver(self, cfg: EbpfCostConfig, sim_nodes: int, prefix: str) -> Any:
        from swarmscope.workers.ebpf_cost import CostDriver

        return CostDriver(cfg, prefix)


KIND = EbpfCost()
