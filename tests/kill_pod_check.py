"""The ``kill-pod`` fault against a real API server (tests/cluster.py): a real pod deleted.

    check_kill_pod(cluster, monkeypatch)   # from test_chart.py, with its session cluster

A Deployment of one replica labelled as the ingress controller (the fault's default selector)
is created on the kwok nodes. The fault is made as the ingress scenario makes it
(``make_fault("kill-pod", at_s=..)``) with no ``api`` given, so the official ``kubernetes``
client loads the cluster's kubeconfig (``$KUBECONFIG``) as on a workstation. Through the API
server, the test then sees that pod gone and the ReplicaSet's replacement (a new name) Running.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import pytest
from realnode import wait_for as wait  # the same bounded poll

from swarmscope.core.errors import SwarmscopeError
from swarmscope.targets.faults import make_fault

SELECTOR = "app.kubernetes.io/component=controller"  # KillPod's default


def deployment(name: str) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": "controller"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"type": "kwok"},  # kwok marks it Running; no image is pulled
                    "containers": [{"name": "nginx", "image": "registry.invalid/ingress-nginx:none"}],
                },
            },
        },
    }


def pods(api: Any, ns: str) -> list[dict[str, Any]]:
    return list(api.get(f"/api/v1/namespaces/{ns}/pods?labelSelector={SELECTOR}")["items"])


def running(api: Any, ns: str) -> list[str]:
    return [
        p["metadata"]["name"]
        for p in pods(api, ns)
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def check_kill_pod(cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    api = cluster.api
    ns = f"ss-killpod-{secrets.token_hex(3)}"
    api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    try:
        api.post(f"/apis/apps/v1/namespaces/{ns}/deployments", deployment("ingress-nginx-controller"))
        (victim,) = wait("the controller pod Running", lambda: running(api, ns), 60)
        monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in-cluster
        inj = make_fault("kill-pod", at_s=0.0, namespace=ns)
        inj.arm(time.time())
        wait("the fault's record", lambda: inj.records, 30)
        inj.cancel()
        (rec,) = inj.records
        assert rec["detail"] == {"pod": victim, "namespace": ns, "grace_period_s": 0}, rec
        # Gone from the API server (grace period 0: no terminating phase to wait through) ...
        wait(f"{victim} deleted", lambda: victim not in {p["metadata"]["name"] for p in pods(api, ns)}, 30)
        # ... and replaced by the ReplicaSet with a new pod, Running on a kwok node.
        (new,) = wait("a replacement pod Running", lambda: running(api, ns), 60)
        assert new != victim
        (pod,) = [p for p in pods(api, ns) if p["metadata"]["name"] == new]
        assert pod["spec"]["nodeName"] in cluster.nodes
        # No pod left to match: the fault says so instead of passing silently.
        api.request("DELETE", f"/apis/apps/v1/namespaces/{ns}/deployments/ingress-nginx-controller")
        wait("no controller pod left", lambda: not pods(api, ns), 60)
        with pytest.raises(SwarmscopeError, match="no pod matches"):
            make_fault("kill-pod", at_s=0.0, namespace=ns).inject()
    finally:
        api.request("DELETE", f"/api/v1/namespaces/{ns}")
