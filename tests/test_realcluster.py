"""Three real nodes on this machine (tests/realcluster.py), and the chart spread across them.

    .venv/bin/python -m pytest tests/test_realcluster.py -v -s   # -s: node budget, nodes/pods -o wide

The nodes are started once per pytest run (the `real_cluster` fixture in conftest.py); each test
works in its own namespace and deletes what it made. Checked:
- every node is Ready with its own IP, and pods reach pods on the other nodes, by pod IP and
  through a Service by name (cluster DNS + kube-proxy in the client's node), across the bridge;
- the chart with workers in daemonset mode: one probe and one worker per node; one headless exec
  storm through the chart's controller counts generated == kernel in every window for every node,
  each node's row named by the worker pod on that node; the run's one trace, from the chart's
  Jaeger, has spans of exactly the controller, each worker and each probe, each on its own node
  (the spans' k8s.node.name and k8s.pod.name); the probe pods' RSS is printed per node;
- the same release upgraded to workers.mode=deployment with 3 replicas and
  workers.spreadOverNodes: one worker per node, and the new revision's run checked the same way.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from imagebuild import find_swarmscope_image
from jaegerapi import fetch_trace
from realcluster import (
    RealCluster,
    all_ready,
    container_memory,
    controller_report,
    nodes_wide,
    pods_in,
    pods_wide,
)
from realnode import pod_on, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(3600)]

ROOT = Path(__file__).resolve().parent.parent
POD_TIMEOUT = 120.0
RUNNING_TIMEOUT = 300.0
IMAGE_REPO = "ghcr.io/swarmscope/swarmscope"
JAEGER_REPO = "docker.io/jaegertracing/jaeger"
# Locust's flags after `--`: one user per worker pod, all three workers; -t counts from Locust's
# start, which comes after the probes joined (expect_probes).
HEADLESS = ["--", "--headless", "-u", "3", "-r", "3", "-t", "20s", "--expect-workers", "3"]


def _running(api: Any, ns: str, name: str) -> dict[str, Any] | None:
    p = api.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    return p if p["status"].get("phase") == "Running" and p["status"].get("podIP") else None


def test_pods_reach_pods_and_services_on_other_nodes(real_cluster: RealCluster) -> None:
    c, nodes = real_cluster.cluster, real_cluster.nodes
    api, ns = c.api, "rc-net"
    print(nodes_wide(api.get("/api/v1/nodes")["items"]), flush=True)
    ips = set()
    for node in nodes:
        n = api.get(f"/api/v1/nodes/{node.name}")
        assert any(x["type"] == "Ready" and x["status"] == "True" for x in n["status"]["conditions"])
        (ip,) = [a["address"] for a in n["status"]["addresses"] if a["type"] == "InternalIP"]
        assert ip == node.net.host_ip
        ips.add(ip)
    assert len(ips) == len(nodes) == 3

    busybox = real_cluster.import_image(nodes[0].tools.busybox_tar, "swarmscope.local/busybox")
    api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    try:
        # A web server on every node, each serving its node's name.
        for i, node in enumerate(nodes):
            page = f"mkdir /tmp/www && echo {node.name} > /tmp/www/index.html"
            script = f"{page} && exec httpd -f -p 8080 -h /tmp/www"
            web = pod_on(node.name, f"web{i}", busybox, ["sh", "-c", script])
            web["metadata"]["labels"] = {"app": f"web{i}"}
            api.post(f"/api/v1/namespaces/{ns}/pods", web)
            api.post(f"/api/v1/namespaces/{ns}/services", {
                "apiVersion": "v1", "kind": "Service", "metadata": {"name": f"web{i}"},
                "spec": {"selector": {"app": f"web{i}"}, "ports": [{"port": 80, "targetPort": 8080}]},
            })  # fmt: skip
        pods = [
            wait_for(f"web{i} Running", lambda i=i: _running(api, ns, f"web{i}"), POD_TIMEOUT)
            for i in range(3)
        ]
        for pod, node in zip(pods, nodes, strict=True):
            assert pod["spec"]["nodeName"] == node.name
            assert pod["status"]["podIP"].startswith(node.net.pod_subnet.rsplit(".", 1)[0] + ".")

        # A client on node 0 fetches every web page: by pod IP, then by Service name (the node's
        # cluster DNS, kube-proxy in its netns). nc, not wget: Debian's static busybox wget
        # segfaults here (tests/test_realnode.py).
        targets = [f"{p['status']['podIP']}:8080" for p in pods] + [f"web{i}.{ns}.svc:80" for i in range(3)]
        fetch = (
            f"for t in {' '.join(targets)}; do"
            " for i in $(seq 30); do out=$(printf 'GET / HTTP/1.0\\r\\n\\r\\n'"
            ' | nc -w 2 ${t%:*} ${t#*:} | tail -n1) && [ -n "$out" ] && break; sleep 1; done;'
            ' echo "$t $out"; done'
        )
        client = pod_on(nodes[0].name, "client", busybox, ["sh", "-c", fetch])
        client["spec"]["restartPolicy"] = "Never"
        api.post(f"/api/v1/namespaces/{ns}/pods", client)

        def done() -> str | None:
            phase = api.get(f"/api/v1/namespaces/{ns}/pods/client")["status"].get("phase")
            return phase if phase in ("Succeeded", "Failed") else None

        assert wait_for("the client's fetches", done, POD_TIMEOUT) == "Succeeded"
        log = api.get(f"/api/v1/namespaces/{ns}/pods/client/log")
        print(log, flush=True)
        assert log.splitlines() == [f"{t} {nodes[i % 3].name}" for i, t in enumerate(targets)]
        print(pods_wide(api.get(f"/api/v1/namespaces/{ns}/pods")["items"]), flush=True)
    finally:
        api.request("DELETE", f"/api/v1/namespaces/{ns}")
        wait_for(f"the pods of {ns} gone", lambda: not pods_in(api, ns), POD_TIMEOUT)


def test_chart_exec_storm_across_three_nodes(real_cluster: RealCluster) -> None:
    c, nodes = real_cluster.cluster, real_cluster.nodes
    api, ns, release = c.api, "rc-chart", "rc"
    names = sorted(n.name for n in nodes)
    t = time.monotonic()
    assert real_cluster.import_image(find_swarmscope_image(), IMAGE_REPO) == f"{IMAGE_REPO}:0.1.0"
    assert real_cluster.import_image(nodes[0].tools.jaeger_tar, JAEGER_REPO) == f"{JAEGER_REPO}:2.13.0"
    print(f"images imported in {time.monotonic() - t:.1f} s", flush=True)

    # One install: a worker and a probe per node; the controller waits for all three of each
    # (expect_probes, --expect-workers) and runs one headless exec storm.
    t = time.monotonic()
    c.helm(
        "install", release, str(ROOT / "charts" / "swarmscope"), "-n", ns, "--create-namespace",
        "--set", "workers.mode=daemonset",
        "--set", "scenario.config.expect_probes=3",
        "--set", "scenario.exec_storm.burst_s=0.3",
        "--set-json", f"controller.extraArgs={json.dumps(HEADLESS)}",
    )  # fmt: skip
    try:
        pods = wait_for("8 pods Running and ready", lambda: all_ready(api, ns, 8), RUNNING_TIMEOUT)
        print(f"helm install -> all Running in {time.monotonic() - t:.1f} s", flush=True)
        print(pods_wide(pods), flush=True)
        by: dict[str, dict[str, str]] = {}  # component -> node -> pod name
        for p in pods:
            comp = p["metadata"]["labels"]["app.kubernetes.io/component"]
            by.setdefault(comp, {})[p["spec"]["nodeName"]] = p["metadata"]["name"]
        assert sorted(by["probes"]) == sorted(by["workers"]) == names

        _check_run(real_cluster, ns, pods, by, t)

        # The probe pods' footprint on each real node (issue 26's goal: <= 40 MiB).
        for p in pods_in(api, ns):
            if p["metadata"]["labels"]["app.kubernetes.io/component"] == "probes":
                m = container_memory(p, "probe")
                where = f"probe pod {p['metadata']['name']} on {p['spec']['nodeName']}"
                print(f"{where}: RSS {m['rss']:.1f} MiB in {m['procs']:.0f} process(es),"
                      f" cgroup {m['cgroup']:.1f} MiB", flush=True)  # fmt: skip
    finally:
        c.helm("uninstall", release, "-n", ns, "--wait", "--timeout", "120s")
        api.request("DELETE", f"/api/v1/namespaces/{ns}")
        wait_for(f"the pods of {ns} gone", lambda: not pods_in(api, ns), POD_TIMEOUT)

    # Deployment mode: 3 replicas spread one per node (workers.spreadOverNodes), a fresh install
    # in a namespace of its own once the first is gone. Not a `helm upgrade`: during an upgrade the old
    # DaemonSet's worker pods, still terminating, joined the new revision's controller and took a
    # node's place in its run (seen: that node's row named by the old pod, its worker missing).
    ns = "rc-chart-deployment"
    t = time.monotonic()
    c.helm(
        "install", release, str(ROOT / "charts" / "swarmscope"), "-n", ns, "--create-namespace",
        "--set", "workers.mode=deployment", "--set", "workers.replicas=3",
        "--set", "workers.spreadOverNodes=true",
        "--set", "scenario.config.expect_probes=3",
        "--set", "scenario.exec_storm.burst_s=0.3",
        "--set-json", f"controller.extraArgs={json.dumps(HEADLESS)}",
    )  # fmt: skip
    try:
        pods = wait_for("8 pods Running and ready", lambda: all_ready(api, ns, 8), RUNNING_TIMEOUT)
        print(f"helm install (workers.mode=deployment) -> all Running in {time.monotonic() - t:.1f} s")
        print(pods_wide(pods), flush=True)
        by = {}
        for p in pods:
            by.setdefault(_component(p), {})[p["spec"]["nodeName"]] = p["metadata"]["name"]
        workers = [p for p in pods if _component(p) == "workers"]
        assert {o["kind"] for p in workers for o in p["metadata"]["ownerReferences"]} == {"ReplicaSet"}
        assert sorted(by["workers"]) == names  # one per node: the spread, not chance
        _check_run(real_cluster, ns, pods, by, t)
    finally:
        c.helm("uninstall", release, "-n", ns, "--wait", "--timeout", "120s")
        api.request("DELETE", f"/api/v1/namespaces/{ns}")
        wait_for(f"the pods of {ns} gone", lambda: not pods_in(api, ns), POD_TIMEOUT)


def _component(p: dict[str, Any]) -> str:
    return str(p["metadata"]["labels"]["app.kubernetes.io/component"])


def _check_run(
    rc: RealCluster, ns: str, pods: list[dict[str, Any]], by: dict[str, dict[str, str]], t: float
) -> None:
    """The run of the controller in ``pods``: its report's rows exact per node and named by the
    worker pod on that node (``by``: component -> node -> pod), then its one trace from the
    chart's Jaeger with spans from the controller, every worker and every probe, each on its node."""
    names = sorted(n.name for n in rc.nodes)
    (ctrl,) = [p for p in pods if _component(p) == "controller"]
    rep = controller_report(rc, pods, RUNNING_TIMEOUT)
    print(f"report in {time.monotonic() - t:.1f} s: status {rep['status']}, flags {rep['flags']}", flush=True)
    iterations = rep["points"][0]["iterations"]
    assert iterations
    for it in iterations:
        rows = sorted(it["per_node"], key=lambda r: r["node"])
        for r in rows:
            print(f"  window {it.get('iteration', '?')}: {r['node']} {r['pod']} "
                  f"generated {r['generated']} kernel {r['kernel']}", flush=True)  # fmt: skip
        assert [r["node"] for r in rows] == names
        for r in rows:
            assert r["generated"] == r["kernel"] > 0, r
            assert r["pod"] == f"{ns}/{by['workers'][r['node']]}/worker", r

    # The trace: every span's resource names its pod and node (the chart's OTEL_RESOURCE_ATTRIBUTES).
    (jaeger,) = [p for p in pods if _component(p) == "jaeger"]
    base = f"http://{jaeger['status']['podIP']}:16686"
    want = {("swarmscope-controller", ctrl["spec"]["nodeName"], ctrl["metadata"]["name"])}
    for svc, comp in (("swarmscope-worker", "workers"), ("swarmscope-probe", "probes")):
        want |= {(svc, node, pod) for node, pod in by[comp].items()}
    services = {w[0] for w in want}
    deadline = time.monotonic() + 60
    while True:  # spans arrive in batches, each pod's on its own; the root span (it ends last)
        spans = fetch_trace(base, rep["trace_id"], services)
        have = {
            (s["service"], s["resource"].get("k8s.node.name"), s["resource"].get("k8s.pod.name"))
            for s in spans
        }
        rooted = any(not s["parent"] and s["name"] == "run exec_storm" for s in spans)
        if (have >= want and rooted) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    print(f"trace {rep['trace_id']} from the chart's Jaeger, {len(spans)} spans:", flush=True)
    for node in names:
        on = Counter(
            (s["service"].removeprefix("swarmscope-"), s["name"])
            for s in spans if s["resource"].get("k8s.node.name") == node
        )  # fmt: skip
        print(
            f"  {node}: " + ", ".join(f"{svc} '{name}' x{k}" for (svc, name), k in sorted(on.items())),
            flush=True,
        )
    assert have == want, rep["trace_id"]
    roots = [s for s in spans if not s["parent"]]
    assert [(r["service"], r["name"]) for r in roots] == [("swarmscope-controller", "run exec_storm")]
