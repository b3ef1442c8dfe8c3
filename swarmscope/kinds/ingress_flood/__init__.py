"""Scenario kind ``ingress_flood``: HTTP load in steps against an ingress, exact on both ends.

    swarmscope run scenarios/ingress_flood.yaml --set steps=10,50 --set step_duration=3
    swarmscope run scenarios/ingress_flood.yaml --set mode=distributed --set workers=2
    locust -f scenarios/ingress_flood.py --headless --stop-timeout 5     # steps via StepShape

One point per step (``{"users": N}`` closed, ``{"rate": R}`` open), one window each. With
``requests`` (boom's ``-n``) a closed step sends exactly that many requests over its users
(Locust, k6's shared-iterations, and ``locust -f`` through workers.step_sync), ``step_duration``
then being only the step's time limit (``{"users": N, "request_count": n}``). Before the first
step the target's worker measures the network baseline (iperf3, targets.ingress.netbase).
A worker is one node, the load generator; the worker of index 0 also runs the target (the local
nginx LB + backends when there is no ``host``) and the fault. Every window opens the probe's ``procstat``
on the LB's pids (or the ``proxy_processes`` names of another target), so the proxy's CPU and
RSS per step come from the probe. The controller merges the workers' HdrHistograms exactly and
checks client successes == the access-log lines of the window.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from swarmscope.controller.model import IterationResult, PointInfo, WindowOutcome
from swarmscope.controller.tables import Rows
from swarmscope.core.config import Field
from swarmscope.core.errors import ConfigError, Problem
from swarmscope.kinds.base import CrossCheck, Kind
from swarmscope.kinds.ingress_flood import live
from swarmscope.kinds.ingress_flood.config import IngressConfig, backends_of

START_DELAY_S = 0.3  # a window starts this long after its payload is made: every worker at once


class IngressFlood(Kind[IngressConfig]):
    name = "ingress_flood"
    metric = "requests"
    description = "HTTP load in steps against an ingress: exact latency, proxy cost, faults"
    config_cls = IngressConfig

    def __init__(self) -> None:
        # The LB's pids change when it restarts (a fault): the target worker sends them with
        # every window, and the next window samples those. Keyed by the target's URL.
        self._lb_pids: dict[str, list[int]] = {}

    def fields(self) -> list[Field]:
        from swarmscope.kinds.ingress_flood.config import INGRESS_FIELDS

        return list(INGRESS_FIELDS)

    def cross_checks(self) -> list[CrossCheck]:
        from swarmscope.kinds.ingress_flood.config import cross_check

        return [cross_check]

    # -- controller side ------------------------------------------------------------------
    def points(self, cfg: IngressConfig) -> list[PointInfo]:
        key = "rate" if cfg.model == "open" else "users"
        return [PointInfo(i, {key: _num(s), **_count_of(cfg, i)}, 1) for i, s in enumerate(cfg.steps)]

    def sim_nodes(self, cfg: IngressConfig) -> int:
        return int(cfg.workers) if cfg.mode == "distributed" else 1

    def shared(self, cfg: IngressConfig, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        errors = [str(i["error"]) for i in infos.values() if i.get("error")]
        if errors:
            raise ConfigError([Problem("target", "host", e) for e in errors])
        target = next((i for i in infos.values() if "url" in i), None)
        if target is None:
            return {}
        self._lb_pids[str(target["url"])] = list(target.get("lb_pids") or [])
        out = {"url": target["url"]}
        if target.get("local_target", True):  # the node whose access log ends each step
            out["target_node"] = target["node"]
        return out

    def programs(self, cfg: IngressConfig, shared: Mapping[str, Any]) -> dict[str, dict[str, str]]:
        if cfg.proxy_processes:
            return {"procstat": {"names": ",".join(cfg.proxy_processes)}}
        pids = self._lb_pids.get(str(shared.get("url")), [])
        return {"procstat": {"pids": ",".join(map(str, pids))} if pids else {}}

    def payload(
        self, cfg: IngressConfig, point: PointInfo, iteration: int, shared: Mapping[str, Any]
    ) -> dict[str, Any]:
        return {
            "step": point.index,
            "last": point.index == len(cfg.steps) - 1,
            "users": point.params.get("users"),
            "rate": point.params.get("rate"),
            "request_count": point.params.get("request_count"),
            "backends": None if cfg.host else backends_of(cfg, point.index),
            "model": cfg.model,
            "open_users": cfg.open_users,
            "step_duration": cfg.step_duration,
            "url": shared.get("url", ""),
            "start_at": time.time() + START_DELAY_S,
        }

    def window_timeout_s(self, cfg: IngressConfig, point: PointInfo) -> float:
        return (
            START_DELAY_S + float(cfg.step_duration) + float(cfg.stop_timeout_s) + float(cfg.window_timeout_s)
        )

    def reconcile(self, cfg: IngressConfig, outcome: WindowOutcome) -> IterationResult:
        from swarmscope.kinds.ingress_flood.results import reconcile_window

        res = reconcile_window(cfg, outcome)
        for r in outcome.results.values():
            if r.get("lb_pids") and r.get("lb_pids") != []:
                for url in self._lb_pids:
                    self._lb_pids[url] = list(r["lb_pids"])
        return res

    def sections(
        self, cfg: IngressConfig, results: Sequence[IterationResult], run_dir: str
    ) -> dict[str, Any]:
        from swarmscope.kinds.ingress_flood.results import build_sections

        return build_sections(cfg, results, run_dir)

    def register_renderers(self) -> None:
        from swarmscope.kinds.ingress_flood import report  # noqa: F401  (registers on import)

    live_columns = live.COLUMNS
    live_in_prefix = frozenset({"step", "load"})

    def live_rows(self, results: Sequence[IterationResult]) -> Rows:
        return live.rows(results)

    def console_summary(self, report: dict[str, Any]) -> str | None:
        return live.summary(report)

    # -- worker side ----------------------------------------------------------------------
    def prepare(self, cfg: IngressConfig) -> None:
        if cfg.engine == "k6":
            from swarmscope.workers.k6 import k6_binary

            k6_binary()

    def make_driver(self, cfg: IngressConfig, sim_nodes: int, prefix: str) -> Any:
        from swarmscope.kinds.ingress_flood.driver import IngressDriver

        return IngressDriver(cfg, prefix)


def _count_of(cfg: IngressConfig, i: int) -> dict[str, int]:
    """Step i's request count (boom's -n) and backend replicas, when the scenario sets them."""
    out = {"backends": backends_of(cfg, i)} if cfg.backends and len(cfg.backends) > 1 else {}
    if cfg.requests:
        out["request_count"] = int(cfg.requests[i] if len(cfg.requests) > 1 else cfg.requests[0])
    return out


def _num(v: float) -> int | float:
    return int(v) if float(v).is_integer() else float(v)


KIND = IngressFlood()
