"""The sweep behind ``swarmscope run``, generic over the scenario kind: points × iterations.

    Sweep(proc, runner, distributed=False).run()     # swarmscope.app.run wires proc and runner

First the workers are set up (``swarmscope:setup`` carries the run's config and each worker's
share of simulated nodes; they answer with their nodes and set-up info). Then for each of the
kind's points and each iteration it opens a window on the probes (the kind's programs and
options; tracer ready), sends the kind's payload to the workers (``swarmscope:run``), waits for
their exact results, closes the window and reconciles with the kind's rule. At the end the kind
turns the windows into its report sections. Locust stays the load engine: windows run in
Locust's runners and show in its stats.

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
import sys
import time
from typing import Any

from swarmscope.controller.options import RunConfig
from swarmscope.core import messages as M
from swarmscope.core.errors import FleetError


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


def set_up_workers(
    runner: Any, ctl: Any, cfg: RunConfig, per_worker: int, workers: int, timeout_s: float
) -> dict[str, dict[str, Any]]:
    """Send ``swarmscope:setup`` to every connected worker that has not answered yet (or to
    this process), wait for their nodes; returns {worker: set-up info}."""
    from locust.runners import STATE_MISSING, LocalRunner

    if isinstance(runner, LocalRunner):
        if "local" not in ctl.worker_info:
            runner.send_message(M.SETUP, _setup_msg(cfg, 0, 1, per_worker, ""))
        return dict(ctl.worker_info)
    deadline = time.monotonic() + timeout_s
    asked: dict[str, float] = {}
    while True:
        ids = sorted(cid for cid, c in runner.clients.items() if c.state != STATE_MISSING)
        for cid in ids:
            if cid not in ctl.worker_info and time.monotonic() - asked.get(cid, 0.0) > 2.0:
                # A worker's index is given once and never reused: it names its nodes (w<i>-n<j>).
                i = ctl.worker_slots.setdefault(cid, len(ctl.worker_slots))
                msg = _setup_msg(cfg, i, max(len(ids), workers), per_worker, f"w{i + 1}-")
                runner.send_message(M.SETUP, msg, client_id=cid)
                asked[cid] = time.monotonic()
        if ctl.worker_errors:  # a worker that cannot set up says why: fail now, not at the timeout
            cid, why = sorted(ctl.worker_errors.items())[0]
            raise FleetError(f"worker {cid} could not set up: {why}")
        done = [cid for cid in ids if cid in ctl.worker_info]
        if len(done) >= workers:
            return {cid: ctl.worker_info[cid] for cid in done}
        if time.monotonic() > deadline:
            port = str(cfg.master_bind).rsplit(":", 1)[1]
            raise FleetError(
                f"timed out after {timeout_s:.0f}s: {len(ids)}/{workers} workers connected, "
                f"{len(done)} set up (start them with `swarmscope worker --controller <this host> "
                f"--locust-port {port}`)"
            )
        time.sleep(0.05)


def worker_alive(runner: Any, client_id: str) -> bool:
    """Whether a worker may still send: connected to the master and not missing its heartbeats
    (one quit, or gone silent, will not; a window's close stops waiting for it). A runner
    without workers runs the users in its own process: alive."""
    from locust.runners import STATE_MISSING

    clients = getattr(runner, "clients", None)
    if clients is None:
        return True
    c = clients.get(client_id)
    return c is not None and c.state != STATE_MISSING


def _setup_msg(cfg: RunConfig, index: int, workers: int, sim_nodes: int, prefix: str) -> dict[str, Any]:
    return {
        "kind": cfg.scenario,
        "cfg": cfg.as_dict(),
        "index": index,
        "workers": workers,
        "sim_nodes": sim_nodes,
        "prefix": prefix,
    }


class Sweep:
    """One ``swarmscope run`` of a window-pipeline kind, on a made process and Locust runner."""

    def __init__(self, proc: Any, runner: Any, distributed: bool):
        self.proc = proc
        self.runner = runner
        self.distributed = distributed
        self.kind = proc.kind
        self.cfg: RunConfig = proc.cfg

    def _worker_alive(self, client_id: str) -> bool:
        return worker_alive(self.runner, client_id)

    def run(self) -> None:
        """Run every point; raises on failure (the caller closes the process either way)."""
        proc, kind, cfg, ctl = self.proc, self.kind, self.cfg, self.proc.controller
        points = kind.points(cfg)
        if cfg.probe == "external":
            print(
                f"swarmscope: waiting for {cfg.expect_probes} probe(s) on {proc.fleet.address}",
                file=sys.stderr,
            )
            proc.fleet.wait_for_probes(cfg.expect_probes, cfg.probe_timeout_s)
        workers = int(cfg.workers) if self.distributed else 1
        per_worker = math.ceil(kind.sim_nodes(cfg) / workers)
        infos = set_up_workers(self.runner, ctl, cfg, per_worker, workers, float(cfg.worker_timeout_s))
        shared = kind.shared(cfg, infos)
        by_worker: dict[str, list[str]] = {}
        for d in ctl.nodes.values():
            by_worker.setdefault(d.worker, []).append(d.name)
        ordered = spread(by_worker, len(ctl.nodes))
        progress = Progress(sum(p.iterations for p in points))
        for point in points:
            proc.events.point_started.fire(run=proc.run, point=point)
            names = kind.window_nodes(cfg, point, ordered)
            results = []
            for it in range(1, point.iterations + 1):
                win = ctl.open_window(point, it, names, programs=kind.programs(cfg, shared))
                msg = {
                    "window_id": win.window_id,
                    "payload": kind.payload(cfg, point, it, shared),
                    "traceparent": win.traceparent,
                }
                if self.distributed:  # each worker its own nodes: one message each, not workers²
                    owner = {n: d.worker for n, d in ctl.nodes.items()}
                    for cid, part in M.split_run(names, owner).items():
                        self.runner.send_message(M.RUN, {**msg, **part}, client_id=cid)
                else:  # embedded: runs the window and returns after it
                    self.runner.send_message(M.RUN, {**msg, "nodes": names})
                results.append(
                    ctl.close_window(
                        win,
                        point,
                        timeout_s=kind.window_timeout_s(cfg, point),
                        alive=self._worker_alive,
                    )
                )
                params = " ".join(f"{k}={v}" for k, v in point.params.items())
                progress.step(f"{params} iteration {it}")
                pause = kind.pause_s(cfg)
                if pause:
                    time.sleep(pause)
            proc.events.point_done.fire(run=proc.run, point=point, results=results)
