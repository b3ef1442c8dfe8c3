"""The controller's own options, shared by every scenario kind (where results go, how probes
and workers are reached). Each declares its env var (``SWARMSCOPE_<KEY>``); the precedence is
swarmscope.core.config's: defaults < file < env < --set.
"""

from __future__ import annotations

from swarmscope.core.config import Config, Field, host_port, list_of

# Heartbeats a second the probe fleet may receive from its direct sessions (probes and relays),
# all together: past ``budget x interval`` sessions the interval a probe is handed grows with the
# fleet (controller/fleet_state.py, ``pace``). Its one declaration: the run's option below, the
# Fleet's and the relay's defaults read it. 500 leaves fleets of up to 500 probes at the 1 s
# interval they always had, and costs ~3 % of a core at any size (~60 µs per heartbeat).
HEARTBEAT_BUDGET = 500.0

COMMON_FIELDS = [
    Field("scenario", str, "", "scenario kind, one of the registry's (swarmscope.kinds.KINDS)"),
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
    Field(
        "heartbeat_budget",
        float,
        HEARTBEAT_BUDGET,
        "heartbeats/s the probe fleet takes from all its probes: a bigger fleet is handed a longer "
        "heartbeat interval (and a liveness that long in proportion)",
        min=1,
        max=1_000_000,
    ),
    Field("probe_timeout_s", float, 60.0, "how long to wait for probes to register", min=1, max=3600),
    Field(
        "probes_at_exit",
        str,
        "shutdown",
        "shutdown: tell every probe (and relay) to stop when the controller stops; keep: only end "
        "their sessions, so long-lived ones (the chart's DaemonSet, `swarmscope controller` sets "
        "it) stay up and register with the next controller",
        choices=("shutdown", "keep"),
    ),
    Field(
        "window_timeout_s",
        float,
        30.0,
        "how long to wait for probes' readings at a window's close",
        min=1,
        max=600,
    ),
    Field(
        "live_interval_s",
        float,
        2.0,
        "while a free-running swarm's window is open (locust -f, web UI), read every probe's "
        "counts so far this often, without closing the window: the SWARMSCOPE tab's live row "
        "and chart; 0: off (sweeps never read mid-window)",
        min=0,
        max=3600,
    ),
    Field(
        "grpc_bind",
        str,
        "127.0.0.1:0",
        "where the probe fleet listens (host:port; port 0 picks one)",
        check=host_port,
    ),
    Field("token_file", str, "", "file holding the controller/probe token (default: a fresh token per run)"),
    Field(
        "tls_cert",
        str,
        "",
        "TLS for the probe fleet: the controller's certificate (PEM; with probe=external)",
    ),
    Field("tls_key", str, "", "TLS for the probe fleet: the key of tls_cert (PEM)"),
    Field(
        "tls_client_ca", str, "", "mTLS: only probes with a client certificate this CA signed get in (PEM)"
    ),
    Field(
        "metrics_port",
        int,
        0,
        "serve the controller's Prometheus /metrics on this port (0: off)",
        min=0,
        max=65535,
    ),
    Field(
        "metrics_bind",
        str,
        "127.0.0.1",
        "address the controller's /metrics listens on (a cluster's controller: 0.0.0.0, to be scraped)",
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
        max=10_000,
    ),
    Field(
        "spawn_workers",
        bool,
        True,
        "distributed: start the workers on this machine (false: wait for external ones)",
    ),
    Field(
        "master_bind",
        str,
        "127.0.0.1:5557",
        "distributed: where the Locust master listens (host:port)",
        check=host_port,
    ),
    Field(
        "worker_timeout_s",
        float,
        60.0,
        "distributed: how long to wait for workers to connect",
        min=1,
        max=3600,
    ),
    Field(
        "checks",
        list_of(str),
        None,
        "pass/fail checks over report.json, e.g. 'loss_ratio.max < 0.01' (a failed one exits 99)",
        nullable=True,
    ),
]


class RunConfig(Config):
    """The options every kind has, typed (a kind's config class extends this one)."""

    scenario: str
    out: str
    probe: str
    expect_probes: int
    heartbeat_budget: float
    probe_timeout_s: float
    probes_at_exit: str
    window_timeout_s: float
    live_interval_s: float
    grpc_bind: str
    token_file: str
    tls_cert: str
    tls_key: str
    tls_client_ca: str
    metrics_port: int
    metrics_bind: str
    mode: str
    workers: int
    spawn_workers: bool
    master_bind: str
    worker_timeout_s: float
    checks: list[str] | None
