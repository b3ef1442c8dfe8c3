"""One helm release of the chart on the real cluster (tests/realcluster.py): install, upgrade, its
pods, volumes, report and logs, removed with its namespace on leaving; and the values the
cluster tests and benches start from.

    rel = Release(rc, "rc-ingress", "ri")
    with rel.installed(base_values("ingress_flood", steps=[2, 4]), n_pods=7) as pods:
        rep = rel.report()

Used by tests/test_realcluster_kinds.py, tests/realtraefik.py and bench/cluster_ingress.py.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from realcluster import RealCluster, pods_wide
from realnode import RealNode, wait_for

ROOT = Path(__file__).resolve().parent.parent
CHART = str(ROOT / "charts" / "swarmscope")
IMAGE_REPO = "ghcr.io/swarmscope/swarmscope"
HOST = "kubernetes.io/hostname"
TIMEOUT = 900.0  # install -> report: BCC compiles in three probes and the workers, on 2 cores


class Release:
    """One helm release on the real cluster in namespace ``ns``; uninstalled (and its namespace
    gone) on leaving."""

    def __init__(self, rc: RealCluster, ns: str, name: str):
        self.rc, self.ns, self.name = rc, ns, name
        self.full = f"{name}-swarmscope"

    def helm(self, verb: str, values: dict[str, Any], *sets: str) -> None:
        path = self.rc.nodes[0].dir.parent / f"{self.ns}-values.json"
        path.write_text(json.dumps(values))
        extra = ["--create-namespace"] if verb == "install" else []
        self.rc.cluster.helm(verb, self.name, CHART, "-n", self.ns, *extra, "-f", str(path), *sets)

    def pods(self, component: str | None = None) -> list[dict[str, Any]]:
        sel = f"?labelSelector=app.kubernetes.io/component={component}" if component else ""
        return list(self.rc.cluster.api.get(f"/api/v1/namespaces/{self.ns}/pods{sel}")["items"])

    def node(self, pod: dict[str, Any]) -> RealNode:
        (n,) = [n for n in self.rc.nodes if n.name == pod["spec"]["nodeName"]]
        return n

    def volume(self, pod: dict[str, Any], name: str) -> Path:
        """A pod's emptyDir, on its node."""
        d = self.node(pod).dir / "kubelet" / "pods" / pod["metadata"]["uid"] / "volumes"
        return d / "kubernetes.io~empty-dir" / name

    def ready(self, n: int) -> list[dict[str, Any]] | None:
        pods = [p for p in self.pods() if not p["metadata"].get("deletionTimestamp")]
        ok = len(pods) == n and all(
            p["status"].get("phase") == "Running"
            and all(s["ready"] for s in p["status"].get("containerStatuses") or [{"ready": False}])
            for p in pods
        )
        return pods if ok else None

    def report(self, skip: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
        """The first report.json in a controller's results volume (pods in ``skip`` not)."""

        def first() -> Path | None:
            for pod in self.pods("controller"):
                if pod["metadata"]["uid"] in skip or not pod["spec"].get("nodeName"):
                    continue
                d = self.volume(pod, "results")
                done = sorted(d.glob("*/report.json")) if d.is_dir() else []
                if done:
                    return done[0]
            return None

        try:
            path = wait_for(f"the report in {self.ns}", first, TIMEOUT, every=2.0)
        except AssertionError:
            print(self.logs(), flush=True)
            raise
        return dict(json.loads(path.read_text()))

    def logs(self, lines: int = 30) -> str:
        """The last lines of this release's container logs on every node (diagnosis)."""
        out = []
        for node in self.rc.nodes:
            for f in sorted(node.pod_logs.glob(f"{self.ns}_*/*/*.log")):
                tail = [x[:300] for x in f.read_text(errors="replace").splitlines()]
                head = f"== {node.name} {f.parent.parent.name}/{f.parent.name}"
                out.append(head + "\n" + "\n".join(tail[-lines:]))
        return "\n".join(out)

    @contextlib.contextmanager
    def installed(self, values: dict[str, Any], n_pods: int, *sets: str) -> Iterator[list[dict[str, Any]]]:
        t = time.monotonic()
        self.helm("install", values, *sets)
        try:
            try:
                pods = wait_for(f"{n_pods} pods of {self.ns} Running and ready", lambda: self.ready(n_pods),
                                TIMEOUT, every=2.0)  # fmt: skip
            except AssertionError:
                print(pods_wide(self.pods()), "\n", self.logs(), flush=True)
                raise
            took = time.monotonic() - t
            print(f"{self.ns}: helm install -> {n_pods} pods Running in {took:.1f} s", flush=True)
            print(pods_wide(pods), flush=True)
            yield pods
        finally:
            c, api = self.rc.cluster, self.rc.cluster.api
            c.helm("uninstall", self.name, "-n", self.ns, "--wait", "--timeout", "120s", check=False)
            api.request("DELETE", f"/api/v1/namespaces/{self.ns}")
            wait_for(f"the pods of {self.ns} gone", lambda: not self.pods(), 180.0)


def base_values(scenario: str, **kind: Any) -> dict[str, Any]:
    return {
        "tracing": {"enabled": False},  # clusterexec's tests check the trace; no Jaeger image here
        "jaeger": {"enabled": False},
        "scenario": {
            # The probes compile with BCC before they register: minutes on a loaded machine.
            # Every node's probe before the first window: each node's kernel count is its probe's.
            "config": {
                "scenario": scenario,
                "probe_timeout_s": 600,
                "worker_timeout_s": 600,
                "expect_probes": 3,
            },
            scenario: kind,
        },
    }
