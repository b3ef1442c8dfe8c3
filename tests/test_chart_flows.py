"""The chart's flow-storm worker mode (workers.flows), rendered: what each pod is given, and
the combinations it refuses (and ebpf_cost, the one kind the chart refuses, with its reason).
The real node runs it: tests/test_realnode_chart_flowstorm.py.

    .venv/bin/python -m pytest tests/test_chart_flows.py -v
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml
from test_chart import CHART, docs, helm_template, one, tools  # noqa: F401  (tools: fixture)

VALUES = CHART / "ci" / "flow-worker-values.yaml"


def test_flow_mode_gives_each_pod_only_what_it_needs(tools, tmp_path: Path) -> None:  # noqa: F811
    objs = docs(helm_template(tools, tmp_path, "-f", str(VALUES)).stdout)
    pod = one(objs, "Deployment", "-workers")["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["args"][c["args"].index("--kind") + 1] == "flow_storm"
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["BPF", "NET_ADMIN", "SYS_ADMIN"]}
    assert (c["securityContext"]["privileged"], c["securityContext"]["runAsUser"]) == (False, 0)
    assert not any(pod.get(k) for k in ("hostPID", "hostNetwork", "hostIPC"))
    assert {m["mountPath"] for m in c["volumeMounts"]} == {
        "/tmp", "/run/netns", "/run/swarmscope", "/lib/modules", "/usr/src"
    }  # fmt: skip
    probe = one(objs, "DaemonSet", "-probes")["spec"]["template"]["spec"]
    assert (probe["hostPID"], probe["hostNetwork"]) == (True, False)
    sc = probe["containers"][0]["securityContext"]
    assert sc["capabilities"]["add"] == ["BPF", "PERFMON", "NET_ADMIN", "SYS_PTRACE", "SYS_ADMIN"]
    assert (sc["privileged"], sc["allowPrivilegeEscalation"]) == (False, True)
    args = probe["containers"][0]["args"]
    assert args[args.index("--programs") + 1] == "flow_count,procstat"
    ctl = one(objs, "Deployment", "-controller")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert ctl[ctl.index("--sweep") :][:3] == ["--sweep", "--workers", "1"]
    scenario = yaml.safe_load(one(objs, "ConfigMap", "-scenario")["data"]["scenario.yaml"])
    assert (scenario["scenario"], scenario["flows"]) == ("flow_storm", [1000])


def test_headers_follow_the_flow_worker_setting(tools, tmp_path: Path) -> None:  # noqa: F811
    out = helm_template(tools, tmp_path, "-f", str(VALUES), "--set", "workers.flows.hostHeaders=false")
    (c,) = one(docs(out.stdout), "Deployment", "-workers")["spec"]["template"]["spec"]["containers"]
    assert {m["mountPath"] for m in c["volumeMounts"]} == {"/tmp", "/run/netns", "/run/swarmscope"}


FLOWS = ["workers.flows.enabled=true"]
STORM = ["scenario.config.scenario=flow_storm"]
BAD = [
    (FLOWS, "for the flow_storm scenario only"),
    (STORM, "needs workers.flows.enabled=true"),
    (["probes.enabled=false"], "needs probes.enabled=true: the kernel's count of every flow"),
    (["workers.mode=daemonset"], "use workers.mode=deployment"),
]


@pytest.mark.parametrize(("sets", "message"), BAD, ids=lambda x: str(x))
def test_bad_combinations_rejected_clearly(tools, tmp_path: Path, sets: list[str], message: str) -> None:  # noqa: F811
    base = [] if sets in (FLOWS, STORM) else ["-f", str(VALUES)]
    args = base + list(itertools.chain.from_iterable(("--set", s) for s in sets))
    r = helm_template(tools, tmp_path, *args, check=False)
    assert r.returncode != 0, f"{sets} was accepted"
    assert message in r.stderr, r.stderr


def test_ebpf_cost_is_refused_with_the_kinds_reason(tools, tmp_path: Path) -> None:  # noqa: F811
    from swarmscope.kinds import get_kind

    r = helm_template(tools, tmp_path, "--set", "scenario.config.scenario=ebpf_cost", check=False)
    assert r.returncode != 0
    why = get_kind("ebpf_cost").not_in_cluster
    assert f"scenario.config.scenario=ebpf_cost: the chart does not run this kind: {why}" in r.stderr
