"""The ingress flood through a real ingress controller, Traefik v3, on the three real nodes.

    .venv/bin/python -m pytest tests/test_realcluster_traefik.py -v -s   # -s: grid, CPU/RSS, downtime

One `helm install` of the chart with target.controller=traefik (charts/swarmscope/templates/
target-traefik.yaml: Traefik's Deployment, its namespaced RBAC, an Ingress object routing to a
Deployment of nginx backend replicas) on the `real_cluster` fixture's three nodes, then helm
upgrades that each make the controller run one headless scenario:

1. The grid, short: two concurrencies (boom's -c) with a request count each (-n), with 1 then 2
   backend replicas. Exact per step by the kind's rule (requests == successes == the count asked,
   no failure), and Traefik's access log grows by exactly the run's requests + its preflight.
   Traefik's CPU/RSS per second from the probe (procstat by name, probes on the host PID
   namespace): one row per second of the step, pidstat's columns.
2. kill-pod on Traefik's pod with a 30 s grace period (the write-up's), Traefik's own shutdown
   (it stops accepting at SIGTERM and exits once in-flight requests are done): the downtime the
   worker saw, printed next to the write-up's ~30 s. Checked: the outage starts at the fault and
   ends within the grace period (Traefik does not hold it: its replacement starts at once).

The full grid (concurrency 100…1000 × replicas 1/2/4) is the same install with other values:
docs/cluster.md.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import prebuilt
import pytest
from cluster import BUILD, Cluster
from imagebuild import find_swarmscope_image
from realcluster import RealCluster, pods_wide
from realnode import RealNode, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(3600)]

ROOT = Path(__file__).resolve().parent.parent
NS, RELEASE = "rc-traefik", "rt"
IMAGE_REPO = "ghcr.io/swarmscope/swarmscope"
JAEGER_REPO = "docker.io/jaegertracing/jaeger"
TRAEFIK_REPO = "docker.io/library/traefik"
TIMEOUT = 300.0
GRACE_S = 30  # kubectl delete pod's default (the write-up's pod was Terminating ~30 s)
SEED = "write-up (nginx ingress controller pod killed): ~30 s of downtime"
HEADLESS = ["--", "--headless", "--expect-workers", "1"]  # the steps set the run's length
STEPS, COUNTS = [10, 40], [1500, 2500]  # users and requests per step: long enough for ticks
REPLICAS = [1, 2]
KILL = [
    "--set", "scenario.ingress_flood.fault=kill-pod", "--set", "scenario.ingress_flood.fault_at=5",
    "--set", f"scenario.ingress_flood.grace_period_s={GRACE_S}",
    "--set", "scenario.ingress_flood.step_duration=40", "--set", "scenario.ingress_flood.steps={4}",
    "--set", "scenario.ingress_flood.requests=null",
]  # fmt: skip


def find_traefik_image() -> Path:
    """The chart's Traefik image, as `make tools` built it (tools/k8s/build.sh traefikimage)."""
    return Path(prebuilt.run([str(BUILD), "traefikimage"]).split()[-1]) / "traefik.tar"


def test_ingress_grid_and_kill_pod_through_traefik_on_three_nodes(
    real_cluster: RealCluster, tmp_path: Path
) -> None:
    rc, c = real_cluster, real_cluster.cluster
    t = time.monotonic()
    assert rc.import_image(find_swarmscope_image(), IMAGE_REPO) == f"{IMAGE_REPO}:0.1.0"
    assert rc.import_image(rc.nodes[0].tools.jaeger_tar, JAEGER_REPO) == f"{JAEGER_REPO}:2.13.0"
    assert rc.import_image(find_traefik_image(), TRAEFIK_REPO) == f"{TRAEFIK_REPO}:v3.6.12"
    print(f"images imported in {time.monotonic() - t:.1f} s", flush=True)

    t = time.monotonic()
    values = tmp_path / "values.json"
    values.write_text(json.dumps({
        "target": {"enabled": True, "controller": "traefik", "backends": REPLICAS[0],
                   "terminationGracePeriodSeconds": GRACE_S},
        "scenario": {"config": {"scenario": "ingress_flood", "expect_probes": len(rc.nodes)},
                     "ingress_flood": {"steps": STEPS, "requests": COUNTS, "step_duration": 60}},
    }))  # fmt: skip
    c.helm("install", RELEASE, str(ROOT / "charts" / "swarmscope"), "-n", NS, "--create-namespace",
           "-f", str(values))  # fmt: skip
    try:
        # controller, worker, jaeger, a probe per node, Traefik, one backend
        pods = wait_for("every pod Running and ready", lambda: _all_ready(c, 5 + len(rc.nodes)), TIMEOUT)
        print(f"helm install -> all Running in {time.monotonic() - t:.1f} s", flush=True)
        print(pods_wide(pods), flush=True)
        grid = [_grid_run(rc, values, reps) for reps in REPLICAS]
        print(f"\n{'replicas':>8} {'users':>5} {'-n':>5} {'rps':>7} {'p50 ms':>7} {'p99 ms':>7} "
              f"{'traefik %CPU':>12} {'RSS KiB':>8}", flush=True)  # fmt: skip
        for reps, steps in zip(REPLICAS, grid, strict=True):
            for s in steps:
                lat, proxy = s["latency_ms"], s["proxy"]
                print(f"{reps:>8} {s['users']:>5} {s['request_count']:>5} {s['rps']:>7.0f} "
                      f"{lat['p50']:>7.1f} {lat['p99']:>7.1f} "
                      f"{proxy['cpu_pct']:>12.1f} {proxy['rss_kib_max']:>8.0f}", flush=True)  # fmt: skip
        _kill_run(rc, values)
    finally:
        c.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "120s", check=False)
        c.api.request("DELETE", f"/api/v1/namespaces/{NS}")
        gone = lambda: not c.api.get(f"/api/v1/namespaces/{NS}/pods")["items"]  # noqa: E731
        wait_for(f"the pods of {NS} gone", gone, TIMEOUT)


def _grid_run(rc: RealCluster, values: Path, reps: int) -> list[dict[str, Any]]:
    """One run of the two steps with ``reps`` backend replicas; its steps, checked."""
    c = rc.cluster
    sets = ["--set", f"target.backends={reps}"]
    (traefik,) = _pods(c, "target")
    log = _volume(rc, traefik, "logs") / "access.log"
    lines = len(log.read_text().splitlines()) if log.exists() else 0
    t = time.monotonic()
    rep = _run_headless(rc, values, sets, backends=reps)
    print(f"grid run, {reps} backend replica(s): report in {time.monotonic() - t:.1f} s", flush=True)
    ing, steps = rep["ingress"], rep["steps"]
    assert [s["users"] for s in steps] == STEPS
    assert [s["request_count"] for s in steps] == COUNTS
    for s in steps:
        assert s["requests"] == s["request_count"] and s["failures"] == 0, s
        # Traefik's process, each second of the step (pidstat's rows; one process: one row a tick)
        assert s["proxy"]["processes"] == 1 and s["proxy"]["ticks"] >= 1, s["proxy"]
        per_s = s["proxy_per_second"]
        assert len(per_s) == s["proxy"]["ticks"]
        assert {r["comm"] for r in per_s} == {"traefik"} and len({r["pid"] for r in per_s}) == 1
        assert all(r["VSZ"] >= r["RSS"] > 0 for r in per_s), per_s
        assert s["proxy"]["rss_kib_max"] == max(r["RSS"] for r in per_s)
    assert ing["requests"] == ing["successes"] == sum(COUNTS)
    # Every request went through Traefik: its access log grows by the run's requests exactly.
    want = lines + sum(COUNTS) + ing["preflight_requests"]
    wait_for("Traefik's access log complete", lambda: len(log.read_text().splitlines()) >= want, 30.0)
    assert len(log.read_text().splitlines()) == want
    backends = [p for p in _pods(c, "target-backends") if not p["metadata"].get("deletionTimestamp")]
    assert len(backends) == reps
    return list(steps)


def _kill_run(rc: RealCluster, values: Path) -> None:
    c = rc.cluster
    (victim,) = _pods(c, "target")
    t = time.monotonic()
    reps = REPLICAS[-1]
    rep = _run_headless(rc, values, [*KILL, "--set", f"target.backends={reps}"], backends=reps)
    print(f"kill-pod run: report in {time.monotonic() - t:.1f} s", flush=True)
    (f,) = rep["faults"]
    assert "error" not in f, f
    assert f["detail"] == {"pod": victim["metadata"]["name"], "namespace": NS, "grace_period_s": GRACE_S}
    last, first = f["last_success_before"] - f["at"], f["first_success_after"] - f["at"]
    print(f"  Traefik's pod killed: downtime {f['downtime_s']:.1f} s ({f['failed_requests']} failed "
          f"requests): last success {last:.1f} s, first {first:.1f} s after the fault, recovery "
          f"{f['recovery_s']} s; {SEED}", flush=True)  # fmt: skip
    # Traefik leaves at SIGTERM and its replacement starts at once: the outage is its start.
    assert f["failed_requests"] > 0
    assert last < first < GRACE_S
    (new,) = _pods(c, "target")
    assert new["metadata"]["uid"] != victim["metadata"]["uid"]


def _run_headless(rc: RealCluster, values: Path, sets: list[str], backends: int) -> dict[str, Any]:
    """helm upgrade: the controller runs the scenario once, headless; returns its report.

    Two upgrades, as tests/test_realnode_chart_ingress.py: the values with an idle controller
    until one worker of the new spec and ``backends`` ready backends are left, then the same
    values made headless, which restarts only the controller."""
    c, chart = rc.cluster, str(ROOT / "charts" / "swarmscope")
    c.helm("upgrade", RELEASE, chart, "-n", NS, "-f", str(values), *sets)

    def settled() -> bool:
        ws, bs = _pods(c, "workers"), _pods(c, "target-backends")
        one = len(ws) == len(_ready(ws)) == len(_pods(c, "controller")) == 1
        return one and len(bs) == len(_ready(bs)) == backends and len(_ready(_pods(c, "target"))) == 1

    wait_for("one worker of the new spec, the backends ready", settled, TIMEOUT)
    old = {p["metadata"]["uid"] for p in _pods(c, "controller")}
    c.helm("upgrade", RELEASE, chart, "-n", NS, "-f", str(values), *sets,
           "--set-json", f"controller.extraArgs={json.dumps(HEADLESS)}")  # fmt: skip

    def new_pod() -> dict[str, Any] | None:
        fresh = [p for p in _pods(c, "controller") if p["metadata"]["uid"] not in old]
        return fresh[0] if fresh and fresh[0]["status"].get("phase") == "Running" else None

    pod = wait_for("the upgraded controller Running", new_pod, TIMEOUT)
    results = _volume(rc, pod, "results")

    def report() -> Path | None:
        done = sorted(results.glob("*/report.json")) if results.is_dir() else []
        return done[0] if done else None

    return dict(json.loads(wait_for("the run's report", report, TIMEOUT).read_text()))


def _node(rc: RealCluster, pod: dict[str, Any]) -> RealNode:
    (node,) = [n for n in rc.nodes if n.name == pod["spec"]["nodeName"]]
    return node


def _volume(rc: RealCluster, pod: dict[str, Any], name: str) -> Path:
    """A pod's emptyDir on its node (the kubelet's pod directory)."""
    d = _node(rc, pod).dir / "kubelet" / "pods" / pod["metadata"]["uid"] / "volumes"
    return d / "kubernetes.io~empty-dir" / name


def _ready(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        p
        for p in pods
        if p["status"].get("phase") == "Running"
        and all(s["ready"] for s in p["status"].get("containerStatuses") or [{"ready": False}])
    ]


def _all_ready(c: Cluster, n: int) -> list[dict[str, Any]] | None:
    pods = _pods(c, "")
    return pods if len(pods) == n and len(_ready(pods)) == n else None


def _pods(c: Cluster, component: str) -> list[dict[str, Any]]:
    """The release's live pods (of one component; "" all), terminating ones left out."""
    sel = f"?labelSelector=app.kubernetes.io/component={component}" if component else ""
    pods = c.api.get(f"/api/v1/namespaces/{NS}/pods{sel}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]
