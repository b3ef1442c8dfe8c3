"""``swarmscope controller`` and ``swarmscope worker``: the Locust master and worker, with swarmscope.

    swarmscope controller --scenario scenarios/exec_storm.yaml --grpc-port 7001 --metrics-port 9646
    swarmscope worker --controller swarmscope-controller --locust-port 5557   # takes the controller's kind

They run Locust itself (``locust -f <the scenario's locustfile> --master`` / ``--worker``) with
the swarmscope options filled in, so the web UI, the headless flags and everything else Locust
accepts still work: anything after ``--`` is passed to Locust unchanged. This is what the Helm
chart runs; on one machine ``swarmscope run`` or plain ``locust -f`` are simpler.

``swarmscope controller --sweep --workers N`` runs the scenario's sweep instead (points ×
windows, as ``swarmscope run`` does, with the same reconcile) as a Locust master waiting for N
external workers and the probes on the same ports, then exits: for kinds whose exact checks
exist only in the sweep (neighbor writes: the worker's agent programs the datapath per window;
free-running Locust users write the control plane only). Locust arguments after ``--`` are
ignored then.
"""

from __future__ import annotations

import argparse
from typing import Any

from swarmscope.core.paths import SCENARIOS as SCENARIO_DIR


def locustfile_for(kind: str) -> str:
    path = SCENARIO_DIR / f"{kind}.py"
    if not path.is_file():
        from swarmscope.core.errors import SetupError

        raise SetupError(f"no locustfile for scenario kind {kind!r} ({path})")
    return str(path)


def register(sub: Any) -> None:
    c = sub.add_parser("controller", help="Locust master + probe fleet + metrics (cluster mode)")
    c.add_argument("--scenario", required=True, help="scenario YAML")
    c.add_argument("--locust-port", type=int, default=5557)
    c.add_argument("--grpc-port", type=int, default=7001)
    c.add_argument("--metrics-port", type=int, default=9646)
    c.add_argument("--web-port", type=int, default=8089)
    c.add_argument(
        "--bind-host",
        default=None,
        help="address of the Locust master port and the probe fleet (default: $POD_IP, else 127.0.0.1)",
    )
    c.add_argument(
        "--web-host",
        default="127.0.0.1",
        help="address of the web UI (default 127.0.0.1: reach it with kubectl port-forward)",
    )
    c.add_argument(
        "--no-web-login",
        dest="web_login",
        action="store_false",
        help="serve the web UI without Locust's login page (default: login, password from "
        "$SWARMSCOPE_WEB_PASSWORD_FILE or $SWARMSCOPE_WEB_PASSWORD)",
    )
    c.add_argument(
        "--sweep",
        action="store_true",
        help="run the scenario's sweep (points x windows, as `swarmscope run`) with external "
        "workers and probes, then exit, instead of free-running Locust users",
    )
    c.add_argument("--workers", type=int, default=1, help="--sweep: worker pods to wait for (default 1)")
    c.add_argument(
        "--run-once",
        metavar="ID",
        default="",
        help="headless or --sweep only: run the scenario at most once for ID (claimed in "
        "<out>/.run-once-ID.json); a restarted controller that finds the claim idles instead "
        "(the chart: once per upgrade)",
    )
    c.add_argument("locust_args", nargs=argparse.REMAINDER, help="-- then extra Locust arguments")
    c.set_defaults(func=_controller)
    w = sub.add_parser("worker", help="Locust worker with swarmscope's nodes (cluster mode)")
    w.add_argument("--controller", required=True, help="controller host (the Locust master)")
    w.add_argument("--locust-port", type=int, default=5557)
    w.add_argument(
        "--kind",
        default="",
        help="optional check: refuse a controller that runs another scenario kind (by default the "
        "worker takes the controller's kind and config from it)",
    )
    w.add_argument("locust_args", nargs=argparse.REMAINDER, help="-- then extra Locust arguments")
    w.set_defaults(func=_worker)


def _extra(args: argparse.Namespace) -> list[str]:
    extra = list(args.locust_args)
    return extra[1:] if extra and extra[0] == "--" else extra


def _load(path: str) -> tuple[str, str]:
    """The scenario's kind and results directory (validated here: a bad file fails before
    Locust starts). A kind without a locustfile is refused here, with the kind's reason."""
    from swarmscope.core.errors import SetupError
    from swarmscope.kinds import load_scenario

    kind, cfg = load_scenario(path, [])
    if not (SCENARIO_DIR / f"{kind.name}.py").is_file():
        why = f"it has no locustfile (scenarios/{kind.name}.py)"
        raise SetupError(
            f"swarmscope controller does not run the {kind.name} scenario: {why} "
            f"(run it with: swarmscope run {path})"
        )
    return str(kind.name), str(cfg.out)


def _locust(argv: list[str], kind: str) -> int:
    import sys

    from locust.main import main as locust_main

    sys.argv = ["locust", *argv]
    try:
        locust_main()
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def _bind_host(args: argparse.Namespace) -> str:
    """The one address every controller port binds: --bind-host, else the pod's IP, else loopback."""
    import os

    return str(args.bind_host or os.environ.get("POD_IP") or "127.0.0.1")


def controller_argv(args: argparse.Namespace, kind: str) -> list[str]:
    """The Locust command line of ``swarmscope controller``: every port bound narrowly."""
    host = _bind_host(args)
    web_login = args.web_login and "--headless" not in _extra(args)  # headless: no web UI at all
    if web_login:
        from swarmscope.app import weblogin

        weblogin.load_password()  # fail here, with one line, not in the middle of Locust's start
    return [
        "-f", locustfile_for(kind), "--master", "--master-bind-host", host,
        "--master-bind-port", str(args.locust_port), "--web-host", args.web_host,
        "--web-port", str(args.web_port), *(["--web-login"] if web_login else []),
        "--ss-scenario-file", args.scenario, "--ss-grpc-bind", f"{host}:{args.grpc_port}",
        "--ss-probe", "external", "--ss-probes-at-exit", "keep",
        "--ss-metrics-port", str(args.metrics_port),
        # the metrics port is the one on every interface: the kubelet's probes and scrapers
        # reach it on the pod address (the chart's NetworkPolicy says who may)
        "--ss-metrics-bind", "0.0.0.0", *_extra(args),
    ]  # fmt: skip


def sweep_sets(args: argparse.Namespace) -> list[str]:
    """``swarmscope run --set``s of ``swarmscope controller --sweep``: the same ports and binds as
    the Locust master's (controller_argv), the workers and probes external."""
    host = _bind_host(args)
    return [
        "mode=distributed", "spawn_workers=false", f"workers={args.workers}",
        f"master_bind={host}:{args.locust_port}", "probe=external", "probes_at_exit=keep",
        f"grpc_bind={host}:{args.grpc_port}", f"metrics_port={args.metrics_port}", "metrics_bind=0.0.0.0",
    ]  # fmt: skip


def _controller(args: argparse.Namespace) -> int:
    kind, out = _load(args.scenario)

    def run() -> int:
        if args.sweep:
            from swarmscope.app.commands.run import run_file

            return int(run_file(args.scenario, sweep_sets(args)))
        return _locust(controller_argv(args, kind), kind)

    if not args.run_once:
        return run()
    import os
    import sys

    from swarmscope.controller.once import RunOnce
    from swarmscope.core.errors import SetupError

    if not args.sweep and "--headless" not in _extra(args):
        raise SetupError(
            "--run-once is for headless runs (-- --headless ...) and --sweep: the web UI starts runs itself"
        )
    gate = RunOnce(out, args.run_once)
    if not gate.claim():
        stop = _hold_probes(args)
        try:
            return gate.idle(args.metrics_port)
        finally:
            stop()
    argv = list(sys.orig_argv)  # before Locust rewrites sys.argv
    rc = run()
    from swarmscope.app.lifecycle import STOPS

    if STOPS:  # stopped (a pod's stop sends SIGTERM once): exit, as asked, not idle; a restart
        return rc  # finds the run cut short, as after a kill
    gate.finish(rc)
    # Idle in a fresh process (Locust's servers may still hold the metrics port in this one):
    # it finds the claim. Not an exit: the Deployment would restart the container.
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)
    return rc  # pragma: no cover (execv does not return)


def _hold_probes(args: argparse.Namespace) -> Any:
    """While a run-once controller idles: a fleet on the run's gRPC port that takes the probes'
    and relays' sessions and opens no window, so they stay up and connected instead of dialling
    a closed port until their retries run out and their pods crash-loop (docs/cluster.md). The
    next controller (the next helm upgrade) takes them over. Returns its stop."""
    import logging

    from swarmscope.app.process import fleet_tls
    from swarmscope.controller.fleet_proc import make_fleet
    from swarmscope.core import auth
    from swarmscope.core.errors import SetupError
    from swarmscope.kinds import load_scenario

    _, cfg = load_scenario(args.scenario, ["probe=external"])
    try:
        token = auth.load_token(cfg.token_file or None)
    except SetupError:  # no token, no probes of ours to hold
        return lambda: None
    host = _bind_host(args)
    fleet = make_fleet(token, f"{host}:{args.grpc_port}", tls=fleet_tls(cfg))
    fleet.start()
    logging.getLogger("swarmscope.controller").info(
        "controller: holding the probes' sessions on %s:%d while idle", host, args.grpc_port
    )
    return fleet.stop


def _worker(args: argparse.Namespace) -> int:
    import pathlib

    from swarmscope.app import plugin
    from swarmscope.kinds import get_kind

    # Every worker starts on the placeholder and takes the kind, its User classes and init hooks
    # from the master's set-up (plugin._learn_kind); --kind only checks the master's kind.
    locustfile = pathlib.Path(plugin.__file__).with_name("worker_locustfile.py")
    if args.kind:
        plugin.expect_kind(str(get_kind(args.kind, "--kind").name))
    argv = [
        "-f", str(locustfile), "--worker", "--master-host", args.controller,
        "--master-port", str(args.locust_port),
    ]  # fmt: skip
    return _locust([*argv, *_extra(args)], args.kind or "")
