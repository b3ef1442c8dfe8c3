"""Scenario kinds: the schema of each run definition and the fields all of them share.

    kind = get_kind("exec_storm")
    cfg = kind.schema.load(file="scenarios/exec_storm.yaml", sets=["nodes=2,5"])

A scenario file names its kind (``scenario: exec_storm``); the kind says what is counted
(its metric), which probe programs measure it, and which options it takes. Options shared by
every kind (where results go, how probes are reached) are in COMMON_FIELDS; each option
declares its env var there (``SWARMSCOPE_<KEY>``), see swarmscope.config for the precedence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from swarmscope.config import Field, Schema, list_of
from swarmscope.errors import ConfigError, Problem

COMMON_FIELDS = [
    Field("scenario", str, "", "scenario kind: exec_storm (more kinds register themselves)"),
    Field(
        "out", str, "results", "results directory: <out>/swarmscope.sqlite and one <out>/<run-id>/ per run"
    ),
    Field(
        "probe",
        str,
        "embedded",
        "embedded: start a probe on this machine; external: wait for probes to connect (cluster)",
        choices=("embedded", "external"),
    ),
    Field(
        "expect_probes", int, 1, "with probe=external: probes to wait for before starting", min=1, max=100000
    ),
    Field("probe_timeout_s", float, 60.0, "how long to wait for probes to register", min=1, max=3600),
    Field(
        "window_timeout_s",
        float,
        30.0,
        "how long to wait for probes' readings at a window's close",
        min=1,
        max=600,
    ),
    Field("grpc_bind", str, "127.0.0.1:0", "where the probe fleet listens (host:port; port 0 picks one)"),
    Field("token_file", str, "", "file holding the controller/probe token (default: a fresh token per run)"),
    Field(
        "metrics_port",
        int,
        0,
        "serve the controller's Prometheus /metrics on this port (0: off)",
        min=0,
        max=65535,
    ),
    Field(
        "mode",
        str,
        "embedded",
        "embedded: load runs in this process; distributed: Locust master here, workers as separate processes",
        choices=("embedded", "distributed"),
    ),
    Field(
        "workers",
        int,
        2,
        "distributed: Locust workers to start (or wait for, without spawn_workers)",
        min=1,
        max=1000,
    ),
    Field(
        "spawn_workers",
        bool,
        True,
        "distributed: start the workers on this machine (false: wait for external ones)",
    ),
    Field("master_bind", str, "127.0.0.1:5557", "distributed: where the Locust master listens (host:port)"),
    Field(
        "worker_timeout_s",
        float,
        60.0,
        "distributed: how long to wait for workers to connect",
        min=1,
        max=3600,
    ),
]


def _exec_checks(v: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    if v["pids_max"] < v["concurrency"] + 2:
        out.append(("pids_max", f"must be at least concurrency + 2 = {v['concurrency'] + 2}"))
    return out


def _exec_fields() -> list[Field]:
    from swarmscope.controller.tracers.base import TRACER_FIELDS

    return [
        Field("nodes", list_of(int), [2], "simulated node counts to sweep (one point each)", min=1, max=256),
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
        *TRACER_FIELDS,
    ]


def _tracer_checks(v: dict[str, Any]) -> list[tuple[str, str]]:
    from swarmscope.controller.tracers.base import tracer_cross_check

    return tracer_cross_check(v)


def _neighbor_fields() -> list[Field]:
    from swarmscope.targets.neighbors.sweep import NEIGHBOR_FIELDS

    return list(NEIGHBOR_FIELDS)


def _run_neighbors(kind: ScenarioKind, cfg: Any) -> dict[str, Any]:
    from swarmscope.controller.section_run import run_section
    from swarmscope.targets.neighbors.sweep import run_sweep

    return run_section(
        kind, cfg, "neighbors", run_sweep, renderer="swarmscope.targets.neighbors.report_section:render"
    )


def _ingress_fields() -> list[Field]:
    from swarmscope.targets.ingress.flood import INGRESS_FIELDS

    return list(INGRESS_FIELDS)


def _ingress_checks(v: dict[str, Any]) -> list[tuple[str, str]]:
    from swarmscope.targets.ingress.flood import SCHEMA

    return [pair for check in SCHEMA.cross_checks for pair in check(v)]


def _run_ingress(kind: ScenarioKind, cfg: Any) -> dict[str, Any]:
    import swarmscope.workers.http_users  # noqa: F401  (Locust's hooks and options, gevent first)
    from swarmscope.controller.section_run import run_section
    from swarmscope.targets.ingress.flood import run_flood
    from swarmscope.targets.ingress.report_section import fault_spans

    r = "swarmscope.targets.ingress.report_section:"
    return run_section(
        kind,
        cfg,
        "ingress",
        cast(Any, run_flood),  # takes the Config mapping like every section function
        renderer=r + "render_summary",
        split={"steps": r + "render_steps", "faults": r + "render_faults"},
        on_done=fault_spans,
    )


@dataclass
class ScenarioKind:
    """A kind of scenario. ``run`` is None for the window sweep of swarmscope.controller.sweep
    (probes + workers + reconciliation); kinds that measure with their own machinery give a
    function ``run(kind, cfg) -> report``."""

    name: str
    metric: str
    programs: list[str]
    fields: Callable[[], list[Field]]
    cross_checks: list[Callable[[dict[str, Any]], list[tuple[str, str]]]] = field(default_factory=list)
    run: Callable[[ScenarioKind, Any], dict[str, Any]] | None = None
    gevent: bool = False  # its run drives Locust in this process (needs gevent's patching first)

    @property
    def schema(self) -> Schema:
        return Schema([*COMMON_FIELDS, *self.fields()], self.cross_checks)


KINDS: dict[str, ScenarioKind] = {
    "ingress_flood": ScenarioKind(
        "ingress_flood", "requests", [], _ingress_fields, [_ingress_checks], run=_run_ingress, gevent=True
    ),
    "neighbor_writes": ScenarioKind("neighbor_writes", "neighbors", [], _neighbor_fields, run=_run_neighbors),
    "exec_storm": ScenarioKind(
        "exec_storm", "exec", ["exec_count"], _exec_fields, [_exec_checks, _tracer_checks]
    ),
}


def get_kind(name: str, source: str = "scenario") -> ScenarioKind:
    if name not in KINDS:
        raise ConfigError(
            [Problem(source, "scenario", f"unknown scenario kind {name!r}; known: {', '.join(KINDS)}")]
        )
    return KINDS[name]


def kind_name(path: str | None, sets: list[str], env: dict[str, str] | None = None) -> str:
    """The scenario kind a run will use: --set scenario=, else the file's, else the env's."""
    import os

    import yaml

    name = ""
    for s in sets:
        if s.startswith("scenario="):
            name = s.split("=", 1)[1]
    if not name and path:
        try:
            with open(path, encoding="utf-8") as fh:
                raw = yaml.safe_load(fh) or {}
        except (OSError, yaml.YAMLError):
            raw = {}  # the schema load reports the read/parse problem with its location
        if isinstance(raw, dict):
            name = str(raw.get("scenario", ""))
    return name or (env if env is not None else os.environ).get("SWARMSCOPE_SCENARIO", "") or "exec_storm"


def uses_locust(name: str) -> bool:
    """Whether a kind's runs go through Locust (and so need gevent's monkey-patching)."""
    kind = KINDS.get(name)
    return kind is None or kind.run is None or kind.gevent


def load_scenario(
    path: str | None, sets: list[str], env: dict[str, str] | None = None
) -> tuple[ScenarioKind, Any]:
    """Read the scenario file's kind, then load and validate it with that kind's schema."""
    kind = get_kind(kind_name(path, sets, env), path or "scenario")
    return kind, kind.schema.load(file=path, env=env, sets=sets)
