"""The ingress flood through a real ingress controller, Traefik v3, on the three real nodes.

    .venv/bin/python -m pytest tests/test_realcluster_traefik.py -v -s   # -s: steps, CPU/RSS, downtime

One `helm install` of the chart with target.controller=traefik (charts/swarmscope/templates/
target-traefik.yaml: Traefik's Deployment, its namespaced RBAC, an Ingress object routing to a
Deployment of nginx backend replicas) on the `real_cluster` fixture's three nodes: Traefik and the
one worker on node 0 (the probe that reads the worker's node is then the one on Traefik's node,
as a real cluster needs: a probe sees its own node's processes only), the backends elsewhere.
The controller idles; then each helm upgrade makes it run one headless scenario (locust -f:
one window holding every step):

1. Two concurrencies (boom's -c) with a request count each (-n): exact per step (requests ==
   the count asked, no failure), Traefik's access log grows by exactly the run's requests + the
   preflight, and each step has Traefik's CPU/RSS per second from the probe's procstat (by name,
   probes on the host PID namespace): pidstat's rows, one process, whose pid is a `traefik`
   process in Traefik's pod's cgroup.
2. kill-pod on Traefik's pod with a 30 s grace period (the write-up's): the downtime the worker
   saw, printed next to the write-up's ~30 s. Traefik leaves at SIGTERM and its replacement
   starts at once, so the clients recover well within the grace period.

The grid over backend replicas 1/2/4 is the same install with target.backends changed
(docs/realcluster.md); it is left out here for the suite's time.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import prebuilt
import pytest
from cluster import BUILD
from imagebuild import find_swarmscope_image
from realcluster import RealCluster
from realnode import wait_for
from test_realcluster_kinds import HOST, TIMEOUT, Release, _base

pytestmark = [pytest.mark.cluster, pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(1800)]

IMAGE_REPO = "ghcr.io/swarmscope/swarmscope"
TRAEFIK_REPO = "docker.io/library/traefik"
GRACE_S = 30  # kubectl delete pod's default (the write-up's pod was Terminating ~30 s)
SEED = "write-up (nginx ingress controller pod killed): ~30 s of downtime"
STEPS, COUNTS = [10, 40], [5000, 8000]  # users, requests per step: ~1,500 req/s here, 3+ s a step
KILL_AT_S, KILL_STEP_S = 5, 20  # kill-pod run: one timed step of 4 users


def find_traefik_image() -> Path:
    """The chart's Traefik image, as `make tools` built it (tools/k8s/build.sh traefikimage)."""
    return Path(prebuilt.run([str(BUILD), "traefikimage"]).split()[-1]) / "traefik.tar"


def test_ingress_flood_and_kill_pod_through_traefik(real_cluster: RealCluster) -> None:
    rc, t = real_cluster, time.monotonic()
    assert rc.import_image(find_swarmscope_image(), IMAGE_REPO) == f"{IMAGE_REPO}:0.1.0"
    assert rc.import_image(find_traefik_image(), TRAEFIK_REPO) == f"{TRAEFIK_REPO}:v3.6.12"
    print(f"images in every node after {time.monotonic() - t:.1f} s", flush=True)
    n0 = rc.nodes[0].name
    rel = Release(rc, "rc-traefik", "rt")
    values = _base("ingress_flood", steps=STEPS, requests=COUNTS, step_duration=60)
    values["target"] = {"enabled": True, "controller": "traefik", "backends": 1,
                        "terminationGracePeriodSeconds": GRACE_S, "nodeSelector": {HOST: n0}}  # fmt: skip
    values["workers"] = {"replicas": 1, "nodeSelector": {HOST: n0}}
    n_pods = 4 + len(rc.nodes)  # controller, worker, a probe per node, Traefik, one backend
    with rel.installed(values, n_pods) as pods:
        (traefik,) = [p for p in pods if p["metadata"]["labels"]["app.kubernetes.io/component"] == "target"]
        _steps_run(rel, values, traefik, n_pods)
        _kill_run(rel, values, traefik, n_pods)
    print(f"whole test: {time.monotonic() - t:.1f} s", flush=True)


def _headless(rel: Release, values: dict[str, Any], n_pods: int) -> dict[str, Any]:
    """The controller runs ``values``' scenario once; its report. Two upgrades: ``values`` with an
    idle controller until ``n_pods`` are ready and no other is left (kill-pod mounts the
    workers' token, a new worker pod: its old one, still terminating, must not join the run),
    then the same made headless, which restarts only the controller."""
    rel.helm("upgrade", values)
    wait_for("the upgrade's pods alone and ready", lambda: len(rel.pods()) == n_pods and rel.ready(n_pods),
             TIMEOUT)  # fmt: skip
    old = {p["metadata"]["uid"] for p in rel.pods("controller")}
    headless = ["--", "--headless", "--expect-workers", "1"]
    rel.helm("upgrade", values, "--set-json", f"controller.extraArgs={json.dumps(headless)}")
    return rel.report(skip=old)


def _steps_run(rel: Release, values: dict[str, Any], traefik: dict[str, Any], n_pods: int) -> None:
    log = rel.volume(traefik, "logs") / "access.log"
    before = len(log.read_text().splitlines()) if log.exists() else 0
    t = time.monotonic()
    rep = _headless(rel, values, n_pods)
    print(f"steps run: report in {time.monotonic() - t:.1f} s; flags {rep['flags']}", flush=True)
    ing, steps = rep["ingress"], rep["steps"]
    print(f"{'users':>5} {'-n':>5} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'ticks':>5} "
          f"{'traefik %CPU':>12} {'RSS KiB':>8}", flush=True)  # fmt: skip
    for s in steps:
        lat, proxy = s["latency_ms"], s["proxy"] or {}
        print(f"{s['users']:>5} {s['request_count']:>5} {s['rps']:>7.0f} {lat['p50']:>7.1f} "
              f"{lat['p99']:>7.1f} {proxy.get('ticks', 0):>5.0f} {proxy.get('cpu_pct', 0):>12.1f} "
              f"{proxy.get('rss_kib_max', 0):>8.0f}", flush=True)  # fmt: skip
    for s in steps:
        for r in s["proxy_per_second"]:
            cols = " ".join(f"{k} {r[k]:.1f}" for k in ("%usr", "%system", "%CPU", "VSZ", "RSS"))
            print(f"  step {s['step']} {r['time']} pid {r['pid']} {r['comm']}: {cols}", flush=True)
    assert [s["users"] for s in steps] == STEPS
    assert [(s["request_count"], s["requests"], s["failures"]) for s in steps] == [(n, n, 0) for n in COUNTS]
    assert ing["requests"] == ing["successes"] == sum(COUNTS)
    # Every request went through Traefik: its access log grows by the run's requests exactly.
    assert len(log.read_text().splitlines()) - before == sum(COUNTS) + ing["preflight_requests"]
    assert not [f for p in rep["points"] for it in p["iterations"] for f in it["flags"] if "proxy" in f]
    cgroup = traefik["metadata"]["uid"]
    for s in steps:
        per_s = s["proxy_per_second"]
        # Traefik's one process, each second of the step: one row a tick, from its pod.
        assert s["proxy"]["processes"] == 1 and s["proxy"]["ticks"] == len(per_s) >= 1, s["proxy"]
        (pid,) = {r["pid"] for r in per_s}
        assert {r["comm"] for r in per_s} == {"traefik"}
        assert Path(f"/proc/{pid}/comm").read_text().strip() == "traefik"
        assert cgroup in Path(f"/proc/{pid}/cgroup").read_text().replace("_", "-")
        assert all(r["VSZ"] >= r["RSS"] > 0 for r in per_s), per_s
        assert s["proxy"]["rss_kib_max"] == max(r["RSS"] for r in per_s)


def _kill_run(rel: Release, values: dict[str, Any], victim: dict[str, Any], n_pods: int) -> None:
    t = time.monotonic()
    kill = {"fault": "kill-pod", "fault_at": KILL_AT_S, "grace_period_s": GRACE_S,
            "step_duration": KILL_STEP_S, "steps": [4]}  # fmt: skip
    rep = _headless(rel, {**values, "scenario": {**values["scenario"], "ingress_flood": kill}}, n_pods)
    print(f"kill-pod run: report in {time.monotonic() - t:.1f} s; flags {rep['flags']}", flush=True)
    (f,) = rep["faults"]
    assert "error" not in f and f["first_success_after"] is not None, f  # struck, and recovered
    last, first = f["last_success_before"] - f["at"], f["first_success_after"] - f["at"]
    print(f"  Traefik's pod killed: downtime {f['downtime_s']:.1f} s ({f['failed_requests']} failed "
          f"requests): last success {last:.1f} s, first {first:.1f} s after the fault, recovery "
          f"{f['recovery_s']} s; {SEED}", flush=True)  # fmt: skip
    assert f["detail"] == {"pod": victim["metadata"]["name"], "namespace": rel.ns, "grace_period_s": GRACE_S}
    # Traefik leaves at SIGTERM and its replacement starts at once: recovered within the grace.
    assert last < first < GRACE_S
    (new,) = [p for p in rel.pods("target") if not p["metadata"].get("deletionTimestamp")]
    assert new["metadata"]["uid"] != victim["metadata"]["uid"]
