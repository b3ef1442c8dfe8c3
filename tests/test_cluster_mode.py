"""Cluster mode on one machine: the commands the Helm chart runs, talking only over the network.

`swarmscope controller` (Locust master + probe fleet + /metrics) with the chart's default
scenario, `swarmscope worker` with NODE_NAME (the real node: measured through the worker's own
cgroup, as in a pod), and `swarmscope probe --token-file … --node NODE_NAME`: the run's window
must be exact for that node, and the controller's /healthz and /metrics must answer.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
import urllib.request

import pytest
import yaml
from helpers import ROOT, ChartCommands, chart_commands, load_report, only_run_dir

from swarmscope.core.sys.cgroups import cgroup2_mount
from swarmscope.core.sys.otlpjson import spans_of

pytestmark = [
    pytest.mark.root,
    pytest.mark.bpf,
    pytest.mark.slow,  # 34-39 s: a 10 s Locust run plus the chart's processes
]


def test_chart_commands_run_a_window_end_to_end(tmp_path: pathlib.Path) -> None:
    values = yaml.safe_load((ROOT / "charts" / "swarmscope" / "values.yaml").read_text())
    sc = values["scenario"]
    scenario = {
        **sc["config"],
        **sc[sc["config"]["scenario"]],
        "out": str(tmp_path / "results"),
        "burst_s": 0.3,
    }
    sfile = tmp_path / "scenario.yaml"
    sfile.write_text(yaml.safe_dump(scenario))
    # As the chart does: the probe token, and the workers' token (CURVE on the master port); the
    # master's key only for the controller, its public half for the worker.
    import zmq

    master_pub, master_sec = zmq.curve_keypair()
    (tmp_path / "master.key").write_bytes(master_sec)
    env = {
        **os.environ,
        "SWARMSCOPE_TOKEN": "cluster-mode-token",
        "SWARMSCOPE_WORKER_TOKEN": "cluster-worker-token",
    }
    # The worker runs in a cgroup of its own, as a pod does: it is measured through it.
    pod = cgroup2_mount() / f"ss-test-pod-{os.getpid()}"
    pod.mkdir()
    try:
        # -t counts from Locust's start, and the window opens only once the probe has registered
        # (BCC compiles first: seconds under load). 3 s was seen to end before it: no window at all.
        with chart_commands(
            tmp_path, sfile, "exec_storm", "kind-node-1", env,
            ["--run-once", "ss-r1",
             "--", "--headless", "-u", "1", "-r", "1", "-t", "10s", "--expect-workers", "1"],
            controller_env={"SWARMSCOPE_MASTER_KEY_FILE": str(tmp_path / "master.key")},
            worker_env={"SWARMSCOPE_MASTER_PUBLIC_KEY": master_pub.decode()},
            worker_preexec=lambda: (pod / "cgroup.procs").write_text(str(os.getpid())),
        ) as cc:  # fmt: skip
            _run_once_and_idle(cc, tmp_path / "results")
    finally:
        pod.rmdir()
    rep = load_report(only_run_dir(tmp_path / "results"))
    (it,) = rep["points"][0]["iterations"]
    (n,) = it["per_node"]
    assert n["node"] == "kind-node-1"
    assert n["generated"] == n["kernel"] > 0, (n, (tmp_path / "controller.log").read_text()[-2000:])
    # The run's trace links the three processes: the worker's span of the window (a Locust-driven
    # window: it learns the traceparent from the window message) and the probe's are children of
    # the controller's iteration span.
    spans = spans_of(json.loads((only_run_dir(tmp_path / "results") / "trace.json").read_text()))
    by_id = {s["spanId"]: s for s in spans}
    (load,) = [s for s in spans if s["service"] == "swarmscope-worker"]
    (probe_win,) = [s for s in spans if s["service"] == "swarmscope-probe"]
    assert load["name"] == "load kind-node-1"
    for s in (load, probe_win):
        assert by_id[s["parentSpanId"]]["name"] == "iteration 1", s["name"]
    assert {a["key"]: a["value"] for a in load["attributes"]}["swarmscope.generated"] == {
        "intValue": str(n["generated"])
    }


def _run_once_and_idle(cc: ChartCommands, results: pathlib.Path) -> None:
    """/healthz answers; the run-once run ends with exit code 0 and the controller idles after
    it, holding the probe's second session."""
    controller, probe, metrics = cc.controller, cc.probe, cc.ports["metrics"]
    deadline = time.monotonic() + 30
    health = b""
    while time.monotonic() < deadline and not health:
        try:
            health = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/healthz", timeout=2).read()
        except OSError:
            time.sleep(0.3)
    assert health == b"ok\n"
    # --run-once (as the chart's headless controller): after its run it idles, claim
    # recorded, instead of exiting (its Deployment would restart it and run again).
    claim = results / ".run-once-ss-r1.json"
    deadline = time.monotonic() + 120
    while "exit_code" not in (json.loads(claim.read_text()) if claim.exists() else {}):
        assert time.monotonic() < deadline, cc.log("controller")[-3000:]
        time.sleep(0.5)
    assert json.loads(claim.read_text())["exit_code"] == 0
    deadline = time.monotonic() + 60
    while "claimed here" not in cc.log("controller"):
        assert controller.poll() is None and time.monotonic() < deadline
        time.sleep(0.3)
    health = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/healthz", timeout=5).read()
    assert health == b"ok\n" and controller.poll() is None
    # The probe outlives the run (probes_at_exit=keep): not told to stop, it registers with
    # the idle controller, which holds its session (no crash loop against a closed port).
    deadline = time.monotonic() + 60
    while cc.log("probe").count(" registered, session ") < 2:
        assert probe.poll() is None and time.monotonic() < deadline, cc.log("probe")[-3000:]
        time.sleep(0.3)
    time.sleep(3)  # held, not dropped: no third registration, still running
    assert cc.log("probe").count(" registered, session ") == 2
    assert probe.poll() is None
    controller.terminate()
    assert controller.wait(30) == 0, cc.log("controller")[-3000:]
