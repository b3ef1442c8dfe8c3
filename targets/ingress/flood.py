"""The ingress flood: HTTP load in steps against an ingress, honest latency, proxy cost, faults.

    python -m swarmscope.targets.ingress.flood scenarios/ingress_flood.yaml --out results/x \\
        --set steps=10,50 --set step_duration=3          # temporary entry; the lead wires `run`

    cfg = SCHEMA.load(file="scenarios/ingress_flood.yaml", sets=[...])
    section = run_flood(cfg, Path("results/x"))   # report section + PNG plots in results/x

With no ``host`` it starts the local target (targets.ingress.local: nginx LB + two backends in
a netns we create). Before any load: the host is validated (loopback, our namespaces, or an
explicit ``allow_hosts`` entry) and one preflight request must succeed (unreachable and TLS
errors are reported clearly). Load: Locust in-process (Environment + LocalRunner, the
``workers.http_users`` users and step shape) or the real k6 binary (``workers.k6``). The
target's processes are sampled every second (``probes.procstat``); an optional fault strikes
at ``fault_at`` seconds (``controller.faults``) and its client-observed downtime is computed
from the request timeline.

Caveats: importing the Locust engine monkey-patches the process with gevent, so the CLI entry
runs it in its own process; tests run it as a subprocess. The server-side count is the LB's
access-log lines written during the load (the preflight request is excluded).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from swarmscope.config import Config, Field, Schema, list_of
from swarmscope.errors import ConfigError, Problem, SwarmscopeError

log = logging.getLogger(__name__)

# Addresses of namespaces this project makes (targets.ingress.local uses 10.201.X.0/30).
OWN_NETS = [ipaddress.ip_network("10.201.0.0/16")]


def _check_host(v: Any) -> str | None:
    if not v:
        return None
    u = urllib.parse.urlsplit(str(v))
    if u.scheme not in ("http", "https") or not u.hostname:
        return "must be an http:// or https:// URL with a host (or empty for the local target)"
    return None


INGRESS_FIELDS: list[Field] = [
    Field("host", str, "", "target base URL; empty = start the local nginx target", check=_check_host),
    Field(
        "steps",
        list_of(float),
        [100, 200, 300, 400, 500, 600, 700, 800, 900, 1000],
        "users per step (closed) or requests/s per step (open)",
        min=1,
        max=100000,
    ),
    Field("step_duration", float, 30.0, "seconds each step is held", min=1, max=3600),
    Field("engine", str, "locust", "load engine", choices=("locust", "k6")),
    Field(
        "model", str, "closed", "closed (N users) or open (fixed arrival rate)", choices=("closed", "open")
    ),
    Field(
        "open_users",
        int,
        200,
        "open model: users (Locust) / max VUs (k6) serving the schedule",
        min=1,
        max=20000,
    ),
    Field("path", str, "/", "request path"),
    Field(
        "fault",
        str,
        "none",
        "fault to inject",
        choices=("none", "kill-lb-local", "stall-backends-local", "kill-pod"),
    ),
    Field("fault_at", float, 5.0, "seconds after load start when the fault strikes", min=0),
    Field(
        "restart_delay_s",
        float,
        2.0,
        "local target: the LB supervisor restarts it after this",
        min=0,
        max=600,
    ),
    Field("stall_s", float, 1.0, "stall-backends-local: how long the backends freeze", min=0.01, max=600),
    Field("lb_workers", int, 1, "local target: nginx worker processes of the LB", min=1, max=64),
    Field(
        "allow_hosts",
        list_of(str),
        None,
        "hosts (names or IPs) allowed besides loopback and our namespaces",
        nullable=True,
    ),
    Field(
        "proxy_processes",
        list_of(str),
        None,
        "remote/other target: process names to sample (e.g. nginx)",
        nullable=True,
    ),
    Field(
        "generator_bound_pct",
        float,
        90.0,
        "generator CPU (% of a core) at which a step is flagged",
        min=1,
        max=10000,
    ),
    Field("preflight_timeout_s", float, 5.0, "preflight request timeout", min=0.1, max=120),
    Field("tls_verify", bool, True, "verify TLS certificates (https targets)"),
]


def _cross(values: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    if values["host"]:
        r = host_allowed(values["host"], values.get("allow_hosts") or [])
        if r:
            out.append(("host", r))
    if values["fault"].endswith("-local") and values["host"]:
        out.append(("fault", f"{values['fault']} needs the local target (leave host empty)"))
    return out


SCHEMA = Schema(INGRESS_FIELDS, cross_checks=[_cross])


def host_allowed(url: str, allow: list[str]) -> str | None:
    """None when traffic to ``url`` is allowed, else the reason (loopback/own netns/allow-list)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host in allow:
        return None
    if host == "localhost":
        return None
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return f"{host!r} is not loopback or one of our namespaces: add it to allow_hosts to send load there"
    if ip.is_loopback or any(ip in n for n in OWN_NETS):
        return None
    return f"{host} is not loopback or one of our namespaces: add it to allow_hosts to send load there"


def preflight(url: str, timeout: float = 5.0, verify: bool = True) -> int:
    """One GET before any load; returns the status, raises ConfigError saying what is wrong."""
    ctx = ssl.create_default_context()
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=ctx) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)  # the server answers: reachable; HTTP errors are counted in the run
    except urllib.error.URLError as e:
        reason = e.reason
        if isinstance(reason, ssl.SSLError):
            why = f"TLS error talking to {url}: {reason} (set tls_verify=false only for a test server)"
        else:
            why = f"{url} is unreachable: {reason}"
        raise ConfigError([Problem("preflight", "host", why)]) from e
    except (TimeoutError, OSError) as e:
        raise ConfigError([Problem("preflight", "host", f"{url} is unreachable: {e}")]) from e


def _locust_load(cfg: Config, url: str, keep_timeline: bool) -> Any:
    """Run the steps in-process with Locust (LocalRunner + StepShape); returns the recorder."""
    import gevent
    from locust.env import Environment

    from swarmscope.workers import http_users as hu

    hu.setup(
        steps=list(cfg["steps"]), step_duration_s=cfg["step_duration"], model=cfg["model"],
        open_users=cfg["open_users"], path=cfg["path"], keep_timeline=keep_timeline,
        spawn_rate=10000.0,
    )  # fmt: skip
    env = Environment(
        user_classes=[hu.FloodUser], shape_class=hu.StepShape(), host=url.rstrip("/"), stop_timeout=10
    )
    runner = env.create_local_runner()
    rec = hu.start_recorder(time.time())
    runner.start_shape()
    # The shape returns None after the last step; the runner then stops its users gracefully
    # (stop_timeout: a user finishes its request, so every request sent is also recorded).
    total = len(cfg["steps"]) * cfg["step_duration"] + 30
    deadline = time.time() + total
    while runner.state not in ("stopped",) and time.time() < deadline:
        gevent.sleep(0.2)
    runner.quit()
    hu.RECORDER = None  # stops the CPU meter
    return rec


def run_flood(cfg: Config, run_dir: Path) -> dict[str, Any]:
    """Run the whole flood; writes plots to ``run_dir`` and returns the report section."""
    from contextlib import ExitStack

    from swarmscope.controller.faults import make_fault
    from swarmscope.probes.procstat import ProcSampler
    from swarmscope.targets.ingress.local import LocalIngress
    from swarmscope.workers.http_stats import StepRecorder, downtime

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        target: LocalIngress | None = None
        if cfg["host"]:
            url = cfg["host"]
        else:
            target = stack.enter_context(LocalIngress(cfg["restart_delay_s"], cfg["lb_workers"]))
            url = target.url
        url = url.rstrip("/") + cfg["path"]
        preflight(url, cfg["preflight_timeout_s"], cfg["tls_verify"])

        def proxy_pids() -> list[int]:
            return target.lb_pids() if target is not None else []

        sampler = ProcSampler(pids=proxy_pids, names=cfg["proxy_processes"] or None).start()
        before = target.access_log_count() if target is not None else 0
        fault = None
        if cfg["fault"] != "none":
            fault = make_fault(cfg["fault"], at_s=cfg["fault_at"], target=target, stall_s=cfg["stall_s"])
        t0 = time.time()
        if fault is not None:
            fault.arm(t0)
        try:
            if cfg["engine"] == "k6":
                from swarmscope.workers.k6 import run_k6

                res = run_k6(
                    url, list(cfg["steps"]), cfg["step_duration"], cfg["model"], run_dir,
                    max_vus=cfg["open_users"], keep_timeline=fault is not None,
                )  # fmt: skip
                rec: StepRecorder = res.recorder
                extra = {"k6_dropped_iterations": res.dropped_iterations}
            else:
                rec = _locust_load(cfg, url, keep_timeline=fault is not None)
                extra = {}
        finally:
            if fault is not None:
                fault.cancel()
            samples = sampler.stop()
        time.sleep(0.2)  # nginx writes the log line after the response: let the last ones land
        server = target.access_log_count() - before if target is not None else None
        restarts = list(target.restarts) if target is not None else []

    merged = StepRecorder.merge([rec.encode()])
    steps = merged.summary(cfg["generator_bound_pct"])
    key = "rate" if cfg["model"] == "open" else "users"
    totals = ProcSampler.totals(samples)
    for row in steps:
        i = row["step"]
        row[key] = cfg["steps"][i] if i < len(cfg["steps"]) else None
        lo, hi = t0 + i * cfg["step_duration"], t0 + (i + 1) * cfg["step_duration"]
        ser = [s for s in totals if lo <= s["t"] < hi]
        row["proxy"] = {
            "cpu_pct": [round(s["cpu_pct"], 2) for s in ser],
            "rss_kib": [int(s["rss_kib"]) for s in ser],
            "cpu_pct_mean": round(sum(s["cpu_pct"] for s in ser) / len(ser), 2) if ser else 0.0,
            "rss_kib_max": max((int(s["rss_kib"]) for s in ser), default=0),
        }
    faults = []
    if fault is not None:
        for r in fault.records:
            d = downtime(merged.timeline, r["at"]) if "error" not in r else {}
            faults.append({**r, **d, "restart_delay_s": cfg["restart_delay_s"], "restarts": restarts})
    section = {
        "url": url,
        "engine": cfg["engine"],
        "model": cfg["model"],
        "t0": t0,
        "steps": steps,
        "requests": sum(s["requests"] for s in steps),
        "server_requests": server,
        "faults": faults,
        "proxy_samples": samples,
        **extra,
    }
    from swarmscope.targets.ingress.plots import write_plots

    section["plots"] = write_plots(section, run_dir)
    return section


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m swarmscope.targets.ingress.flood")
    ap.add_argument("scenario", nargs="?", help="scenario YAML (scenarios/ingress_flood.yaml)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--out", default="results/ingress", help="run directory (report.json, plots)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    # Steps jump at once on purpose (spawn rate 10000): Locust's "very high spawn rate" warning
    # would repeat every step.
    logging.getLogger("locust.runners").setLevel(logging.ERROR)
    # Locust must monkey-patch (gevent) before any thread or socket exists: import it first.
    import signal

    import swarmscope.workers.http_users  # noqa: F401

    # SIGTERM unwinds like Ctrl-C so the target (netns, nginx) is torn down.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        from swarmscope.controller.scenario import load_scenario

        _, cfg = load_scenario(args.scenario, ["scenario=ingress_flood", *args.set])
        section = run_flood(cfg, Path(args.out))
    except SwarmscopeError as e:
        print(f"swarmscope: {e}", file=sys.stderr)
        return e.exit_code
    out = Path(args.out) / "report.json"
    out.write_text(json.dumps(section, indent=1, default=str))
    print(json.dumps({k: section[k] for k in ("requests", "server_requests")} | {"report": str(out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
