"""The sweep orchestrator behind ``swarmscope run``: points × iterations, one window each.

    report = run_sweep(kind, cfg)     # mode embedded (default) or distributed

For each point (a node count) and each iteration it opens a window (tracer ready, probes
snapshotted), tells the workers to burst on the point's nodes (a Locust custom message), waits
for their exact counts, closes the window and reconciles. Locust stays the load engine: the
bursts run in Locust's runners and show in its stats.

- **embedded**: one process, Locust's LocalRunner; simulated nodes n1..nN in this process.
- **distributed**: this process is the Locust master; workers are separate processes that talk
  to it only over the network (Locust's ZMQ) and own their nodes; probes talk gRPC. With
  ``spawn_workers`` the workers are started here (one machine); without, the run waits for
  ``workers`` external ones (a cluster).

A worker or probe that dies mid-run leaves its nodes *missing* in the iterations it missed;
the run goes on and every other reading is kept. A failure keeps every finished iteration: the
store has them, and the report is written with status "failed" or "interrupted".
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from typing import Any

from swarmscope.controller.model import PointInfo
from swarmscope.errors import FleetError


class Progress:
    """A one-line progress bar on stderr (silent when stderr is not a terminal)."""

    def __init__(self, total: int):
        self.total = total
        self.done = 0
        self.t0 = time.monotonic()
        self.tty = sys.stderr.isatty()

    def step(self, label: str) -> None:
        self.done += 1
        frac = self.done / max(self.total, 1)
        bar = "#" * int(frac * 30)
        eta = (time.monotonic() - self.t0) / frac * (1 - frac) if frac else 0
        if self.tty:
            print(
                f"\r[{bar:<30}] {self.done}/{self.total} {label} eta {eta:.0f}s ",
                end="",
                file=sys.stderr,
                flush=True,
            )
            if self.done == self.total:
                print(file=sys.stderr)


def spread(nodes_by_worker: dict[str, list[str]], n: int) -> list[str]:
    """The first ``n`` nodes taken round-robin across workers, so load spreads evenly."""
    order: list[str] = []
    lists = [sorted(v, key=_natural) for _, v in sorted(nodes_by_worker.items())]
    for i in range(max((len(v) for v in lists), default=0)):
        order.extend(v[i] for v in lists if i < len(v))
    return order[:n]


def _natural(name: str) -> tuple[Any, ...]:
    import re

    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def _spawn_workers(
    kind: Any, cfg: Any, port: int, per_worker: int, log_dir: str
) -> list[subprocess.Popen[bytes]]:
    procs = []
    for i in range(cfg["workers"]):
        log = open(os.path.join(log_dir, f"worker-{i + 1}.log"), "ab")
        cmd = [
            sys.executable, "-m", "swarmscope.cli", "worker", "--controller", "127.0.0.1",
            "--locust-port", str(port), "--kind", kind.name, "--",
            "--ss-nodes", str(per_worker), "--ss-pids-max", str(cfg["pids_max"]),
            "--ss-max-execs", str(cfg["max_execs"]), "--ss-out", cfg["out"],
        ]  # fmt: skip
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        log.close()
    return procs


def run_sweep(kind: Any, cfg: Any, run_id: str | None = None) -> dict[str, Any] | None:
    import locust  # noqa: F401  (gevent monkey-patching before anything else starts threads)
    from locust.env import Environment
    from locust.runners import STATE_MISSING

    from swarmscope.controller.plugin import MSG_ANNOUNCE, MSG_BURST, register_messages
    from swarmscope.process import SwarmscopeProcess
    from swarmscope.workers.exec_user import ExecStormUser

    env = Environment(user_classes=[ExecStormUser])
    distributed = cfg["mode"] == "distributed"
    max_nodes = max(cfg["nodes"])
    workers: list[subprocess.Popen[bytes]] = []
    runner: Any
    if distributed:
        host, port = cfg["master_bind"].rsplit(":", 1)
        runner = env.create_master_runner(master_bind_host=host, master_bind_port=int(port))
        proc = SwarmscopeProcess.make(cfg, kind, role="master", run_id=run_id)
    else:
        runner = env.create_local_runner()
        proc = SwarmscopeProcess.make(cfg, kind, role="local", sim_nodes=max_nodes, run_id=run_id)
    env.swarmscope = proc  # type: ignore[attr-defined]
    register_messages(proc, runner)
    assert proc.run is not None and proc.controller is not None
    ctl = proc.controller
    print(f"swarmscope: run {proc.run.run_id} -> {proc.run.run_dir}", file=sys.stderr)
    status = "failed"
    progress = Progress(sum(cfg["iterations"] for _ in cfg["nodes"]))

    def worker_alive(client_id: str) -> bool:
        c = runner.clients.get(client_id) if distributed else None
        return (not distributed) or (c is not None and c.state != STATE_MISSING)

    try:
        if cfg["probe"] == "external":
            print(
                f"swarmscope: waiting for {cfg['expect_probes']} probe(s) on {proc.fleet.address}",
                file=sys.stderr,
            )
            proc.fleet.wait_for_probes(cfg["expect_probes"], cfg["probe_timeout_s"])
        if distributed:
            if cfg["spawn_workers"]:
                per_worker = math.ceil(max_nodes / cfg["workers"])
                workers = _spawn_workers(kind, cfg, int(port), per_worker, proc.run.run_dir)
            _wait_workers(runner, ctl, cfg, max_nodes, MSG_ANNOUNCE)
        by_worker: dict[str, list[str]] = {}
        for d in ctl.nodes.values():
            by_worker.setdefault(d.worker, []).append(d.name)
        for pi, n in enumerate(cfg["nodes"]):
            point = PointInfo(pi, {"nodes": n}, cfg["iterations"])
            proc.events.point_started.fire(run=proc.run, point=point)
            names = spread(by_worker, n)
            results = []
            for it in range(1, cfg["iterations"] + 1):
                win = ctl.open_window(point, it, names)
                burst = {
                    "window_id": win.window_id,
                    "nodes": names,
                    "duration_s": cfg["burst_s"],
                    "concurrency": cfg["concurrency"],
                    "rate": cfg["rate_per_node"],
                }
                runner.send_message(MSG_BURST, burst)  # embedded: runs the bursts and returns after them
                results.append(
                    ctl.close_window(
                        win,
                        point,
                        generated_timeout_s=cfg["burst_s"] + cfg["window_timeout_s"],
                        alive=worker_alive,
                        expected_per_node=cfg["rate_per_node"] * cfg["burst_s"] or None,
                    )
                )
                progress.step(f"nodes={n} iteration {it}")
                if cfg["pause_s"]:
                    time.sleep(cfg["pause_s"])
            proc.events.point_done.fire(run=proc.run, point=point, results=results)
        status = "ok"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        report = proc.close(status)
        runner.quit()
        for w in workers:
            if w.poll() is None:
                w.terminate()
        for w in workers:
            try:
                w.wait(15)
            except subprocess.TimeoutExpired:
                w.kill()
    return report


def _wait_workers(runner: Any, ctl: Any, cfg: Any, max_nodes: int, announce: str) -> None:
    deadline = time.monotonic() + cfg["worker_timeout_s"]
    asked = 0.0
    while True:
        if runner.worker_count >= cfg["workers"] and len(ctl.nodes) >= max_nodes:
            return
        if time.monotonic() - asked > 1.0:
            runner.send_message(announce, {})
            asked = time.monotonic()
        if time.monotonic() > deadline:
            port = cfg["master_bind"].rsplit(":", 1)[1]
            raise FleetError(
                f"timed out after {cfg['worker_timeout_s']:.0f}s: {runner.worker_count}/{cfg['workers']} "
                f"workers connected with {len(ctl.nodes)}/{max_nodes} nodes (start them with "
                f"`swarmscope worker --controller <this host> --locust-port {port}`)"
            )
        time.sleep(0.1)
