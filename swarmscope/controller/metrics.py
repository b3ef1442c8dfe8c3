"""The controller's Prometheus metrics: a listener that counts what each window reconciled.

    m = RunMetrics.attach(events)         # counters update on every iteration_done
    m.serve(9646)                         # /metrics and /healthz on that port

Names (``<metric>`` is the run's counted thing, e.g. ``exec``):

- ``swarmscope_<metric>_generated_total{node}`` — counted by the workers
- ``swarmscope_<metric>_kernel_total{node}`` — counted in the kernel by the probes
- ``swarmscope_<metric>_reported_total{node}`` — reported by the tracer / system under test
- ``swarmscope_<metric>_tracer_lost_total`` — "lost N" the tracer itself printed
- ``swarmscope_windows_total{status}`` — windows reconciled: ok, mismatch, missing
- ``swarmscope_window_loss_ratio{node}`` — 1 - reported/kernel of the last window
- ``swarmscope_probes_connected`` — live probes (when a fleet is given)
- ``swarmscope_probe_readings_total`` — readings received from probes
"""

from __future__ import annotations

import errno
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from swarmscope.controller.model import IterationResult, RunInfo
from swarmscope.core.errors import SetupError
from swarmscope.core.events import RunEvents
from swarmscope.core.sys.ports import port_in_use
from swarmscope.probes.selfmetrics import BoundedHTTPServer
from swarmscope.probes.selfmetrics import serve as serve_metrics


class RunMetrics:
    def __init__(self, metric: str = "exec", fleet: Any = None) -> None:
        self.registry = CollectorRegistry()
        self.fleet = fleet
        m = metric.replace("-", "_")
        self.generated = Counter(
            f"swarmscope_{m}_generated", f"{metric} counted by workers", ["node"], registry=self.registry
        )
        self.kernel = Counter(
            f"swarmscope_{m}_kernel",
            f"{metric} counted in the kernel by probes",
            ["node"],
            registry=self.registry,
        )
        self.reported = Counter(
            f"swarmscope_{m}_reported",
            f"{metric} reported by the system under test",
            ["node"],
            registry=self.registry,
        )
        self.lost = Counter(
            f"swarmscope_{m}_tracer_lost", "events the tracer under test said it lost", registry=self.registry
        )
        self.windows = Counter("swarmscope_windows", "windows reconciled", ["status"], registry=self.registry)
        self.loss = Gauge(
            "swarmscope_window_loss_ratio",
            "1 - reported/kernel of the last window",
            ["node"],
            registry=self.registry,
        )
        self.probes = Gauge("swarmscope_probes_connected", "live probes", registry=self.registry)
        self.window_open = Gauge(
            "swarmscope_window_open", "1 while a measurement window is open", registry=self.registry
        )
        self.readings = Gauge(
            "swarmscope_probe_readings_total", "readings received from probes", registry=self.registry
        )
        self.probes.set_function(lambda: len(self.fleet.probes()) if self.fleet is not None else 0)
        self.readings.set_function(lambda: self.fleet.readings_received if self.fleet is not None else 0)
        self._server: BoundedHTTPServer | None = None

    @classmethod
    def attach(cls, events: RunEvents, metric: str = "exec", fleet: Any = None) -> RunMetrics:
        m = cls(metric, fleet)
        events.iteration_done.add_listener(m.on_iteration_done)
        events.window_opened.add_listener(lambda **_: m.window_open.set(1))
        events.window_closed.add_listener(lambda **_: m.window_open.set(0))
        events.run_finished.add_listener(lambda **_: m.window_open.set(0))
        return m

    def on_iteration_done(self, run: RunInfo, result: IterationResult, **_: Any) -> None:
        for n in result.per_node:
            if n.generated is not None:
                self.generated.labels(n.node).inc(n.generated)
            if n.kernel is not None:
                self.kernel.labels(n.node).inc(n.kernel)
            if n.reported is not None:
                self.reported.labels(n.node).inc(n.reported)
            if n.loss_ratio is not None:
                self.loss.labels(n.node).set(n.loss_ratio)
        if result.tracer_lost:
            self.lost.inc(result.tracer_lost)
        status = "ok"
        if any(f.startswith("missing") for f in result.flags):
            status = "missing"
        elif any(f.startswith("harness-mismatch") for f in result.flags):
            status = "mismatch"
        self.windows.labels(status).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve /metrics and /healthz in a thread; return the bound port (0 picks one)."""
        try:  # the probe's server: one implementation of /metrics, its connection cap included
            self._server = serve_metrics(self.registry, port, host)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise port_in_use("Prometheus metrics", f"{host}:{port}", "metrics_port") from e
            raise SetupError(f"cannot serve metrics on {host}:{port}: {e.strerror or e}") from e
        return int(self._server.server_address[1])

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
