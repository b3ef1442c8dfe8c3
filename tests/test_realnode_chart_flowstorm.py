"""The flow storm through the chart's controller, on a real node: exact as on one machine.

    .venv/bin/python -m pytest tests/test_realnode_chart_flowstorm.py -v -s   # -s: timings, figures

One `helm install` with workers.flows on (templates/workers.yaml: the worker pod runs as uid 0
with every capability dropped and BPF, NET_ADMIN, SYS_ADMIN added back; not privileged). The
controller runs the flow storm's sweep (`swarmscope controller --sweep`), one window per flow
count: the worker pod makes its two namespaces and their veth pair inside the pod, starts the
reference flow agent (BCC, TC egress) on the sending end and sends every flow from the source
namespace. The probe (hostPID) enters the pod's receiving namespace through /proc/<pid>/root of
the pod's processes and counts every flow there by XDP. Checked per window, as
tests/test_flow_storm.py does on one machine: generated == kernel for packets, bytes and flows,
the kernel's per-flow histogram and digest equal to what was sent, the agent's map held every
flow (reported flows == flows, none dropped), the node is the worker pod (pod attribution), and
the agent's CPU and RSS come from the probe's procstat, which follows it by name in the pod's
cgroup.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from realchart import ChartNode
from realnode import RealNode

# cluster: the kube/node/image builds of `make tools`; the timeout covers a node's start and image imports
pytestmark = [pytest.mark.cluster, pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(3600)]

NS = "ssfs"
RELEASE = "fs"
TIMEOUT = 900.0  # install -> report: BCC compiles in the probe and in the worker's agent, under load (20+)
FLOWS = [1000, 3000]  # one window each; exact whatever the machine's speed
PPF = 2  # packets per flow
FRAME = 128  # bytes per frame
RATE = 2000  # packets/s: the 3000-flow window lasts 3 s, three of procstat's 1 s ticks


def test_flow_storm_through_the_chart_on_the_real_node(real_node: ChartNode, tmp_path: Path) -> None:
    with real_node.sweep(RELEASE, NS, _values(real_node.node), tmp_path, TIMEOUT) as (r, rep, worker):
        print(f"status {rep['status']}, flags {json.dumps(rep['flags'])[:3000]}", flush=True)
        if rep["status"] != "ok":
            print(r.logs(), flush=True)
        _check(rep, f"{NS}/{worker['metadata']['name']}/worker")
        sc = worker["spec"]["containers"][0]["securityContext"]
        assert sc["capabilities"] == {"drop": ["ALL"], "add": ["BPF", "NET_ADMIN", "SYS_ADMIN"]}
        assert sc["privileged"] is False
        assert not worker["spec"].get("hostNetwork") and not worker["spec"].get("hostPID")


def _values(node: RealNode) -> dict[str, Any]:
    return {
        "tracing": {"enabled": False},  # not what this test checks: no Jaeger image to import
        "jaeger": {"enabled": False},
        # BCC's compile of the flow agent's program beside the Locust worker.
        "workers": {"flows": {"enabled": True}, "resources": {"limits": {"memory": "1Gi"}}},
        # This kubelet keeps pod logs in its own dir: the probe names pods from it.
        "probes": {"podLogs": {"podsDir": str(node.pod_logs)}},
        "scenario": {
            "config": {
                "scenario": "flow_storm",
                # The probe compiles with BCC before it registers: minutes under load.
                "probe_timeout_s": 600, "worker_timeout_s": 600,
            },
            "flow_storm": {
                "flows": FLOWS, "packets_per_flow": PPF, "frame_bytes": FRAME, "rate_pps": RATE,
                "agent": "reference", "cache_max_flows": [100000],
            },
        },
    }  # fmt: skip


def _check(rep: dict[str, Any], pod: str) -> None:
    """Every window exact, as on one machine (tests/test_flow_storm.py), and named by the pod."""
    for p in rep["points"]:
        print(f"{p['params']}: {json.dumps(p['iterations'][0], default=str)[:1500]}", flush=True)
    print(f"flow_storm: {json.dumps(rep['flow_storm']['points'], default=str)[:3000]}", flush=True)
    assert (rep["status"], rep["flags"]) == ("ok", [])
    assert [p["params"]["flows"] for p in rep["points"]] == FLOWS
    for p, flows in zip(rep["points"], FLOWS, strict=True):
        (it,) = p["iterations"]
        assert it["flags"] == []
        (n,) = it["per_node"]
        assert n["pod"] == pod
        assert n["missing"] == []
        row = it["extra"]["flows"][n["node"]]
        assert n["generated"] == n["kernel"] == row["kernel"]["packets"] == row["generated"] == flows * PPF
        assert row["kernel"]["bytes"] == row["bytes"] == FRAME * flows * PPF
        assert row["kernel"]["flows"] == row["kernel"]["seen"] == row["flows"] == flows
        assert (row["kernel"]["drops"], row["problems"], row["veth_dropped"]) == (0, [], 0)
        assert row["kernel"]["digest"] == row["digest"] > 0  # flow by flow (probes/flowdigest.py)
        assert row["kernel"]["hist"] == {str(PPF): flows}
        assert (row["rounds"], row["partial"], row["stopped"]) == (PPF, 0, False)
    for sp, flows in zip(rep["flow_storm"]["points"], FLOWS, strict=True):
        assert sp["per_flow_ok"] is True
        assert sp["generated"] == sp["kernel"] == flows * PPF
        # The agent's map (100,000) holds every flow: no ring buffer, nothing dropped.
        assert (sp["reported_flows"], sp["dropped_flows"], sp["ringbuf_flows"]) == (flows, 0, 0)
    # The 3 s window: the agent sampled in the pod's cgroup by name (a pod knows no node pid).
    last = rep["flow_storm"]["points"][-1]
    assert last["agent_rss_mib"] > 0 and last["agent_cpu_pct"] is not None
