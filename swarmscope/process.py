"""One object owns the wiring of a swarmscope process (like Locust's Environment).

    proc = SwarmscopeProcess.make(cfg, kind, role="local", locust_env=env)
    proc.controller.open_window(...)      # controller side (master or local)
    proc.worker.burst(...)                # worker side (worker or local)
    proc.close("ok")                      # run_finished, report, probes and nodes torn down

``make`` is the factory: it builds the run's events and their listeners (result store, OTel
spans, Prometheus metrics, console), the probe fleet and the embedded probe, the tracer under
test and the roles this process plays, exactly once. The Locust plug-in and ``swarmscope run``
both call it; nothing else constructs these pieces.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
import uuid
from collections.abc import Mapping
from typing import Any

from swarmscope import auth
from swarmscope.controller.model import RunInfo
from swarmscope.events import RunEvents

log = logging.getLogger(__name__)

ROLES = ("local", "master", "worker")


def new_run_id(scenario: str) -> str:
    return time.strftime("%Y%m%d-%H%M%S") + f"-{scenario}-{uuid.uuid4().hex[:4]}"


class SwarmscopeProcess:
    def __init__(self, role: str, cfg: Mapping[str, Any], kind: Any):
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}")
        self.role = role
        self.cfg = cfg
        self.kind = kind
        self.events = RunEvents()
        self.run: RunInfo | None = None
        self.controller: Any = None
        self.worker: Any = None
        self.fleet: Any = None
        self.probe: Any = None
        self.store: Any = None
        self.spans: Any = None
        self.metrics: Any = None
        self.tracer: Any = None
        self.report: dict[str, Any] | None = None
        self._closed = False

    # -- factory ------------------------------------------------------------------------------
    @classmethod
    def make(
        cls,
        cfg: Mapping[str, Any],
        kind: Any,
        role: str = "local",
        sim_nodes: int = 0,
        node_prefix: str = "",
        run_id: str | None = None,
    ) -> SwarmscopeProcess:
        proc = cls(role, cfg, kind)
        need_root = []
        if role in ("local", "master") and cfg.get("probe") == "embedded":
            need_root.append("the embedded probe loads eBPF programs")
        if role in ("local", "worker") and sim_nodes > 0:
            need_root.append("simulated nodes are cgroups this process creates")
        if need_root and os.geteuid() != 0:
            from swarmscope.errors import SetupError

            raise SetupError(
                f"needs root: {'; '.join(need_root)}. Run it as root (sudo), or in a cluster with "
                "probe=external and real nodes (NODE_NAME set)."
            )
        try:
            if role in ("local", "master"):
                proc._make_controller(run_id)
            if role in ("local", "worker"):
                proc._make_worker(sim_nodes, node_prefix)
            if role == "local":
                proc.controller.add_nodes("local", proc.worker.describe())
        except BaseException:
            proc.close("failed", write_report=False)
            raise
        return proc

    def _make_controller(self, run_id: str | None) -> None:
        from swarmscope.controller.fleet import Fleet
        from swarmscope.controller.metrics import RunMetrics
        from swarmscope.controller.otel import RunSpans
        from swarmscope.controller.role import ControllerRole
        from swarmscope.controller.store import ResultStore
        from swarmscope.controller.tracers.base import make_tracer

        cfg, kind = self.cfg, self.kind
        rid = run_id or new_run_id(kind.name)
        out = os.path.abspath(cfg["out"])
        run_dir = os.path.join(out, rid)
        os.makedirs(run_dir, exist_ok=True)
        self.run = RunInfo(
            run_id=rid,
            scenario=kind.name,
            metric=kind.metric,
            config=dict(cfg),
            started_ns=time.time_ns(),
            run_dir=run_dir,
        )
        # The span listener goes first: it sets run.trace_id at run_started, which the store saves.
        self.spans = RunSpans.attach(self.events)
        self.store = ResultStore(os.path.join(out, "swarmscope.sqlite"))
        self.store.attach(self.events)
        # The token: a file, else $SWARMSCOPE_TOKEN (the Helm chart's Secret), else a fresh one
        # that only the embedded probe is given.
        if cfg.get("token_file") or os.environ.get(auth.TOKEN_ENV):
            token = auth.load_token(cfg.get("token_file") or None)
        else:
            token = auth.new_token()
        self.fleet = Fleet(token, bind=cfg["grpc_bind"])
        self.fleet.start()
        self.metrics = RunMetrics.attach(self.events, kind.metric, self.fleet)
        if cfg.get("metrics_port"):
            self.metrics.serve(int(cfg["metrics_port"]))
        self.events.iteration_done.add_listener(_print_iteration)
        if cfg["probe"] == "embedded":
            from swarmscope.controller.embedded import EmbeddedProbe

            self.probe = EmbeddedProbe.start(
                f"127.0.0.1:{self.fleet.port}",
                token,
                os.path.join(run_dir, "probe.log"),
                programs=kind.programs,
            )
            self.probe.wait_registered(self.fleet, cfg["probe_timeout_s"])
        # With external probes (a cluster) nothing waits here: a controller must come up (and
        # pass its readiness probe) before the probe pods can reach it. Runs wait at their start.
        if "tracer" in cfg and cfg["tracer"] != "none":
            from swarmscope.workers.native import ensure_built

            self.tracer = make_tracer(cfg, sentinel=ensure_built().tiny)
        self.controller = ControllerRole(
            self.run,
            self.fleet,
            self.events,
            tracer=self.tracer,
            programs=kind.programs,
            window_timeout_s=cfg["window_timeout_s"],
        )
        self.events.run_started.fire(run=self.run)

    def _make_worker(self, sim_nodes: int, node_prefix: str) -> None:
        from swarmscope.workers.role import WorkerRole

        cfg = self.cfg
        group = f"{node_prefix or 'local'}-{os.getpid()}"
        self.worker = WorkerRole.create(
            sim_nodes,
            group=group,
            pids_max=int(cfg.get("pids_max", 256)),
            max_execs=int(cfg.get("max_execs", 1_000_000)),
            prefix=node_prefix,
        )

    # -- teardown -------------------------------------------------------------------------------
    def close(self, status: str = "ok", write_report: bool = True) -> dict[str, Any] | None:
        """Finish the run (events, report), then tear down probe, fleet and nodes. Idempotent."""
        if self._closed:
            return self.report
        self._closed = True
        try:
            if self.run is not None:
                self.events.run_finished.fire(run=self.run, status=status)
                if write_report and self.store is not None:
                    from swarmscope.controller.report import write_report as _write

                    self.report = _write(self.store, self.run.run_id, self.run.run_dir)
                    self.events.report_written.fire(
                        run=self.run, report=self.report, run_dir=self.run.run_dir
                    )
        finally:
            if self.fleet is not None:
                self.fleet.shutdown_probes()
            if self.probe is not None:
                self.probe.stop()
            if self.fleet is not None:
                self.fleet.stop()
            if self.metrics is not None:
                self.metrics.close()
            if self.worker is not None:
                self.worker.close()
        return self.report


def _print_iteration(run: RunInfo, result: Any, **_: Any) -> None:
    cells = []
    for n in result.per_node:
        rep = "-" if n.reported is None else str(n.reported)
        mark = "" if n.harness_ok is not False else " MISMATCH"
        cells.append(f"{n.node}: gen {n.generated} kern {n.kernel} rep {rep}{mark}")
    params = " ".join(f"{k}={v}" for k, v in result.params.items())
    print(f"[{params} iter {result.iteration}] " + " | ".join(cells), file=sys.stderr, flush=True)


def hostname() -> str:
    return socket.gethostname()
