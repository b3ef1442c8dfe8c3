"""One object owns the wiring of a swarmscope process (like Locust's Environment).

    proc = SwarmscopeProcess.make(cfg, kind, role="local")
    proc.controller.open_window(...)           # controller side (master or local)
    proc.set_up_worker(cfg, sim_nodes=2)       # worker side (worker or local), on swarmscope:setup
    proc.worker.run_window(...)                # the kind's driver
    proc.close("ok")                           # run_finished, report, probes and nodes torn down

``make`` is the factory: it builds the run's events and their listeners (result store, OTel
spans, Prometheus metrics, console), the probe fleet and the embedded probe, the tracer under
test and the controller role, exactly once; ``set_up_worker`` makes the kind's driver once,
from the config the master sent. The Locust plug-in and ``swarmscope run`` both call them;
nothing else constructs these pieces. A worker process gets its config only over the network,
so ``make(None, kind, role="worker")`` is valid.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping
from typing import Any, cast

from swarmscope.controller.model import RunInfo, new_run_id
from swarmscope.controller.options import RunConfig
from swarmscope.core import auth
from swarmscope.core.errors import SwarmscopeError
from swarmscope.core.events import RunEvents
from swarmscope.core.sys import owners
from swarmscope.core.sys.heap import freeze_setup_heap
from swarmscope.core.sys.trust import make_run_dir

log = logging.getLogger(__name__)

ROLES = ("local", "master", "worker")


class SwarmscopeProcess:
    def __init__(self, role: str, cfg: RunConfig | None, kind: Any):
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}")
        self.role = role
        # A worker has no config until the master's setup message: the defaults until then (the
        # common options' when it learns its kind from that message too: kind None).
        if cfg is None:
            from swarmscope.kinds.base import Kind

            cfg = cast(RunConfig, (kind or Kind()).schema.load(env={}))
        self.cfg: RunConfig = cfg
        self.kind = kind
        self.events = RunEvents()
        self.run: RunInfo | None = None
        self.controller: Any = None
        self.worker: Any = None
        self.fleet: Any = None
        self.probe: Any = None
        self.printer: Any = None  # the console's IterationPrinter (controller side)
        self.store: Any = None
        self.spans: Any = None
        self.metrics: Any = None
        self.tracer: Any = None
        self.report: dict[str, Any] | None = None
        self.checks: list[Any] = []  # controller.checks.Check, located; else parsed from cfg
        self._closed = False
        self._started = False  # run_started fired: the store has the run's row

    # -- factory ------------------------------------------------------------------------------
    @classmethod
    def make(
        cls,
        cfg: RunConfig | None,
        kind: Any,
        role: str = "local",
        run_id: str | None = None,
    ) -> SwarmscopeProcess:
        proc = cls(role, cfg, kind)
        if role in ("local", "master") and proc.cfg.probe == "embedded":
            from swarmscope.core.errors import SetupError
            from swarmscope.core.sys.caps import HOW, missing_bpf_caps

            if os.geteuid() != 0:
                raise SetupError(
                    "needs root: the embedded probe loads eBPF programs. Run it as root (sudo), or in "
                    "a cluster with probe=external and real nodes (NODE_NAME set)."
                )
            lacking = missing_bpf_caps()
            if lacking:  # root's uid without its capabilities: the probe would fail with EPERM
                caps = " + ".join(lacking)
                raise SetupError(
                    f"the embedded probe loads eBPF programs and this process lacks {caps}: {HOW}."
                )
        if role in ("local", "master"):
            kind.prepare(proc.cfg)  # tools built here (progress on stderr), before any window
        try:
            if role in ("local", "master"):
                proc._make_controller(run_id)
        except BaseException:
            proc.close("failed", write_report=False)
            raise
        return proc

    def _make_controller(self, run_id: str | None) -> None:
        from swarmscope.app.console import IterationPrinter
        from swarmscope.controller.fleet_proc import make_fleet
        from swarmscope.controller.metrics import RunMetrics
        from swarmscope.controller.otel import RunSpans
        from swarmscope.controller.role import ControllerRole
        from swarmscope.controller.store import ResultStore
        from swarmscope.controller.tracers.base import TracerConfig, make_tracer

        cfg, kind = self.cfg, self.kind
        assert cfg, "the controller needs the run's config"
        rid = run_id or new_run_id(kind.name)
        out = os.path.abspath(cfg.out)
        run_dir = make_run_dir(out, rid)  # fresh, 0750; an --out that is a symlink or not ours: refused
        self.run = RunInfo(
            run_id=rid,
            scenario=kind.name,
            metric=kind.metric,
            config=cfg.as_dict(),
            started_ns=time.time_ns(),
            run_dir=run_dir,
        )
        # The span listener goes first: it sets run.trace_id at run_started, which the store saves.
        self.spans = RunSpans.attach(self.events)
        self.store = ResultStore(os.path.join(out, "swarmscope.sqlite"))
        # Claimed before the row exists: if this process is killed, the next run's start marks
        # the row `interrupted` (swarmscope.app.lifecycle.sweep_stale).
        owners.claim("run", rid, db=os.path.abspath(self.store.path))
        self.store.attach(self.events)
        # The token: a file, else $SWARMSCOPE_TOKEN (the Helm chart's Secret), else a fresh one
        # that only the embedded probe is given.
        if cfg.token_file or os.environ.get(auth.TOKEN_ENV):
            token = auth.load_token(cfg.token_file or None)
        else:
            token = auth.new_token()
        self.fleet = make_fleet(
            token,
            bind=cfg.grpc_bind,
            tls=fleet_tls(cfg),
            heartbeat_budget=cfg.heartbeat_budget,
            # Known in advance, the fleet's size paces its first probes as much as its last.
            expect_probes=cfg.expect_probes if cfg.probe == "external" else 0,
        )
        self.fleet.start()
        self.metrics = RunMetrics.attach(self.events, kind.metric, self.fleet)
        if cfg.metrics_port:
            self.metrics.serve(int(cfg.metrics_port), cfg.metrics_bind)
        # A progress line per window with "done/planned eta"; a free run (locust -f) sets
        # printer.total = 0: its windows follow the user's starts and stops, not a plan.
        self.printer = IterationPrinter(kind, sum(p.iterations for p in kind.points(cfg)))
        self.events.iteration_done.add_listener(self.printer)
        if cfg.probe == "embedded":
            from swarmscope.controller.embedded import EmbeddedProbe

            self.probe = EmbeddedProbe.start(
                f"127.0.0.1:{self.fleet.port}",
                token,
                os.path.join(run_dir, "probe.log"),
                programs=sorted(kind.programs(cfg, {})),
            )
            self.probe.wait_registered(self.fleet, cfg.probe_timeout_s)
        # With external probes (a cluster) nothing waits here: a controller must come up (and
        # pass its readiness probe) before the probe pods can reach it. Runs wait at their start.
        if isinstance(cfg, TracerConfig) and cfg.tracer != "none":
            from swarmscope.workers.native import ensure_built

            self.tracer = make_tracer(cfg, sentinel=ensure_built().tiny)
        self.controller = ControllerRole(
            self.run,
            self.fleet,
            self.events,
            reconcile=lambda outcome: kind.reconcile(cfg, outcome),
            tracer=self.tracer,
            window_timeout_s=cfg.window_timeout_s,
        )
        self.events.run_started.fire(run=self.run)
        self._started = True

    def set_up_worker(self, cfg: RunConfig | Mapping[str, Any], sim_nodes: int, prefix: str = "") -> Any:
        """Make the kind's driver (once): ``sim_nodes`` simulated nodes, or the real node (0).

        ``cfg`` as the master sent it (a dict) is validated again by the kind's schema, with no
        environment layer: a worker runs the master's values, whatever its own env says."""
        typed = cfg if isinstance(cfg, RunConfig) else self.kind.schema.load(data=cfg, env={})
        if self.worker is not None:
            return self.worker
        if sim_nodes > 0 and os.geteuid() != 0:
            from swarmscope.core.errors import SetupError

            raise SetupError(
                "needs root: simulated nodes are cgroups this process creates. Run it as root "
                "(sudo), or in a cluster on real nodes (NODE_NAME set)."
            )
        if self.role == "worker":
            self.cfg = typed
        self.worker = self.kind.make_driver(typed, sim_nodes, prefix)
        # The process's imports and driver stay for its whole life: keep them out of full
        # collections, which would otherwise pause every user for tens of ms mid-step.
        freeze_setup_heap()
        return self.worker

    # -- teardown -------------------------------------------------------------------------------
    def _store_kind_sections(self) -> list[dict[str, str]]:
        """The kind's report sections from every window measured (also in a failed run).

        Returns what could not be built or stored, one row per problem: a kind's section that
        raises (a bug, a value JSON cannot hold) costs that section, never the run's report,
        whose windows are already in the store."""
        assert self.run is not None
        errors: list[dict[str, str]] = []
        try:
            self.kind.register_renderers()
            sections = self.kind.sections(self.cfg, list(self.controller.results), self.run.run_dir)
        except Exception as e:  # any bug of a kind's code: reported, not raised
            log.exception("the %s kind's report sections could not be built", self.kind.name)
            return [{"section": "*", "error": f"{type(e).__name__}: {e}"}]
        for name, data in sections.items():
            try:
                self.store.add_section(self.run.run_id, name, data)
            except SwarmscopeError as e:
                log.error("report section %r not stored: %s", name, e)
                errors.append({"section": name, "error": str(e)})
        return errors

    def _store_checks(self) -> None:
        """Evaluate the run's checks (validated when the config was loaded) over its report;
        the results are the report's ``checks`` section."""
        assert self.run is not None
        if not self.checks and not self.cfg.checks:
            return
        from swarmscope.controller.checks import evaluate, parse_checks, render_section
        from swarmscope.controller.report import build_report
        from swarmscope.controller.sections import register_section

        checks = self.checks or parse_checks((t, "config") for t in self.cfg.checks or [])
        results = evaluate(checks, build_report(self.store, self.run.run_id))
        # Renderers come from this process's registry by section name (the store names no code).
        register_section("checks")(render_section)
        self.store.add_section(self.run.run_id, "checks", results)

    @property
    def closed(self) -> bool:
        """Whether close() ran (the report, if any, is written)."""
        return self._closed

    def close(self, status: str = "ok", write_report: bool = True) -> dict[str, Any] | None:
        """Finish the run (the kind's sections, events, report), then tear down probe, fleet and
        nodes. Idempotent."""
        if self._closed:
            return self.report
        self._closed = True
        ctl = self.controller
        if ctl is not None and self.run is not None:
            status = final_status(status, ctl.results)
        try:
            if self.run is not None and not self._started:
                # Failed while starting (a port in use, no BPF): nothing was stored or measured,
                # so no run_finished (the store has no row to finish) and no report.
                owners.release("run", self.run.run_id)
            elif self.run is not None:
                try:
                    if write_report and self.store is not None and self.controller is not None:
                        errors = self._store_kind_sections()
                        if errors:  # the report says what is missing from it, and the run failed
                            self.store.add_section(self.run.run_id, "section_errors", errors)
                            status = "failed"
                finally:
                    self.events.run_finished.fire(run=self.run, status=status)
                    owners.release("run", self.run.run_id)
                if write_report and self.store is not None:
                    from swarmscope.controller.report import write_report as _write

                    self._store_checks()

                    self.report = _write(self.store, self.run.run_id, self.run.run_dir)
                    self.events.report_written.fire(
                        run=self.run, report=self.report, run_dir=self.run.run_dir
                    )
        finally:
            if self.fleet is not None and self.cfg.probes_at_exit == "shutdown":
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


def fleet_tls(cfg: Any) -> Any:
    """TLS files of the probe fleet from the config; None for plaintext (one machine, loopback)."""
    from swarmscope.core.errors import ConfigError, Problem
    from swarmscope.core.tls import TLSFiles

    files = TLSFiles(cert=cfg.tls_cert, key=cfg.tls_key, ca=cfg.tls_client_ca)
    if not files.enabled:
        return None
    problems = []
    if not (files.cert and files.key):
        problems.append(Problem("config", "tls_cert/tls_key", "TLS needs both the certificate and its key"))
    if cfg.probe == "embedded":
        problems.append(
            Problem(
                "config",
                "tls_cert",
                "TLS is for external probes (a cluster); the embedded probe is on loopback",
            )
        )
    if problems:
        raise ConfigError(problems)
    return files


def final_status(status: str, results: Any) -> str:
    """The run's status once its windows are known: an "ok" run that measured nothing is
    "failed" (and says why in the log); any other status stands."""
    results = list(results)
    if status != "ok":
        return status
    if not results:
        # Under `locust -f`, `-t` counts from Locust's start: a run whose probes or workers
        # came late can end before its first window. An empty run is not a measurement.
        log.warning("no window was measured (the run ended before its first window): the run is failed")
        return "failed"
    if kernel_missing_everywhere(results):
        log.warning("no kernel count for any node in any window (sources missing): the run is failed")
        return "failed"
    return status


def kernel_missing_everywhere(results: Any) -> bool:
    """True when there were windows and not one node of any had a kernel count because a
    source was missing (a probe, a worker). Kinds that count nothing in the kernel (ingress:
    kernel None, nothing missing) are not caught by it."""
    results = list(results)
    return bool(results) and all(n.kernel is None and n.missing for r in results for n in r.per_node)


def hostname() -> str:
    return socket.gethostname()
