"""A chart pod's stop (issue 29): SIGTERM ends the chart's worker and controller at once.

    .venv/bin/python -m pytest tests/test_pod_stop.py -v -s    # -s: the measured stop times

Each is started with the command and args of its container in the rendered chart (default
values; hosts, ports and paths pointed at this machine) as PID 1 of a PID namespace of its own,
as in a pod: the kernel does not deliver to a PID 1 a signal it has no handler for, so a
process that has none ignores the kubelet's SIGTERM and lives out the pod's grace period (30 s).
SIGTERM must end it within STOP_S, exit 0, with nothing of its process tree left.

Two ways they ignored it, both ended here: the worker waiting for its master (the chart's worker
after a run: the run-once controller idles without Locust's port and the restarted worker
retries its connect, 60 tries 5 s apart) had no SIGTERM handler before Locust's init (now the
CLI's: swarmscope.app.cli); a run-once controller stopped during its run ended the run in order,
then exec'd into its idle, as after a run's own end, and waited there for a second SIGTERM.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import BIN, ROOT, Logged, free_port
from test_chart import docs, helm_template, one, tools  # noqa: F401  (tools: the fixture)

from swarmscope.app.workerauth import new_master_key

sys.path.insert(0, str(ROOT / "bench"))
from fault_harness import _wait_tree_gone, _Watch, leftovers  # bench/: shared with bench/faults.py

pytestmark = [pytest.mark.root, pytest.mark.slow]

STOP_S = 15.0  # half the chart's grace period; measured 0.1-7.8 s here at load (printed with -s)
CONTROLLER_HOST = "t-swarmscope-controller.t.svc"  # how the render (release t, namespace t) names it


class Pod:
    """One container's process as PID 1 of a new PID namespace (``unshare --fork``: its child)."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]):
        self.name = name
        self.proc = Logged(["unshare", "--pid", "--fork", "--kill-child", *argv], cwd=ROOT, env=env)
        deadline = time.monotonic() + 10
        while not (kids := Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()):
            assert time.monotonic() < deadline, f"{name}: unshare started nothing"
            time.sleep(0.02)
        self.pid1 = int(kids[0])  # its host pid
        self.watch = _Watch(self.pid1)

    def wait_for(self, text: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in "".join(self.proc.output()):
            assert self.proc.poll() is None, f"{self.name} exited: {self.proc.output()[1][-3000:]}"
            assert time.monotonic() < deadline, f"{self.name}: no {text!r} in {timeout:.0f} s"
            self.watch.sample()
            time.sleep(0.2)

    def stopped(self, t0: float) -> float:
        """SIGTERM was sent at ``t0``: its exit, checked (code 0 in time, no traceback, nothing left)."""
        try:
            self.proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=30)
            raise AssertionError(f"{self.name} ignored SIGTERM for {STOP_S:.0f} s: {err[-2000:]}") from None
        took = time.monotonic() - t0
        _, err = self.proc.communicate(timeout=30)
        print(f"{self.name}: exit {self.proc.returncode} {took:.2f} s after SIGTERM", flush=True)
        assert self.proc.returncode == 0 and "Traceback" not in err, err[-3000:]
        _wait_tree_gone(self.watch, 15.0)
        assert leftovers(self.watch) == [], err[-3000:]
        return took

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def _chart(helm: Any, tmp: Path, *sets: str) -> tuple[dict[str, list[str]], str]:
    """The rendered worker's and controller's command + args, and the scenario file's text."""
    objs = docs(helm_template(helm, tmp, *sets).stdout)
    argv = {}
    for kind, role in (("Deployment", "workers"), ("Deployment", "controller")):
        (c, *_) = one(objs, kind, f"-{role}")["spec"]["template"]["spec"]["containers"]
        argv[role] = [*c["command"], *c["args"]]
    scenario = one(objs, "ConfigMap", "-scenario")["data"]["scenario.yaml"]
    return argv, scenario


def _here(argv: list[str], tmp: Path, ports: dict[str, int]) -> list[str]:
    """A rendered command line pointed at this machine: the venv's binary, loopback, free ports."""
    out = [str(BIN / argv[0])]
    swap = {CONTROLLER_HOST: "127.0.0.1", "/etc/swarmscope/scenario.yaml": str(tmp / "scenario.yaml")}
    for prev, a in itertools.pairwise(argv):
        if prev.startswith("--") and prev.endswith("-port"):
            a = str(ports[prev[2:-5]])
        out.append(swap.get(a, a))
    return out


def _env(tmp: Path) -> dict[str, str]:
    """The chart's secrets and addresses as the container's environment has them (here: files in tmp)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SWARMSCOPE_"))}
    return {
        **env,
        "POD_IP": "127.0.0.1",
        "SWARMSCOPE_OUT": str(tmp / "results"),  # the scenario file's is the pod's volume
        "SWARMSCOPE_TOKEN": "t" * 24,
        "SWARMSCOPE_WORKER_TOKEN": "w" * 24,
        "SWARMSCOPE_MASTER_KEY_FILE": str(tmp / "master.key"),  # made by the controller
        "SWARMSCOPE_MASTER_PUBLIC_KEY_FILE": str(tmp / "master.key.pub"),
        "SWARMSCOPE_WEB_PASSWORD": "p" * 16,  # webLogin: true
    }


def _here_all(helm: Any, tmp: Path, *sets: str) -> dict[str, list[str]]:
    """The worker's and controller's command lines rendered with ``sets``, pointed here; the
    scenario file written to tmp."""
    argv, scenario = _chart(helm, tmp, *sets)
    (tmp / "scenario.yaml").write_text(scenario)
    ports = {k: free_port() for k in ("locust", "grpc", "metrics", "web")}
    return {role: _here(a, tmp, ports) for role, a in argv.items()}


def test_worker_waiting_for_its_master_stops_at_once(tools: Any, tmp_path: Path) -> None:  # noqa: F811
    argv = _here_all(
        tools, tmp_path
    )  # nothing listens on the Locust port: the controller idles after its run
    (tmp_path / "master.key.pub").write_bytes(new_master_key()[0] + b"\n")  # the chart's Secret
    worker = Pod("worker", argv["workers"], _env(tmp_path))
    try:
        worker.wait_for("Starting Locust")  # the locustfile is loaded; the connect is under way
        time.sleep(2.0)
        assert worker.proc.poll() is None
        t0 = time.monotonic()
        os.kill(worker.pid1, signal.SIGTERM)
        worker.stopped(t0)
    finally:
        worker.kill()
    assert "swarmscope: SIGTERM while starting: exiting" in worker.proc.output()[1]


def test_controller_and_its_worker_stop_together(tools: Any, tmp_path: Path) -> None:  # noqa: F811
    """As `helm uninstall` stops them: the web UI's controller and its connected worker at once."""
    argv = _here_all(tools, tmp_path)
    env = _env(tmp_path)
    pods = [Pod("controller", argv["controller"], env)]
    try:
        pods[0].wait_for("probe fleet listening")  # the master key is made before it
        pods.append(Pod("worker", argv["workers"], env))
        pods[0].wait_for("1 workers connected")
        time.sleep(1.0)
        t0 = time.monotonic()
        for p in pods:
            os.kill(p.pid1, signal.SIGTERM)
        took = [p.stopped(t0) for p in pods]
    finally:
        for p in pods:
            p.kill()
    assert max(took) < STOP_S


HEADLESS = ["--", "--headless", "-u", "1", "-r", "1", "-t", "120s", "--expect-workers", "1"]


@pytest.mark.bpf
def test_a_run_once_controller_stopped_mid_run_exits(tools: Any, tmp_path: Path) -> None:  # noqa: F811
    """The chart's headless controller (--run-once <release>-r<revision>) stopped during its run
    (its worker and a probe stopped after it): the run ends in order (status interrupted) and the
    controller exits. It used to exec into its idle after the run, as after a run's own end, and wait there
    for a second SIGTERM that a pod's stop never sends."""
    argv = _here_all(tools, tmp_path, "--set-json", f"controller.extraArgs={json.dumps(HEADLESS)}")
    assert "--run-once" in argv["controller"], argv["controller"]
    env = {**_env(tmp_path), "SWARMSCOPE_NODE_HOST": "hA"}  # the worker's and the probe's node
    (tmp_path / "token").write_text(env["SWARMSCOPE_TOKEN"])
    grpc = argv["controller"][argv["controller"].index("--grpc-port") + 1]
    pods = [Pod("controller", argv["controller"], env)]
    try:
        pods[0].wait_for("probe fleet listening")
        pods.append(Pod("probe", [str(BIN / "swarmscope"), "probe", "--controller", f"127.0.0.1:{grpc}",
                                  "--token-file", str(tmp_path / "token"), "--node", "hA"], env))  # fmt: skip
        pods.append(Pod("worker", argv["workers"], env))
        pods[0].wait_for("EXEC", timeout=180)  # Locust's stats table: a burst is done
        t0 = time.monotonic()
        os.kill(pods[0].pid1, signal.SIGTERM)  # the controller's pod (its window closes in order)
        pods[0].stopped(t0)
        t0 = time.monotonic()
        for p in pods[1:]:  # then theirs (the worker may be gone already: the master's quit)
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid1, signal.SIGTERM)
        for p in pods[1:]:
            p.stopped(t0)
    finally:
        for p in pods:
            p.kill()
    out = "".join(pods[0].proc.output())
    assert "status=interrupted" in out and "was claimed here" not in out, out[-3000:]
    # Claimed and not finished: a restart of the pod's container finds the run cut short.
    claim = json.loads((tmp_path / "results" / ".run-once-t-r1.json").read_text())
    assert claim["run_id"] == "t-r1" and "exit_code" not in claim, claim
