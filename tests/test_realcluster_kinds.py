"""The chart's other kinds across three real nodes (tests/realcluster.py), each exact per node.

    .venv/bin/python -m pytest tests/test_realcluster_kinds.py -v -s   # -s: figures, timings

One `helm install` per kind on the session's `real_cluster` (each in its own namespace, removed
after), the pods placed with the chart's nodeSelector/affinity values, rows named by pod:
- ingress flood: the chart's target (nginx LB + backends) on node 0, one worker on node 1 and one
  on node 2, so every request crosses the bridge; `-n` request-count steps. Exact per node: the
  LB's access log, by client pod address, holds each worker's requests (plus the preflight);
  the rows are the workers' (w1-n1, w2-n1): the ingress worker's node is the whole host
  (cgroup 0, for the proxy's procstat), so no probe names a pod for it, the log does;
- flow storm: a worker on every node, each sending its share of the flows in its own pod; each
  node's probe counts them by XDP, attached only to its own node's worker (flow_count.scope):
  generated == kernel for packets, bytes, flows and the per-flow digest per node;
- neighbor writes: a worker (agent + its own control plane, transport grpc) on every node, each
  its share of N: generated == kernel (the node probe's map-update calls) == reported per node;
- the Arion write-up's two machines: the control plane in its own pod on node 0
  (workers.neighbors.controlPlane), the agent's worker on node 1, over the pod network; the
  agent's round trip to it (gRPC Status and the kernel's TCP RTT) printed beside the
  per-neighbor latency, with the previous test's same-pod (loopback) figures.

Caveat: the nodes share this machine's kernel and 2 cores; a round trip between nodes crosses two
veths and a bridge, not a wire (docs/realcluster.md).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import pytest
from imagebuild import find_swarmscope_image
from realcluster import RealCluster
from realrelease import HOST, IMAGE_REPO, Release, base_values

pytestmark = [pytest.mark.cluster, pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(3600)]

COUNTS = [150, 250]  # ingress: requests per step (boom's -n), split over the workers
FLOWS, PPF, FRAME = 3000, 2, 128  # flow storm: 1,000 flows per node, 2 packets of 128 bytes each
N = 1500  # neighbors per window: 500 per node on three nodes
N_REMOTE = 2000  # neighbors per window with the control plane on another node
NEIGHBOR_MODES = ["list_program", "write_watch_program"]  # what gRPC carries (watch_only: ipc)
LOOPBACK: dict[str, Any] = {}  # the three-node neighbor test's figures, printed beside the remote's


def _spread(release: str, avoid: str | None = None) -> dict[str, Any]:
    """Worker pods on different nodes (and not on ``avoid``)."""
    aff: dict[str, Any] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "workers",
                                              "app.kubernetes.io/instance": release}},
            "topologyKey": HOST,
        }]},
    }  # fmt: skip
    if avoid:
        aff["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": HOST, "operator": "NotIn", "values": [avoid]}]}]}}  # fmt: skip
    return aff


def _pod_names(rel: Release, workers: dict[str, dict[str, Any]]) -> dict[str, str]:
    """{node: the row name of its worker pod} (namespace/pod/container)."""
    return {node: f"{rel.ns}/{p['metadata']['name']}/worker" for node, p in workers.items()}


def _on(rel: Release, workers: dict[str, dict[str, Any]], pod: str | None) -> str:
    """The real node a row's pod runs on."""
    return next((node for node, name in _pod_names(rel, workers).items() if name == pod), "?")


def _by_node(pods: list[dict[str, Any]], component: str) -> dict[str, dict[str, Any]]:
    return {
        p["spec"]["nodeName"]: p
        for p in pods
        if p["metadata"]["labels"]["app.kubernetes.io/component"] == component
    }


@pytest.fixture(scope="module")
def rc(real_cluster: RealCluster) -> RealCluster:
    t = time.monotonic()
    assert real_cluster.import_image(find_swarmscope_image(), IMAGE_REPO) == f"{IMAGE_REPO}:0.1.0"
    print(f"image in every node after {time.monotonic() - t:.1f} s", flush=True)
    return real_cluster


def test_ingress_flood_from_two_nodes_to_a_target_on_the_third(rc: RealCluster) -> None:
    n0, n1, n2 = (n.name for n in rc.nodes)
    rel = Release(rc, "rck-ing", "rki")
    values = base_values("ingress_flood", steps=[2, 4], requests=COUNTS, step_duration=60)
    values["target"] = {"enabled": True, "nodeSelector": {HOST: n0}}
    values["workers"] = {"replicas": 2, "affinity": _spread(rel.name, avoid=n0)}
    # Installed idle (the web UI waits), so the target is Ready before a worker's preflight;
    # then an upgrade makes the controller run once, headless, with both workers.
    with rel.installed(values, 7) as pods:
        workers = _by_node(pods, "workers")
        (target,) = rel.pods("target")
        assert sorted(workers) == [n1, n2] and target["spec"]["nodeName"] == n0
        old = {p["metadata"]["uid"] for p in rel.pods("controller")}
        t = time.monotonic()
        headless = ["--", "--headless", "--expect-workers", "2"]
        rel.helm("upgrade", values, "--set-json", f"controller.extraArgs={json.dumps(headless)}")
        rep = rel.report(skip=old)
        print(f"ingress flood across nodes: report in {time.monotonic() - t:.1f} s", flush=True)
        ing = rep["ingress"]
        # Every line (the controller idles after its run): by client address, the worker pods.
        log = (rel.volume(target, "logs") / "access.log").read_text().splitlines()
        by_ip = Counter(line.split()[-1] for line in log)
        (it,) = [it for p in rep["points"] for it in p["iterations"]]
        sent = {r["node"]: r["generated"] for r in it["per_node"]}
        lines = {f"{rel.ns}/{p['metadata']['name']}": by_ip[p["status"]["podIP"]] for p in workers.values()}
        p99 = [(s.get("latency_ms") or {}).get("p99") for s in rep["steps"]]
        steps = [(s.get("users"), s["requests"], q) for s, q in zip(rep["steps"], p99, strict=True)]
        print(f"  per worker node, sent: {sent}; the LB's log, by client pod: {lines}; steps "
              f"(users, requests, p99 ms): {steps}", flush=True)  # fmt: skip
        print(f"  requests {ing['requests']} (+{ing['preflight_requests']} preflight), access log {len(log)}",
              flush=True)  # fmt: skip
        assert set(by_ip) == {p["status"]["podIP"] for p in workers.values()}, by_ip  # pod IPs: no SNAT
        assert ing["requests"] == ing["successes"] == sum(sent.values()) == sum(COUNTS)
        assert ing["target_requests"] == sum(COUNTS) + ing["preflight_requests"] == len(log)
        assert len(sent) == 2 and min(sent.values()) > 0
        # Each worker's requests are one pod's lines: the preflight is one worker's extra line.
        # (The ingress worker describes its node as the whole host, cgroup 0, so its probe names
        # no pod for the row: the LB's log names them.)
        gs = sorted(sent.values())
        pre = ing["preflight_requests"]
        want = [sorted([*gs[:i], gs[i] + pre, *gs[i + 1 :]]) for i in range(len(gs))]
        assert sorted(lines.values()) in want, (lines, sent)


def test_flow_storm_one_worker_per_node(rc: RealCluster) -> None:
    names = sorted(n.name for n in rc.nodes)
    rel = Release(rc, "rck-flow", "rkf")
    values = base_values("flow_storm", flows=[FLOWS], packets_per_flow=PPF, frame_bytes=FRAME, rate_pps=2000,
                   agent="reference", cache_max_flows=[100000])  # fmt: skip
    # BCC's compile of the flow agent's program beside the Locust worker.
    values["workers"] = {"replicas": 3, "affinity": _spread("rkf"), "flows": {"enabled": True},
                         "resources": {"limits": {"memory": "1Gi"}}}  # fmt: skip
    t = time.monotonic()
    with rel.installed(values, 7) as pods:
        workers = _by_node(pods, "workers")
        assert sorted(workers) == names
        rep = rel.report()
        print(f"flow storm across nodes: report in {time.monotonic() - t:.1f} s; status {rep['status']}, "
              f"flags {rep['flags']}", flush=True)  # fmt: skip
        (p,) = rep["points"]
        (it,) = p["iterations"]
        if "flows" not in it["extra"]:
            print(json.dumps(it, default=str)[:3000], "\n", rel.logs(), flush=True)
        share = FLOWS // 3
        for n in sorted(it["per_node"], key=lambda r: r["node"]):
            row = it["extra"]["flows"][n["node"]]
            k = row["kernel"]
            on = _on(rel, workers, n["pod"])
            print(f"  {n['node']} {n['pod']} on {on}: generated {n['generated']} kernel {n['kernel']} "
                  "packets; "
                  f"flows {row['flows']} kernel {k['flows']}; bytes {row['bytes']} kernel {k['bytes']}",
                  flush=True)  # fmt: skip
        assert (rep["status"], rep["flags"], it["flags"]) == ("ok", [], [])
        # One row per worker (w1-n1...), each named by its own pod: one pod on every node.
        assert sorted(n["pod"] for n in it["per_node"]) == sorted(_pod_names(rel, workers).values())
        for n in it["per_node"]:
            assert n["missing"] == []
            row = it["extra"]["flows"][n["node"]]
            assert n["generated"] == n["kernel"] == row["kernel"]["packets"] == share * PPF
            assert row["kernel"]["bytes"] == row["bytes"] == FRAME * share * PPF
            assert row["kernel"]["flows"] == row["flows"] == share
            assert row["kernel"]["digest"] == row["digest"] > 0  # flow by flow
            assert (row["kernel"]["drops"], row["problems"]) == (0, [])
        (sp,) = rep["flow_storm"]["points"]
        assert sp["generated"] == sp["kernel"] == FLOWS * PPF and sp["per_flow_ok"] is True


def _neighbor_values(release: str, workers: dict[str, Any], n: int) -> dict[str, Any]:
    values = base_values("neighbor_writes", neighbors=[n], modes=NEIGHBOR_MODES, transport="grpc", plot=False)
    # BCC's compile of the XDP program peaks at about 300 MiB beside the Locust worker.
    values["workers"] = {**workers, "resources": {"limits": {"memory": "1Gi"}}}
    values["workers"]["neighbors"] = {"enabled": True, **workers.get("neighbors", {})}
    return values


def _neighbor_check(rep: dict[str, Any], rel: Release, workers: dict[str, Any], n: int) -> None:
    """Every window exact per node (generated == kernel == reported == its share), named by pod."""
    by_mode = {x["mode"]: x for x in rep["neighbors"]["points"]}
    for p in rep["points"]:
        (it,) = p["iterations"]
        x = by_mode[p["params"]["mode"]]
        for r in sorted(it["per_node"], key=lambda r: r["node"]):
            on = _on(rel, workers, r["pod"])
            print(f"  {p['params']['mode']} {r['node']} {r['pod']} on {on}: generated {r['generated']} "
                  "kernel "
                  f"{r['kernel']} reported {r['reported']}", flush=True)  # fmt: skip
        print(f"  {p['params']['mode']} N={n}: {x['per_neighbor_us']} µs/neighbor (Arion "
              f"{x['arion_per_neighbor_us']}), p50 {x['p50_us']} µs, p99 {x['p99_us']} µs; control plane "
              f"{x['control_plane']}: gRPC RTT p50 {x['rtt_grpc_p50_us']} µs, TCP RTT {x['rtt_tcp_us']} µs",
              flush=True)  # fmt: skip
    assert (rep["status"], rep["flags"]) == ("ok", []), json.dumps(rep["neighbors"]["points"])[:3000]
    assert [p["params"]["mode"] for p in rep["points"]] == NEIGHBOR_MODES
    share = n // len(workers)
    for p in rep["points"]:
        (it,) = p["iterations"]
        # One row per worker (w1-n1...), each named by its own pod: one pod per node.
        assert sorted(r["pod"] for r in it["per_node"]) == sorted(_pod_names(rel, workers).values())
        for r in it["per_node"]:
            assert (r["generated"], r["kernel"], r["reported"], r["missing"]) == (share, share, share, [])
        x = by_mode[p["params"]["mode"]]
        assert x["verified"] is True and x["problems"] == [], x
        assert x["generated"] == x["kernel_entries"] == x["reported"] == n
        assert x["rtt_grpc_p50_us"] > 0 and x["rtt_tcp_us"] > 0


def test_neighbor_writes_one_worker_per_node(rc: RealCluster) -> None:
    names = sorted(n.name for n in rc.nodes)
    rel = Release(rc, "rck-nb", "rkn")
    values = _neighbor_values(rel.name, {"replicas": 3, "affinity": _spread(rel.name)}, N)
    t = time.monotonic()
    with rel.installed(values, 7) as pods:
        workers = _by_node(pods, "workers")
        assert sorted(workers) == names
        rep = rel.report()
        print(f"neighbor writes across nodes: report in {time.monotonic() - t:.1f} s", flush=True)
        _neighbor_check(rep, rel, workers, N)
        for x in rep["neighbors"]["points"]:
            assert x["control_plane"] == "local"  # each worker's own, on its loopback
            LOOPBACK[x["mode"]] = x


def test_neighbor_control_plane_on_one_node_agent_on_another(rc: RealCluster) -> None:
    n0, n1, _ = (n.name for n in rc.nodes)
    rel = Release(rc, "rck-cp", "rkc")
    values = _neighbor_values(rel.name, {"replicas": 1, "nodeSelector": {HOST: n1},
                                         "neighbors": {"controlPlane": {"enabled": True,
                                                                        "nodeSelector": {HOST: n0}}}},
                              N_REMOTE)  # fmt: skip
    t = time.monotonic()
    with rel.installed(values, 6) as pods:
        (cp,) = rel.pods("neighbors-control-plane")
        workers = _by_node(pods, "workers")
        assert list(workers) == [n1] and cp["spec"]["nodeName"] == n0
        # The pod network between them: each pod IP in its own node's pod CIDR.
        for pod, node in ((cp, rc.nodes[0]), (workers[n1], rc.nodes[1])):
            assert pod["status"]["podIP"].startswith(node.net.pod_subnet.rsplit(".", 1)[0] + ".")
        rep = rel.report()
        print(f"neighbor writes, control plane on {n0}, agent on {n1}: report in "
              f"{time.monotonic() - t:.1f} s", flush=True)  # fmt: skip
        _neighbor_check(rep, rel, workers, N_REMOTE)
        for x in rep["neighbors"]["points"]:
            assert x["control_plane"] == f"{rel.full}-neighbors-cp:7443"
            lo = LOOPBACK.get(x["mode"])
            if lo:
                print(f"  {x['mode']}: across nodes {x['per_neighbor_us']} µs/neighbor, RTT gRPC "
                      f"{x['rtt_grpc_p50_us']} µs / TCP {x['rtt_tcp_us']} µs; same pod "
                      f"{lo['per_neighbor_us']} µs/neighbor, RTT gRPC {lo['rtt_grpc_p50_us']} µs / TCP "
                      f"{lo['rtt_tcp_us']} µs", flush=True)  # fmt: skip
