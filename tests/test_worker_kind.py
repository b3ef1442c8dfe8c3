"""Hand-started workers take their kind from the controller (issue 28).

`swarmscope controller --scenario <kind>.yaml` (a headless Locust master, external probes), one
`swarmscope probe` and one `swarmscope worker --controller 127.0.0.1` with no --kind: the worker
learns the kind and the run's config from the master's swarmscope:setup, runs the kind's Locust
users and its window is exact. With --kind naming another kind, the worker refuses at set-up with
both kinds named, and the controller fails at once with that reason, not a set-up timeout.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import time

import pytest
import yaml
from helpers import BIN, ROOT, free_port, load_report, only_run_dir, stop_procs

pytestmark = [pytest.mark.root, pytest.mark.bpf]

TOKEN = "worker-kind-token"


def _start(tmp_path: pathlib.Path, kind: str, values: dict, locust: list[str], worker: list[str]):  # type: ignore[no-untyped-def]
    sfile = tmp_path / f"{kind}.yaml"
    sfile.write_text(yaml.safe_dump({"scenario": kind, "out": str(tmp_path / "results"), **values}))
    (tmp_path / "token").write_text(TOKEN)
    locust_port, grpc_port = free_port(), free_port()
    sw = str(BIN / "swarmscope")
    # The worker's nodes are on "host" hA, the probe's node: the probe counts them.
    env = {**os.environ, "SWARMSCOPE_TOKEN": TOKEN, "SWARMSCOPE_NODE_HOST": "hA"}
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(name: str, argv: list[str]) -> None:
        with open(tmp_path / f"{name}.log", "wb") as fh:
            procs[name] = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)

    start("controller", [
        sw, "controller", "--scenario", str(sfile), "--locust-port", str(locust_port),
        "--grpc-port", str(grpc_port), "--metrics-port", str(free_port()), "--web-port", str(free_port()),
        "--", "--headless", "--expect-workers", "1", *locust,
    ])  # fmt: skip
    start("probe", [
        sw, "probe", "--controller", f"127.0.0.1:{grpc_port}", "--token-file", str(tmp_path / "token"),
        "--node", "hA", "--retries", "60",
    ])  # fmt: skip
    start("worker", [sw, "worker", "--controller", "127.0.0.1", "--locust-port", str(locust_port), *worker])
    return procs


def _log(tmp_path: pathlib.Path, name: str) -> str:
    return (tmp_path / f"{name}.log").read_text(errors="replace")


CASES = {
    "exec_storm": ({"burst_s": 0.3}, ["-u", "2", "-r", "2", "-t", "8s"]),
    "ingress_flood": ({"network_baseline_s": 0}, ["-u", "2", "-r", "2", "-t", "6s"]),
}


@pytest.mark.slow  # a real master+worker run per kind: 13-14 s each
@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_worker_without_kind_takes_the_controllers(tmp_path: pathlib.Path, kind: str) -> None:
    values, locust = CASES[kind]
    procs = _start(tmp_path, kind, values, locust, [])
    try:
        rc = procs["controller"].wait(180)
    finally:
        stop_procs(procs.values(), 30)
    assert rc == 0, _log(tmp_path, "controller")[-3000:]
    worker_log = _log(tmp_path, "worker")
    assert "unknown key" not in worker_log and "Traceback" not in worker_log, worker_log[-3000:]
    rep = load_report(only_run_dir(tmp_path / "results"))
    assert rep["scenario"] == kind and rep["status"] == "ok", _log(tmp_path, "controller")[-3000:]
    (it,) = rep["points"][0]["iterations"]
    if kind == "exec_storm":  # the worker's simulated nodes, counted exactly in the kernel
        assert [n["node"] for n in it["per_node"]] == ["w1-n1", "w1-n2"]
        for n in it["per_node"]:
            assert n["generated"] == n["kernel"] > 0, n
    else:  # the shape's one step at -u users, its requests counted by the worker's users
        (step,) = rep["sections"]["steps"]
        assert step["users"] == 2 and step["requests"] > 0, step
        assert step["requests"] == sum(n["generated"] for n in it["per_node"]), (step, it)


@pytest.mark.slow
def test_a_worker_without_kind_runs_counted_ingress_steps_exactly(tmp_path: pathlib.Path) -> None:
    """Count steps (boom's -n) need the step sync's messages, which the ingress locustfile
    registers in Locust's init: the worker, started on the placeholder, runs the kind's init
    hooks when it learns the kind. Before, it ignored swarmscope:ingress_step and sent nothing."""
    values = {"network_baseline_s": 0, "steps": [2, 3], "requests": [150, 301], "step_duration": 30}
    procs = _start(tmp_path, "ingress_flood", values, ["--stop-timeout", "5"], [])
    try:
        rc = procs["controller"].wait(180)
    finally:
        stop_procs(procs.values(), 30)
    assert rc == 0, _log(tmp_path, "controller")[-3000:]
    assert "Traceback" not in _log(tmp_path, "worker"), _log(tmp_path, "worker")[-3000:]
    rep = load_report(only_run_dir(tmp_path / "results"))
    assert rep["status"] == "ok", _log(tmp_path, "controller")[-3000:]
    steps = rep["sections"]["steps"]
    assert [(s["users"], s["request_count"], s["requests"]) for s in steps] == [(2, 150, 150), (3, 301, 301)]
    assert [s["server_requests"] for s in steps] == [150, 301]  # nginx's log, counted per step
    assert [s["failures"] for s in steps] == [0, 0]


def test_a_worker_started_for_another_kind_is_refused_at_once(tmp_path: pathlib.Path) -> None:
    values, locust = CASES["ingress_flood"]
    procs = _start(tmp_path, "ingress_flood", values, locust, ["--kind", "exec_storm"])
    try:
        wrc = procs["worker"].wait(120)
        t0 = time.monotonic()
        crc = procs["controller"].wait(60)
        took = time.monotonic() - t0
    finally:
        stop_procs(procs.values(), 30)
    worker_log, controller_log = _log(tmp_path, "worker"), _log(tmp_path, "controller")
    why = (
        "this worker was started for the exec_storm kind and the controller runs ingress_flood: start "
        "it with `swarmscope worker --controller HOST` (it takes the controller's kind) or for ingress_flood"
    )
    assert wrc == 3 and f"swarmscope: {why}" in worker_log, worker_log[-3000:]
    assert "Traceback" not in worker_log, worker_log[-3000:]
    assert crc == 1 and "could not set up: " + why in controller_log, controller_log[-3000:]
    assert "timed out" not in controller_log and took < 20, controller_log[-3000:]
    assert "Traceback" not in controller_log, controller_log[-3000:]
    assert load_report(only_run_dir(tmp_path / "results"))["status"] == "failed"
