"""Shared test helpers: run the CLI as a subprocess, read reports."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent


def run_cli(
    *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "swarmscope"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def only_run_dir(out: pathlib.Path) -> pathlib.Path:
    dirs = [d for d in out.iterdir() if d.is_dir()]
    assert len(dirs) == 1, f"expected one run dir in {out}, found {dirs}"
    return dirs[0]


def load_report(run_dir: pathlib.Path) -> dict:
    return json.loads((run_dir / "report.json").read_text())


def is_root() -> bool:
    return os.geteuid() == 0


def free_port() -> int:
    """A TCP port free on loopback right now (the usual small race is fine in tests)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_procs(procs: Iterable[subprocess.Popen[Any]], grace_s: float) -> None:
    """SIGTERM every process still running, then SIGKILL each one not gone within ``grace_s``
    (all are told first, so they shut down side by side)."""
    ps = list(procs)
    for p in ps:
        if p.poll() is None:
            p.terminate()
    for p in ps:
        try:
            p.wait(grace_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


class Logged(subprocess.Popen[str]):
    """A child whose stdout and stderr go to unnamed files, so its output never waits on a full
    pipe that nobody reads (Locust prints a stats table every 2 s); ``communicate()`` waits and
    returns both, as Popen's does; ``output()`` is what it printed so far."""

    def __init__(self, argv: list[str], **kw: Any):
        self.files = (tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+"))
        super().__init__(argv, stdout=self.files[0], stderr=self.files[1], text=True, **kw)

    def output(self) -> tuple[str, str]:
        texts = []
        for f in self.files:
            f.seek(0)
            texts.append(f.read())
        return texts[0], texts[1]

    def communicate(self, input: str | None = None, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self.output()


def requests_done(base: str) -> int:
    """Locust's own request counter (its web UI's /stats/requests, the "Aggregated" row)."""
    import urllib.request

    with urllib.request.urlopen(base + "/stats/requests", timeout=10) as r:
        return int(json.loads(r.read())["stats"][-1]["num_requests"])


def locust_exec_storm(*args: str) -> Logged:
    """``locust -f scenarios/exec_storm.py ARGS`` from the repo root, its output to files."""
    return Logged([str(BIN / "locust"), "-f", "scenarios/exec_storm.py", *args], cwd=ROOT)


def locust_master_worker(out: pathlib.Path, run_time: str, burst_s: str) -> tuple[Logged, Logged]:
    """A headless exec-storm master on a free loopback port and one worker with two nodes."""
    port = free_port()
    master = locust_exec_storm(
        "--master", "--headless", "-u", "2", "-r", "2", "-t", run_time, "--expect-workers", "1",
        "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
        "--ss-out", str(out), "--ss-burst-s", burst_s,
    )  # fmt: skip
    worker = locust_exec_storm(
        "--worker", "--master-host", "127.0.0.1", "--master-port", str(port), "--ss-nodes", "2"
    )
    return master, worker


def locust_distributed(locustfile: str, workers: int, *opts: str, timeout: float = 180) -> tuple[int, str]:
    """``locust -f LOCUSTFILE --master --headless`` on a free loopback port with ``workers``
    workers, to its end: its exit code and stderr."""
    port = str(free_port())
    common = [str(BIN / "locust"), "-f", locustfile]
    m = subprocess.Popen(
        [*common, "--master", "--headless", "--expect-workers", str(workers), "--master-bind-host",
         "127.0.0.1", "--master-bind-port", port, *opts],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    worker = [*common, "--worker", "--master-host", "127.0.0.1", "--master-port", port]
    ws = [subprocess.Popen(worker, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
          for _ in range(workers)]  # fmt: skip
    try:
        _, err = m.communicate(timeout=timeout)
    finally:
        if m.poll() is None:
            m.kill()
        for w in ws:
            try:
                w.wait(60)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait(30)
    return m.returncode, err


@dataclass
class ChartCommands:
    controller: subprocess.Popen[bytes]
    probe: subprocess.Popen[bytes]
    worker: subprocess.Popen[bytes]
    ports: dict[str, int]  # locust, grpc, metrics, web
    dir: pathlib.Path

    def log(self, name: str) -> str:
        """What ``name`` (controller, probe, worker) printed so far."""
        return (self.dir / f"{name}.log").read_text(errors="replace")


@contextlib.contextmanager
def chart_commands(
    d: pathlib.Path,
    scenario: pathlib.Path,
    kind: str,
    node: str,
    env: dict[str, str],
    controller_args: list[str],
    probe_args: tuple[str, ...] = (),
    controller_env: dict[str, str] | None = None,
    worker_env: dict[str, str] | None = None,
    worker_preexec: Callable[[], Any] | None = None,
) -> Iterator[ChartCommands]:
    """The chart's three commands on this machine, talking over loopback only, as in the chart:
    `swarmscope controller --scenario` (free ports), `swarmscope probe` with the token file and
    `--node`, `swarmscope worker --kind` (both with NODE_NAME). ``env`` holds SWARMSCOPE_TOKEN;
    each one's output goes to ``d/<name>.log``; on exit each is terminated (killed after 30 s).

        with chart_commands(tmp_path, sfile, "exec_storm", "node-1", env, ["--sweep"]) as cc:
            assert cc.controller.wait(240) == 0, cc.log("controller")[-3000:]
    """
    token = d / "token"
    token.write_text(env["SWARMSCOPE_TOKEN"])
    ports = {k: free_port() for k in ("locust", "grpc", "metrics", "web")}
    sw = str(BIN / "swarmscope")
    node_env = {**env, "NODE_NAME": node}
    procs: list[subprocess.Popen[bytes]] = []
    with contextlib.ExitStack() as files:
        logs = {n: files.enter_context(open(d / f"{n}.log", "wb")) for n in ("controller", "probe", "worker")}
        try:
            procs.append(subprocess.Popen(
                [sw, "controller", "--scenario", str(scenario), "--locust-port", str(ports["locust"]),
                 "--grpc-port", str(ports["grpc"]), "--metrics-port", str(ports["metrics"]),
                 "--web-port", str(ports["web"]), *controller_args],
                cwd=ROOT, env={**env, **(controller_env or {})}, stdout=logs["controller"],
                stderr=subprocess.STDOUT,
            ))  # fmt: skip
            procs.append(subprocess.Popen(
                [sw, "probe", "--controller", f"127.0.0.1:{ports['grpc']}", "--token-file", str(token),
                 "--node", node, "--retries", "60", *probe_args],
                cwd=ROOT, env=node_env, stdout=logs["probe"], stderr=subprocess.STDOUT,
            ))  # fmt: skip
            procs.append(subprocess.Popen(
                [sw, "worker", "--kind", kind, "--controller", "127.0.0.1",
                 "--locust-port", str(ports["locust"])],
                cwd=ROOT, env={**node_env, **(worker_env or {})}, stdout=logs["worker"],
                stderr=subprocess.STDOUT,
                preexec_fn=worker_preexec,
            ))  # fmt: skip
            yield ChartCommands(*procs, ports=ports, dir=d)
        finally:
            for p in reversed(procs):  # worker, probe, controller
                if p.poll() is None:
                    p.terminate()
            for p in reversed(procs):
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
