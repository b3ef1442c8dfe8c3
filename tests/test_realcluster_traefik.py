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

Two backend replicas: Traefik's access log names the backend of each request, and both serve.
The grid over backend replicas 1/2/4 and concurrency is bench/cluster_ingress.py (the same
install, target.backends changed between runs; docs/traefik.md), not run here for the
suite's time.
"""

from __future__ import annotations

import time

import pytest
from imagebuild import find_swarmscope_image
from realcluster import RealCluster
from realrelease import Release
from realtraefik import TRAEFIK_REPO, find_traefik_image, kill_run, steps_run, traefik_pod, traefik_values

pytestmark = [pytest.mark.cluster, pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(1800)]

IMAGE_REPO = "ghcr.io/swarmscope/swarmscope"
SEED = "write-up (nginx ingress controller pod killed): ~30 s of downtime"
STEPS, COUNTS = [10, 40], [5000, 8000]  # users, requests per step: ~1,500 req/s here, 3+ s a step


def test_ingress_flood_and_kill_pod_through_traefik(real_cluster: RealCluster) -> None:
    rc, t = real_cluster, time.monotonic()
    assert rc.import_image(find_swarmscope_image(), IMAGE_REPO) == f"{IMAGE_REPO}:0.1.0"
    assert rc.import_image(find_traefik_image(), TRAEFIK_REPO) == f"{TRAEFIK_REPO}:v3.6.12"
    print(f"images in every node after {time.monotonic() - t:.1f} s", flush=True)
    values, n_pods = traefik_values(rc, STEPS, COUNTS, backends=2)
    rel = Release(rc, "rc-traefik", "rt")
    with rel.installed(values, n_pods) as pods:
        traefik = traefik_pod(pods)
        rep = steps_run(rel, values, traefik, n_pods)
        print(f"{'users':>5} {'-n':>5} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'ticks':>5} "
              f"{'traefik %CPU':>12} {'RSS KiB':>8}", flush=True)  # fmt: skip
        for s in rep["steps"]:
            lat, proxy = s["latency_ms"], s["proxy"]
            print(f"{s['users']:>5} {s['request_count']:>5} {s['rps']:>7.0f} {lat['p50']:>7.1f} "
                  f"{lat['p99']:>7.1f} {proxy['ticks']:>5.0f} {proxy['cpu_pct']:>12.1f} "
                  f"{proxy['rss_kib_max']:>8.0f}", flush=True)  # fmt: skip
            for r in s["proxy_per_second"]:
                cols = " ".join(f"{k} {r[k]:.1f}" for k in ("%usr", "%system", "%CPU", "VSZ", "RSS"))
                print(f"  step {s['step']} {r['time']} pid {r['pid']} {r['comm']}: {cols}", flush=True)
        print(f"  served by backend pod: {dict(rep['served_by'])}", flush=True)
        f = kill_run(rel, values, traefik, n_pods)
        print(f"  Traefik's pod killed: downtime {f['downtime_s']:.1f} s ({f['failed_requests']} failed "
              f"requests): last success {f['last_s']:.1f} s, first {f['first_s']:.1f} s after the fault, "
              f"recovery {f['recovery_s']} s; {SEED}", flush=True)  # fmt: skip
    print(f"whole test: {time.monotonic() - t:.1f} s", flush=True)
