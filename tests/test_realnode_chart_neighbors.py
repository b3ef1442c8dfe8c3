"""Neighbor writes through the chart's controller, on a real node: exact as on one machine.

    .venv/bin/python -m pytest tests/test_realnode_chart_neighbors.py -v -s   # -s: timings, figures

One `helm install` with workers.neighbors on (templates/workers.yaml: the worker pod runs as
uid 0 with every capability dropped and BPF, NET_ADMIN, SYS_ADMIN added back; not privileged).
The controller runs the neighbor sweep (`swarmscope controller --sweep`), one window per mode:
the worker pod makes its test namespace, attaches its XDP program (BCC) and its agent process
programs the map. The probe counts the map-update calls made in the worker pod's cgroup (the
pod's pids are not the host's the kernel reports, see bpf/map_update.bpf.c) and names each
call's map through the caller's /proc fdinfo (probe: hostPID and SYS_PTRACE). Checked per
window, as the one-machine neighbor tests do: generated == kernel == reported (watch only:
received == generated and the kernel saw 0 entries), the point verified with no problem, and
the window's node is the worker pod (pod attribution).
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

NS = "ssnb"
RELEASE = "nb"
TIMEOUT = 600.0  # install -> report: BCC compiles in the probe and in the worker, under load
N = 2000  # neighbors per window: exact whatever the machine's speed
MODES = ["list_program", "watch_only", "write_watch_program"]


def test_neighbor_writes_through_the_chart_on_the_real_node(real_node: ChartNode, tmp_path: Path) -> None:
    with real_node.sweep(RELEASE, NS, _values(real_node.node), tmp_path, TIMEOUT) as (r, rep, worker):
        _check(rep, f"{NS}/{worker['metadata']['name']}/worker")
        sc = worker["spec"]["containers"][0]["securityContext"]
        assert sc["capabilities"] == {"drop": ["ALL"], "add": ["BPF", "NET_ADMIN", "SYS_ADMIN"]}
        assert sc["privileged"] is False
        # The image's prebuilt library: the pod (read-only root) cannot compile it.
        logs = r.node.pod_logs.glob(f"{NS}_*workers*/*/*.log")
        wlog = "".join(f.read_text(errors="replace") for f in logs)
        assert wlog and "compiled list is unavailable" not in wlog, wlog[-3000:]


def _values(node: RealNode) -> dict[str, Any]:
    return {
        "tracing": {"enabled": False},  # not what this test checks: no Jaeger image to import
        "jaeger": {"enabled": False},
        # BCC's compile of the XDP program peaks at about 300 MiB beside the Locust worker.
        "workers": {"neighbors": {"enabled": True}, "resources": {"limits": {"memory": "1Gi"}}},
        # This kubelet keeps pod logs in its own dir: the probe names pods from it.
        "probes": {"podLogs": {"podsDir": str(node.pod_logs)}},
        "scenario": {
            "config": {
                "scenario": "neighbor_writes",
                # The probe compiles with BCC before it registers: minutes under load.
                "probe_timeout_s": 300, "worker_timeout_s": 300,
            },
            "neighbor_writes": {"neighbors": [N], "modes": MODES, "plot": False},
        },
    }  # fmt: skip


def _check(rep: dict[str, Any], pod: str) -> None:
    """Every window exact, as on one machine (tests/test_neighbors_*), and named by the pod."""
    keys = ("generated", "kernel_entries", "reported", "update_calls", "verified", "problems")
    by_mode = {x["mode"]: x for x in rep["neighbors"]["points"]}
    for p in rep["points"]:
        (it,) = p["iterations"]
        x = by_mode[p["params"]["mode"]]
        print(
            f"{p['params']['mode']}: {it['per_node']} {json.dumps({k: x.get(k) for k in keys})}", flush=True
        )
        print(f"  iteration: {json.dumps(it, default=str)[:1500]}", flush=True)
    assert (rep["status"], rep["flags"]) == ("ok", [])
    assert [p["params"]["mode"] for p in rep["points"]] == MODES
    for p in rep["points"]:
        (n,) = p["iterations"][0]["per_node"]
        assert n["pod"] == pod
        assert n["missing"] == []
        if p["params"]["mode"] == "watch_only":  # received, not programmed
            assert (n["generated"], n["kernel"], n["reported"]) == (N, None, N)
        else:
            assert n["generated"] == n["kernel"] == n["reported"] == N
        x = by_mode[p["params"]["mode"]]
        assert x["verified"] is True and x["problems"] == [], x
        assert x["generated"] == x["reported"] == N
        assert x["kernel_entries"] == (0 if p["params"]["mode"] == "watch_only" else N)
