"""``swarmscope run`` of any kind: wires Locust, the process and its workers, then sweeps.

    report = run_scenario(kind, cfg)      # mode embedded (default) or distributed

- **embedded**: one process, Locust's LocalRunner; the kind's driver (simulated nodes n1..nN)
  lives in this process, set up over the same messages as a remote worker.
- **distributed**: this process is the Locust master; workers are separate processes that talk
  to it only over the network (Locust's ZMQ) and get the run's config from it; probes talk
  gRPC. With ``spawn_workers`` the workers are started here (one machine); without, the run
  waits for ``workers`` external ones (a cluster).

A worker or probe that dies mid-run leaves its nodes *missing* in the windows it missed; the
run goes on and every other reading is kept. A failure keeps every finished window: the store
has them, the kind's sections are built from them, and the report is written with status
"failed" or "interrupted". SIGTERM and SIGINT stop it in that order (swarmscope.app.lifecycle);
at start it sweeps what killed earlier runs left (docs/lifecycle.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from swarmscope.controller.options import RunConfig
from swarmscope.core.sys import owners


def _spawn_workers(kind: Any, cfg: RunConfig, port: int, log_dir: str) -> list[subprocess.Popen[bytes]]:
    procs = []
    for i in range(cfg.workers):
        log = open(os.path.join(log_dir, f"worker-{i + 1}.log"), "ab")
        # The worker gets its kind's locustfile and the master's address, nothing else: the
        # run's config reaches it over the network (swarmscope:setup).
        cmd = [
            sys.executable, "-m", "swarmscope", "worker", "--controller", "127.0.0.1",
            "--locust-port", str(port), "--kind", kind.name,
        ]  # fmt: skip
        procs.append(
            subprocess.Popen(
                owners.dying_with_us(cmd),  # a SIGKILLed master takes its workers
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        log.close()
    return procs


def _stop_workers(workers: list[subprocess.Popen[bytes]], grace_s: float = 15.0) -> None:
    """After runner.quit(), which told the workers to quit: each tears its nodes and targets down
    and exits. A SIGTERM meanwhile started Locust's second shutdown in the worker, whose
    sys.exit cut the first one short (namespaces, veths with XDP, pins left behind): only a
    worker still running after ``grace_s`` gets one, then SIGKILL."""
    import time

    deadline = time.monotonic() + grace_s
    for w in workers:
        try:
            w.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for w in workers:
        if w.poll() is None:
            w.terminate()
    for w in workers:
        try:
            w.wait(15)
        except subprocess.TimeoutExpired:
            w.kill()


def _worker_token(cfg: RunConfig, host: str) -> None:
    """Workers authenticate to the master and the master to them (CURVE, swarmscope.app.workerauth).
    Workers started here inherit a fresh per-run token and the master's public key through the
    environment; the master's secret key stays in this process ($SWARMSCOPE_MASTER_KEY_FILE if
    set, else made for the run). External workers need the token and the public key; without a
    token the master refuses to listen beyond loopback."""
    from swarmscope.app import workerauth
    from swarmscope.core import auth
    from swarmscope.core.errors import SetupError

    if cfg.spawn_workers:
        import zmq

        if not workerauth.load_token():
            os.environ[workerauth.ENV_TOKEN] = auth.new_token()
        public = zmq.curve_public(workerauth.master_secret(make=True))
        os.environ.pop(workerauth.ENV_MASTER_PUBLIC_FILE, None)  # the workers take this one
        os.environ[workerauth.ENV_MASTER_PUBLIC] = public.decode()
    elif workerauth.load_token():
        workerauth.master_secret()  # the master's own key, or one clear error now
    elif host not in ("127.0.0.1", "localhost", "::1"):
        raise SetupError(
            f"master_bind={cfg.master_bind} with external workers needs a worker token: set "
            f"${workerauth.ENV_TOKEN} (or ${workerauth.ENV_TOKEN_FILE}) for the master and every worker"
        )
    else:
        print(
            f"swarmscope: external workers are not authenticated (set ${workerauth.ENV_TOKEN} on the "
            "master and the workers); listening on loopback only",
            file=sys.stderr,
        )
    workerauth.install()


def _sweep_master(env: Any, host: str, port: int) -> Any:
    """Locust's master for a sweep. Locust re-checks after every message from a worker whether
    all workers stopped, copying its list of workers each time: O(workers) per heartbeat, so
    O(workers²) a second (1,000 workers: ~6 % of the master's samples; 10,000: more than a
    core; docs/scale-out-workers.md). A sweep starts no Locust users, so while the runner has never
    started there is nothing to find stopped; a started one checks as Locust does."""
    from locust.runners import STATE_INIT, STATE_STOPPED, MasterRunner

    class SweepMaster(MasterRunner):
        def check_stopped(self) -> None:
            if self.state not in (STATE_INIT, STATE_STOPPED):
                super().check_stopped()

    return env._create_runner(SweepMaster, master_bind_host=host, master_bind_port=port)


def run_scenario(
    kind: Any, cfg: RunConfig, run_id: str | None = None, checks: list[Any] | None = None
) -> dict[str, Any] | None:
    import locust  # noqa: F401  (gevent monkey-patching before anything else starts threads)

    from swarmscope.app.lifecycle import stop_on_signals, sweep_stale

    sweep_stale()  # what a killed earlier run left (cgroups, netns, links, its `running` row)
    with stop_on_signals() as sigs:
        return _run(kind, cfg, run_id, sigs, checks)


def _run(
    kind: Any, cfg: RunConfig, run_id: str | None, sigs: Any, checks: list[Any] | None
) -> dict[str, Any] | None:
    from locust.env import Environment

    from swarmscope.app.plugin import register_messages
    from swarmscope.app.process import SwarmscopeProcess
    from swarmscope.controller.sweep import Sweep

    env = Environment(user_classes=[])
    distributed = cfg.mode == "distributed"
    runner: Any
    if distributed:
        host, port = cfg.master_bind.rsplit(":", 1)
        _worker_token(cfg, host)
        runner = _sweep_master(env, host, int(port))
        proc = SwarmscopeProcess.make(cfg, kind, role="master", run_id=run_id)
    else:
        runner = env.create_local_runner()
        proc = SwarmscopeProcess.make(cfg, kind, role="local", run_id=run_id)
    env.swarmscope = proc  # type: ignore[attr-defined]
    proc.checks = list(checks or [])
    register_messages(proc, runner)
    assert proc.run is not None and proc.controller is not None
    print(f"swarmscope: run {proc.run.run_id} -> {proc.run.run_dir}", file=sys.stderr)
    workers: list[subprocess.Popen[bytes]] = []
    status = "failed"
    try:
        if distributed and cfg.spawn_workers:
            workers = _spawn_workers(kind, cfg, int(port), proc.run.run_dir)
        Sweep(proc, runner, distributed).run()
        status = "ok"
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (stop_on_signals): the report is still written
        status = "interrupted"
        raise
    finally:
        sigs.disarm()  # the teardown below runs to its end whatever arrives now
        try:
            report = proc.close(status)  # builds the kind's sections from what was measured
        finally:
            runner.quit()
            _stop_workers(workers)
    return report
