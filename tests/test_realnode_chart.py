"""`helm install` with the default values onto a real node: every pod runs, not privileged.

    .venv/bin/python -m pytest tests/test_realnode_chart.py -v -s   # -s: build/start timings, pods

The image is built here (tools/build_image.py: the Dockerfile's steps with mmdebstrap + umoci,
the pinned wheels installed offline; cached by content) and imported into the real node's
containerd under the chart's default name, as is Jaeger's (from its Go module, tools/k8s/build.sh
jaegerimage). A kwok node stays beside the real one, cordoned, so the Deployments land on the
real node while the probe DaemonSet (it tolerates everything) runs on both. The chart is
installed unmodified; Service names resolve through the node's cluster DNS and route through
kube-proxy in the node's network namespace (tests/realnode.py).

Checked on the real node: the controller, the worker, Jaeger and the probe are Running with all
containers ready; the probe loaded its BPF programs with BPF + PERFMON only and said that the
run-time statistics it lacks CAP_SYS_ADMIN for are off; the worker runs as uid 10001 on a
read-only root filesystem and the exec helpers were prebuilt in the image, not compiled.
`make tools` builds the image first (minutes cold; see docs/realnode.md for the figures).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from cluster import fake_node
from jaegerapi import fetch_trace, span_tree
from realchart import (
    IMAGE,
    IMAGE_REPO,
    JAEGER,
    JAEGER_REPO,
    RUNNING_TIMEOUT,
    ChartNode,
    Release,
    exec_storm_upgrade,
    ready,
)
from realcluster import container_memory, pods_wide
from realnode import wait_for

from swarmscope.core.sys.otlpjson import spans_of

# cluster: the kube/node/image builds of `make tools`; the timeout covers a node's start and image imports
pytestmark = [pytest.mark.cluster, pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(3600)]

NS = "ssrn"
RELEASE = "rn"
KWOK = "kwok-node-0"
# The probe's one line about what it lacks CAP_SYS_ADMIN for (probes/cli.py), and the one program
# the probe holds between windows (exec_count's sched_process_exec tracepoint).
STATS_DROPPED = (
    "probe: program run-time statistics dropped: bpf_enable_stats(BPF_STATS_RUN_TIME): Operation not "
    "permitted (root needed) (CAP_SYS_ADMIN is needed; the chart grants it with "
    "probes.features.programStats=true)"
)
EXEC_COUNT_PROGRAM = "tracepoint__sched__sched_process_exec"


def test_chart_default_values_run_on_the_real_node(real_node: ChartNode) -> None:
    c = real_node.cluster
    # The probe DaemonSet (it tolerates everything) runs here too; the Deployments do not.
    kwok = fake_node(KWOK)
    kwok["spec"]["unschedulable"] = True
    c.api.post("/api/v1/nodes", kwok)
    try:
        assert real_node.image(IMAGE_REPO) == IMAGE
        assert real_node.image(JAEGER_REPO) == JAEGER
        t = time.monotonic()
        with real_node.release(RELEASE, NS) as r:
            _default_values_run(r, t)
    finally:
        c.api.request("DELETE", f"/api/v1/nodes/{KWOK}")


def _default_values_run(r: Release, t: float) -> None:
    c, node = r.c, r.node
    try:
        pods = wait_for("every pod Running and ready", lambda: r.all_ready(5), RUNNING_TIMEOUT)
    finally:
        print(pods_wide(r.all_pods()), flush=True)
    print(f"helm install -> all Running in {time.monotonic() - t:.1f} s", flush=True)

    by_component: dict[str, list[dict[str, Any]]] = {}
    for p in pods:
        comp = p["metadata"]["labels"]["app.kubernetes.io/component"]
        by_component.setdefault(comp, []).append(p)
    assert sorted((k, len(v)) for k, v in by_component.items()) == [
        ("controller", 1), ("jaeger", 1), ("probes", 2), ("workers", 1),
    ]  # fmt: skip
    for comp in ("controller", "jaeger", "workers"):
        assert by_component[comp][0]["spec"]["nodeName"] == node.name
    probe = next(p for p in by_component["probes"] if p["spec"].get("nodeName") == node.name)
    sc = probe["spec"]["containers"][0]["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["BPF", "PERFMON"]}
    assert sc["privileged"] is False
    log = c.api.get(f"/api/v1/namespaces/{NS}/pods/{probe['metadata']['name']}/log")
    print("probe log:\n" + log, flush=True)
    # The statistics it cannot have, said once, in these words (EPERM from BPF_ENABLE_STATS).
    assert [ln for ln in log.splitlines() if "statistics" in ln] == [STATS_DROPPED], log

    worker = by_component["workers"][0]
    wsc = worker["spec"]["containers"][0]["securityContext"]
    assert (wsc["runAsUser"], wsc["readOnlyRootFilesystem"], wsc["runAsNonRoot"]) == (10001, True, True)

    # This kubelet keeps pod logs in its own dir (podLogsDir), not /var/log/pods: the probe
    # mounts that one, to name pods (probes.podLogs; docs/pod-attribution.md).
    t = time.monotonic()
    _probe_upgrade(r)
    print(f"probe upgraded (podLogs) and ready in {time.monotonic() - t:.1f} s", flush=True)

    # The exec storm through the chart's controller: the same release, its controller told to
    # run headless (as tests/test_cluster_mode.py runs the chart's commands on the host).
    t = time.monotonic()
    ctrl = exec_storm_upgrade(r)
    report_path = wait_for("the exec storm's report", lambda: r.first_report([ctrl]), RUNNING_TIMEOUT)
    rep = json.loads(report_path.read_text())
    print(f"exec storm through the chart's controller: report in {time.monotonic() - t:.1f} s", flush=True)
    print(f"report: status {rep['status']}, flags {rep['flags']}", flush=True)
    iterations = rep["points"][0]["iterations"]
    worker_pod = r.running("workers")
    want_pod = f"{NS}/{worker_pod['metadata']['name']}/worker"
    # One headless Locust run (-t 15s) is one window: one point, one iteration.
    assert (len(rep["points"]), [it["iteration"] for it in iterations]) == (1, [1])
    for it in iterations:
        (n,) = it["per_node"]
        print(f"  window {it.get('iteration', '?')}: {n}", flush=True)
        assert n["node"] == node.name
        assert n["generated"] == n["kernel"] > 0, n
    probe_now = next(
        p for p in r.pods("probes")
        if p["spec"].get("nodeName") == node.name and not p["metadata"].get("deletionTimestamp")
    )  # fmt: skip
    plog = c.api.get(f"/api/v1/namespaces/{NS}/pods/{probe_now['metadata']['name']}/log")
    attributed = [ln for ln in plog.splitlines() if "is pod" in ln]
    print("probe log, attribution:\n" + "\n".join(attributed), flush=True)

    # top-ebpf on the node: the probe pod's programs are named by the pod holding them.
    top = subprocess.run(
        [str(Path(sys.executable).parent / "swarmscope"), "top-ebpf", "--json", "-d", "0.2"],
        env={**os.environ, "SWARMSCOPE_POD_LOGS_DIR": str(node.pod_logs)},
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    probe_pod = f"{NS}/{probe_now['metadata']['name']}/probe"
    held = [(p["id"], p["name"]) for p in json.loads(top.stdout)["programs"] if p["pods"] == [probe_pod]]
    print(f"top-ebpf: programs held by {probe_pod}: {held}", flush=True)

    # The run's trace from the chart's Jaeger (its query API on the pod IP: the host routes
    # to the node's pod subnet): controller, worker pod and probe pod, parents intact.
    jaeger_ip = r.running("jaeger")["status"]["podIP"]
    services = {"swarmscope-controller", "swarmscope-worker", "swarmscope-probe"}
    spans = fetch_trace(f"http://{jaeger_ip}:16686", rep["trace_id"], services)
    print(f"trace {rep['trace_id']} from Jaeger:\n" + span_tree(spans), flush=True)
    if {s["service"] for s in spans} != services:  # what the run's own trace.json has
        tj = json.loads((report_path.parent / "trace.json").read_text())
        have = sorted({(s["service"], s["name"]) for s in spans_of(tj)})
        print(f"trace.json spans: {have}", flush=True)
        wname = worker_pod["metadata"]["name"]
        for q in ("", "?previous=true"):
            with contextlib.suppress(Exception):
                print(f"worker log{q}:\n" + c.api.get(f"/api/v1/namespaces/{NS}/pods/{wname}/log{q}")[-3000:])
    for it in iterations:  # by name: the probe mapped the worker's cgroup to its pod
        assert it["per_node"][0]["pod"] == want_pod, it["per_node"]
    assert any(want_pod in ln for ln in attributed)
    assert [name for _, name in held] == [EXEC_COUNT_PROGRAM]  # exec_count's, the only one left
    # Issue 26's goal: the probe pod's RSS (its container's processes, from its cgroup on the
    # host) at most 40 MiB, steady: 20 s or more after the probe started, after its window.
    started = probe_now["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    time.sleep(max(0.0, datetime.fromisoformat(started).timestamp() + 20 - time.time()))
    mem = container_memory(probe_now, "probe")
    print(f"probe pod RSS {mem['rss']:.1f} MiB (anon {mem['anon']:.1f}, file {mem['file']:.1f})"
          f" in {mem['procs']:.0f} process(es), memory cgroup {mem['cgroup']:.1f} MiB")  # fmt: skip
    assert mem["procs"] == 1 and mem["rss"] <= 40.0, mem
    _check_trace(spans, rep["trace_id"], {
        "swarmscope-controller": ctrl["metadata"]["name"],
        "swarmscope-worker": worker_pod["metadata"]["name"],
        "swarmscope-probe": probe_now["metadata"]["name"],
    }, want_pod, len(iterations))  # fmt: skip


def _probe_upgrade(r: Release) -> None:
    """helm upgrade: the probe mounts this kubelet's pod log dir; wait for the new probe pod."""
    old = {p["metadata"]["uid"] for p in r.pods("probes")}
    r.upgrade("--reuse-values", "--set", f"probes.podLogs.podsDir={r.node.pod_logs}")

    def new_ready() -> bool:
        return any(
            p["metadata"]["uid"] not in old
            and p["spec"].get("nodeName") == r.node.name  # unset until scheduled
            and ready(p)
            for p in r.pods("probes")
        )

    wait_for("the upgraded probe ready", new_ready, RUNNING_TIMEOUT)


def _check_trace(
    spans: list[dict[str, Any]], trace_id: str, pods: dict[str, str], worker: str, windows: int
) -> None:
    """Every service's spans come from its pod (resource k8s.pod.name); every parent is in the
    trace; each probe window and worker span hangs under the controller's iteration span."""
    by_id = {s["id"]: s for s in spans}
    assert {s["service"] for s in spans} == set(pods), trace_id
    for s in spans:
        assert s["resource"].get("k8s.pod.name") == pods[s["service"]], s
        assert s["resource"].get("k8s.namespace.name") == NS, s
        if s["parent"]:
            assert s["parent"] in by_id, f"{s['service']} {s['name']}: parent {s['parent']} not in the trace"
    roots = [s for s in spans if not s["parent"]]
    assert [(r["service"], r["name"]) for r in roots] == [("swarmscope-controller", "run exec_storm")]
    probe_windows = [s for s in spans if s["service"] == "swarmscope-probe" and s["name"] == "probe window"]
    assert len(probe_windows) == windows
    for s in [*probe_windows, *(s for s in spans if s["service"] == "swarmscope-worker")]:
        parent = by_id[s["parent"]]
        assert (parent["service"], parent["name"].split()[0]) == ("swarmscope-controller", "iteration"), s
    for s in probe_windows:  # the probe's span names the pod it counted, as does the controller's
        assert s["tags"]["swarmscope.pod." + s["tags"]["swarmscope.node"]] == worker
    node_windows = [
        s for s in spans if s["service"] == "swarmscope-controller" and s["name"].startswith("window ")
    ]
    assert len(node_windows) == windows
    assert {s["tags"].get("swarmscope.pod") for s in node_windows} == {worker}
