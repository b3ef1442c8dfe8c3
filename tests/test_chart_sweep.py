"""The chart's sweep mode for any kind (controller.sweep), rendered: the exec storm's node-count
sweep from one install. The real nodes run it: tests/test_realcluster_sweep.py.

    .venv/bin/python -m pytest tests/test_chart_sweep.py -v
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from test_chart import docs, helm_template, one, tools  # noqa: F401  (tools: fixture)

SWEEP = ["--set", "controller.sweep=true", "--set-json", "scenario.exec_storm.nodes=[1,2,3]"]


def _controller_args(objs: list[dict[str, Any]]) -> list[str]:
    return list(one(objs, "Deployment", "-controller")["spec"]["template"]["spec"]["containers"][0]["args"])


def test_daemonset_sweep_waits_for_sweep_workers(tools, tmp_path: Path) -> None:  # noqa: F811
    sets = ["--set", "workers.mode=daemonset", "--set", "controller.sweepWorkers=3"]
    objs = docs(helm_template(tools, tmp_path, *SWEEP, *sets).stdout)
    args = _controller_args(objs)
    assert args[args.index("--sweep") :][:5] == ["--sweep", "--workers", "3", "--run-once", "t-r1"]
    scenario = yaml.safe_load(one(objs, "ConfigMap", "-scenario")["data"]["scenario.yaml"])
    assert (scenario["scenario"], scenario["nodes"]) == ("exec_storm", [1, 2, 3])


def test_deployment_sweep_waits_for_the_replicas(tools, tmp_path: Path) -> None:  # noqa: F811
    args = _controller_args(
        docs(helm_template(tools, tmp_path, *SWEEP, "--set", "workers.replicas=2").stdout)
    )
    assert args[args.index("--sweep") :][:3] == ["--sweep", "--workers", "2"]


def test_daemonset_sweep_without_a_count_is_refused(tools, tmp_path: Path) -> None:  # noqa: F811
    r = helm_template(tools, tmp_path, *SWEEP, "--set", "workers.mode=daemonset", check=False)
    assert r.returncode != 0
    assert "controller.sweep=true with workers.mode=daemonset needs controller.sweepWorkers" in r.stderr, (
        r.stderr
    )


def test_controller_liveness_waits_for_its_start(tools, tmp_path: Path) -> None:  # noqa: F811
    objs = docs(helm_template(tools, tmp_path, *SWEEP, "--set", "workers.replicas=2").stdout)
    ctr = one(objs, "Deployment", "-controller")["spec"]["template"]["spec"]["containers"][0]
    assert ctr["startupProbe"] == {
        "httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 5, "failureThreshold": 60
    }  # fmt: skip
