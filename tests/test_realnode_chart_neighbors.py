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
import time
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster, find_tools
from imagebuild import find_swarmscope_image
from realnode import RealNode, find_node_tools, wait_for

# cluster: the kube/node/image builds of `make tools`; the timeout covers a node's start and image imports
pytestmark = [pytest.mark.cluster, pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(3600)]

ROOT = Path(__file__).resolve().parent.parent
NS = "ssnb"
RELEASE = "nb"
IMAGE_REPO = "ghcr.io/swarmscope/swarmscope"  # values.yaml image.repository, tag = appVersion
TIMEOUT = 600.0  # install -> report: BCC compiles in the probe and in the worker, under load
N = 2000  # neighbors per window: exact whatever the machine's speed
MODES = ["list_program", "watch_only", "write_watch_program"]


def test_neighbor_writes_through_the_chart_on_the_real_node(tmp_path: Path) -> None:
    tools, node_tools, image = find_tools(), find_node_tools(), find_swarmscope_image()
    with Cluster.start(tools, tmp_path / "c", nodes=0) as c, RealNode.start(c, node_tools) as node:
        t = time.monotonic()
        assert node.import_image(image, IMAGE_REPO) == f"{IMAGE_REPO}:0.1.0"
        print(f"image imported in {time.monotonic() - t:.1f} s", flush=True)
        values = tmp_path / "values.json"
        values.write_text(json.dumps(_values(node)))
        t = time.monotonic()
        c.helm("install", RELEASE, str(ROOT / "charts" / "swarmscope"), "-n", NS, "--create-namespace",
               "-f", str(values))  # fmt: skip
        try:
            rep, worker = _report(c, node)
            print(f"helm install -> the sweep's report in {time.monotonic() - t:.1f} s", flush=True)
            _check(rep, f"{NS}/{worker['metadata']['name']}/worker")
            sc = worker["spec"]["containers"][0]["securityContext"]
            assert sc["capabilities"] == {"drop": ["ALL"], "add": ["BPF", "NET_ADMIN", "SYS_ADMIN"]}
            assert sc["privileged"] is False
            # The image's prebuilt library: the pod (read-only root) cannot compile it.
            logs = node.dir.glob(f"pod-logs/{NS}_*workers*/*/*.log")
            wlog = "".join(f.read_text(errors="replace") for f in logs)
            assert wlog and "compiled list is unavailable" not in wlog, wlog[-3000:]
        finally:
            # Uninstalled first: the node's teardown would otherwise wait out the pods the
            # Deployments keep recreating.
            c.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "120s", check=False)


def _values(node: RealNode) -> dict[str, Any]:
    return {
        "tracing": {"enabled": False},  # not what this test checks: no Jaeger image to import
        "jaeger": {"enabled": False},
        # BCC's compile of the XDP program peaks at about 300 MiB beside the Locust worker.
        "workers": {"neighbors": {"enabled": True}, "resources": {"limits": {"memory": "1Gi"}}},
        # This kubelet keeps pod logs in its own dir: the probe names pods from it.
        "probes": {"podLogs": {"podsDir": str(node.dir / "pod-logs")}},
        "scenario": {
            "config": {
                "scenario": "neighbor_writes",
                # The probe compiles with BCC before it registers: minutes under load.
                "probe_timeout_s": 300, "worker_timeout_s": 300,
            },
            "neighbor_writes": {"neighbors": [N], "modes": MODES, "plot": False},
        },
    }  # fmt: skip


def _report(c: Cluster, node: RealNode) -> tuple[dict[str, Any], dict[str, Any]]:
    """The first report in the controller's results volume (the chart's --run-once: the
    controller idles after its sweep instead of sweeping again), and the worker pod."""

    def first() -> Path | None:
        for pod in _pods(c, "controller"):
            uid = pod["metadata"]["uid"]
            d = node.dir / "kubelet" / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / "results"
            done = sorted(d.glob("*/report.json")) if d.is_dir() else []
            if done:
                return done[0]
        return None

    try:
        path = wait_for("the sweep's report", first, TIMEOUT, every=2.0)
    except Exception:
        print(_logs(node), flush=True)
        raise
    (worker,) = _pods(c, "workers")
    return dict(json.loads(path.read_text())), worker


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


def _logs(node: RealNode, lines: int = 40) -> str:
    """The last lines of the controller's, workers' and probes' container logs (diagnosis)."""
    out = []
    for f in sorted((node.dir / "pod-logs").glob(f"{NS}_*/*/*.log")):
        tail = [x[:300] for x in f.read_text(errors="replace").splitlines()]
        out.append(f"== {f.parent.parent.name}/{f.parent.name}/{f.name}\n" + "\n".join(tail[-lines:]))
    return "\n".join(out)


def _pods(c: Cluster, component: str) -> list[dict[str, Any]]:
    sel = f"app.kubernetes.io/component={component}"
    return list(c.api.get(f"/api/v1/namespaces/{NS}/pods?labelSelector={sel}")["items"])
