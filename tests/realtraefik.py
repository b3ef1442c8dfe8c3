"""The ingress flood through Traefik on the real nodes: what tests/test_realcluster_traefik.py and
bench/cluster_ingress.py share (the install's values, one headless run, its exact checks, kill-pod).

    values, n_pods = traefik_values(rc, steps=[10, 40], counts=[5000, 8000], backends=2)
    with Release(rc, "rc-traefik", "rt").installed(values, n_pods) as pods:
        rep = steps_run(rel, values, traefik_pod(pods), n_pods)   # exact, or AssertionError
        fault = kill_run(rel, values, traefik_pod(pods), n_pods)

Traefik and the one worker are pinned to node 0 (the probe that reads the worker's node is the
one on Traefik's node: a probe sees its own node's processes only), the backends go where the
scheduler puts them. Each run is two helm upgrades that restart only the controller (an idle
one until the release's pods are ready, then the same values made headless), so the backends'
replica count can change between runs of one install.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import prebuilt
from cluster import BUILD
from realcluster import RealCluster
from realnode import wait_for
from realrelease import HOST, TIMEOUT, Release, base_values

TRAEFIK_REPO = "docker.io/library/traefik"
GRACE_S = 30  # kubectl delete pod's default (the write-up's pod was Terminating ~30 s)
KILL_AT_S, KILL_STEP_S = 5, 20  # kill-pod run: one timed step of 4 users
# Traefik's access log is the Common Log Format plus, last, the router, the server it proxied
# to and the duration: the server field says which backend served each request.
SERVED_BY = re.compile(r'"(http://[^"]+)" \d+ms$')


def find_traefik_image() -> Path:
    """The chart's Traefik image, as `make tools` built it (tools/k8s/build.sh traefikimage)."""
    return Path(prebuilt.run([str(BUILD), "traefikimage"]).split()[-1]) / "traefik.tar"


def traefik_values(
    rc: RealCluster, steps: list[int], counts: list[int], backends: int
) -> tuple[dict[str, Any], int]:
    """The chart's values (target.controller=traefik, an idle controller) and its pod count."""
    n0 = rc.nodes[0].name
    values = base_values("ingress_flood", steps=steps, requests=counts, step_duration=600)
    values["target"] = {"enabled": True, "controller": "traefik", "backends": backends,
                        "terminationGracePeriodSeconds": GRACE_S, "nodeSelector": {HOST: n0}}  # fmt: skip
    values["workers"] = {"replicas": 1, "nodeSelector": {HOST: n0}}
    return values, 3 + len(rc.nodes) + backends  # controller, worker, Traefik, a probe per node


def traefik_pod(pods: list[dict[str, Any]]) -> dict[str, Any]:
    (pod,) = [p for p in pods if p["metadata"]["labels"]["app.kubernetes.io/component"] == "target"]
    return pod


def headless(rel: Release, values: dict[str, Any], n_pods: int) -> dict[str, Any]:
    """The controller runs ``values``' scenario once; its report. Two upgrades: ``values`` with an
    idle controller until ``n_pods`` are ready and no other is left (kill-pod mounts the
    workers' token, a new worker pod: its old one, still terminating, must not join the run),
    then the same made headless, which restarts only the controller."""
    rel.helm("upgrade", values)
    wait_for("the upgrade's pods alone and ready", lambda: len(rel.pods()) == n_pods and rel.ready(n_pods),
             TIMEOUT)  # fmt: skip
    old = {p["metadata"]["uid"] for p in rel.pods("controller")}
    args = ["--", "--headless", "--expect-workers", "1"]
    rel.helm("upgrade", values, "--set-json", f"controller.extraArgs={json.dumps(args)}")
    return rel.report(skip=old)


def served_by(lines: list[str]) -> Counter[str]:
    """Requests per backend host in Traefik's access-log lines."""
    out: Counter[str] = Counter()
    for line in lines:
        m = SERVED_BY.search(line)
        assert m, f"not Traefik's access-log line: {line}"
        out[m[1].removeprefix("http://").rsplit(":", 1)[0]] += 1
    return out


def steps_run(rel: Release, values: dict[str, Any], traefik: dict[str, Any], n_pods: int) -> dict[str, Any]:
    """One headless run of ``values``' steps, checked exact; its report, with ``served_by``
    (requests per backend pod IP, from Traefik's log) added."""
    kind = values["scenario"]["ingress_flood"]
    steps_asked, counts = kind["steps"], kind["requests"]
    log = rel.volume(traefik, "logs") / "access.log"
    before = len(log.read_text().splitlines()) if log.exists() else 0
    t = time.monotonic()
    rep = headless(rel, values, n_pods)
    rep["run_s"] = time.monotonic() - t
    print(f"steps run: report in {rep['run_s']:.1f} s; flags {rep['flags']}", flush=True)
    ing, steps = rep["ingress"], rep["steps"]
    assert [s["users"] for s in steps] == steps_asked
    assert [(s["request_count"], s["requests"], s["failures"]) for s in steps] == [(n, n, 0) for n in counts]
    assert ing["requests"] == ing["successes"] == sum(counts)
    # Every request went through Traefik: its access log grows by the run's requests exactly,
    # and each line names a backend pod of this run, every one of them serving.
    lines = log.read_text().splitlines()[before:]
    assert len(lines) == sum(counts) + ing["preflight_requests"]
    rep["served_by"] = served_by(lines)
    backends = [p for p in rel.pods("target-backends") if not p["metadata"].get("deletionTimestamp")]
    ips = {p["status"]["podIP"] for p in backends}
    assert set(rep["served_by"]) == ips and len(ips) == values["target"]["backends"], (rep["served_by"], ips)
    # Traefik's round robin over equal weights: one request each in turn, so no backend served
    # more than one request more than another (8,000/8,001 and 4,000 x3/4,001 in the bench).
    assert max(rep["served_by"].values()) - min(rep["served_by"].values()) <= 1, rep["served_by"]
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
    return rep


def kill_run(rel: Release, values: dict[str, Any], victim: dict[str, Any], n_pods: int) -> dict[str, Any]:
    """kill-pod on Traefik's pod with its real grace period, one timed step of 4 users: the
    fault's record (downtime as the worker saw it), checked struck and recovered in the grace."""
    t = time.monotonic()
    kill = {"fault": "kill-pod", "fault_at": KILL_AT_S, "grace_period_s": GRACE_S,
            "step_duration": KILL_STEP_S, "steps": [4]}  # fmt: skip
    rep = headless(rel, {**values, "scenario": {**values["scenario"], "ingress_flood": kill}}, n_pods)
    print(f"kill-pod run: report in {time.monotonic() - t:.1f} s; flags {rep['flags']}", flush=True)
    (f,) = rep["faults"]
    assert "error" not in f and f["first_success_after"] is not None, f  # struck, and recovered
    f["last_s"], f["first_s"] = f["last_success_before"] - f["at"], f["first_success_after"] - f["at"]
    assert f["detail"] == {"pod": victim["metadata"]["name"], "namespace": rel.ns, "grace_period_s": GRACE_S}
    # Traefik leaves at SIGTERM and its replacement starts at once: recovered within the grace.
    assert f["last_s"] < f["first_s"] < GRACE_S
    (new,) = [p for p in rel.pods("target") if not p["metadata"].get("deletionTimestamp")]
    assert new["metadata"]["uid"] != victim["metadata"]["uid"]
    return dict(f)
