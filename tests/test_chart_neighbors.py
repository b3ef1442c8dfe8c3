"""The chart's neighbor-worker mode (workers.neighbors), rendered: what each pod is given, and
the combinations it refuses. The real node runs it: tests/test_realnode_chart_neighbors.py.

    .venv/bin/python -m pytest tests/test_chart_neighbors.py -v
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml
from test_chart import CHART, by_kind, docs, helm_template, one, tools  # noqa: F401  (tools: fixture)

VALUES = CHART / "ci" / "neighbor-worker-values.yaml"


def test_neighbor_mode_gives_each_pod_only_what_it_needs(tools, tmp_path: Path) -> None:  # noqa: F811
    objs = docs(helm_template(tools, tmp_path, "-f", str(VALUES)).stdout)
    worker = one(objs, "Deployment", "-workers")["spec"]
    assert worker["strategy"] == {"type": "Recreate"}
    pod = worker["template"]["spec"]
    (c,) = pod["containers"]
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["BPF", "NET_ADMIN", "SYS_ADMIN"]}
    assert (c["securityContext"]["privileged"], c["securityContext"]["runAsUser"]) == (False, 0)
    assert not any(pod.get(k) for k in ("hostPID", "hostNetwork", "hostIPC"))
    assert {m["mountPath"] for m in c["volumeMounts"]} == {
        "/tmp", "/run/netns", "/run/swarmscope", "/lib/modules", "/usr/src"
    }  # fmt: skip
    probe = one(objs, "DaemonSet", "-probes")["spec"]["template"]["spec"]
    assert probe["hostPID"] is True
    assert probe["containers"][0]["securityContext"]["capabilities"]["add"] == [
        "BPF",
        "PERFMON",
        "SYS_PTRACE",
    ]
    args = probe["containers"][0]["args"]
    assert args[args.index("--programs") + 1] == "exec_count,map_update"
    ctl = one(objs, "Deployment", "-controller")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert ctl[ctl.index("--sweep") :][:3] == ["--sweep", "--workers", "1"]
    scenario = yaml.safe_load(one(objs, "ConfigMap", "-scenario")["data"]["scenario.yaml"])
    assert scenario["agent_filter"] == "cgroup"


def test_default_mode_is_unchanged(tools, tmp_path: Path) -> None:  # noqa: F811
    objs = docs(helm_template(tools, tmp_path).stdout)
    (c,) = one(objs, "Deployment", "-workers")["spec"]["template"]["spec"]["containers"]
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    probe = one(objs, "DaemonSet", "-probes")["spec"]["template"]["spec"]
    assert probe["hostPID"] is False
    assert "--programs" not in probe["containers"][0]["args"]
    ctl = one(objs, "Deployment", "-controller")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--sweep" not in ctl


NEIGH = ["workers.neighbors.enabled=true"]
WRITES = ["scenario.config.scenario=neighbor_writes"]
BAD = [
    (NEIGH, "for the neighbor_writes scenario only"),
    (WRITES, "needs workers.neighbors.enabled=true"),
    (["probes.enabled=false"], "needs probes.enabled=true"),
    (["scenario.neighbor_writes.target=kernel"], "runs the xdp target only"),
    (["scenario.neighbor_writes.agent_filter=pid"], "cannot work in a pod"),
    (["workers.mode=daemonset"], "use workers.mode=deployment"),
]


@pytest.mark.parametrize(("sets", "message"), BAD, ids=lambda x: str(x))
def test_bad_combinations_rejected_clearly(tools, tmp_path: Path, sets: list[str], message: str) -> None:  # noqa: F811
    base = [] if sets in (NEIGH, WRITES) else ["-f", str(VALUES)]
    args = base + list(itertools.chain.from_iterable(("--set", s) for s in sets))
    r = helm_template(tools, tmp_path, *args, check=False)
    assert r.returncode != 0, f"{sets} was accepted"
    assert message in r.stderr, r.stderr
