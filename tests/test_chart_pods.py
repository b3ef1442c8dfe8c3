"""The chart's pod attribution wiring (docs/pod-attribution.md), rendered with the real helm:
the probe mounts the kubelet's log dirs read-only, and every role names its pod on its spans."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_chart import Tools, docs, helm_template, one, tools  # noqa: F401


@pytest.mark.slow
def test_probe_mounts_kubelet_log_dirs_read_only(tools: Tools, tmp_path: Path) -> None:  # noqa: F811
    ds = one(docs(helm_template(tools, tmp_path).stdout), "DaemonSet", "-probes")
    spec = ds["spec"]["template"]["spec"]
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    vols = {v["name"]: v for v in spec["volumes"]}
    for name, path in (("pod-logs", "/var/log/pods"), ("container-logs", "/var/log/containers")):
        assert mounts[name] == {"name": name, "mountPath": path, "readOnly": True}
        assert vols[name]["hostPath"] == {"path": path, "type": "DirectoryOrCreate"}
    # A kubelet with its own podLogsDir; "" turns attribution off (no mounts at all).
    ds = one(
        docs(helm_template(tools, tmp_path, "--set", "probes.podLogs.podsDir=/k/pods").stdout),
        "DaemonSet",
        "-probes",
    )
    vols = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    assert vols["pod-logs"]["hostPath"]["path"] == "/k/pods"
    ds = one(
        docs(helm_template(tools, tmp_path, "--set", "probes.podLogs.podsDir=").stdout),
        "DaemonSet",
        "-probes",
    )
    assert not {"pod-logs", "container-logs"} & {v["name"] for v in ds["spec"]["template"]["spec"]["volumes"]}


def test_every_role_names_its_pod_on_its_spans(tools: Tools, tmp_path: Path) -> None:  # noqa: F811
    objs = docs(helm_template(tools, tmp_path).stdout)
    for kind, suffix, container in (
        ("DaemonSet", "-probes", "probe"), ("Deployment", "-workers", "worker"),
        ("Deployment", "-controller", "controller"),
    ):  # fmt: skip
        ctr = one(objs, kind, suffix)["spec"]["template"]["spec"]["containers"][0]
        assert ctr["name"] == container
        env = ctr["env"]
        names = [e["name"] for e in env]
        by = {e["name"]: e for e in env}
        assert by["OTEL_RESOURCE_ATTRIBUTES"]["value"] == (
            "k8s.namespace.name=$(K8S_POD_NAMESPACE),k8s.pod.name=$(K8S_POD_NAME),"
            f"k8s.node.name=$(K8S_NODE_NAME),k8s.container.name={container}"
        )
        # $(VAR) expands only from variables defined earlier in the list.
        assert names.index("OTEL_RESOURCE_ATTRIBUTES") > max(
            names.index(v) for v in ("K8S_POD_NAME", "K8S_POD_NAMESPACE", "K8S_NODE_NAME")
        )
        assert by["K8S_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_workers_spread_over_nodes_only_when_asked(tools: Tools, tmp_path: Path) -> None:  # noqa: F811
    """workers.spreadOverNodes: a hard one-per-node spread of the Deployment's workers; off by
    default (a cordoned node would leave replicas Pending), and not in daemonset mode."""
    sel = {
        "app.kubernetes.io/name": "swarmscope",
        "app.kubernetes.io/instance": "t",
        "app.kubernetes.io/component": "workers",
    }

    def spread(*sets: str) -> object:
        args = [a for s in sets for a in ("--set", s)]
        objs = docs(helm_template(tools, tmp_path, *args).stdout)
        kind = "DaemonSet" if "workers.mode=daemonset" in sets else "Deployment"
        return one(objs, kind, "-workers")["spec"]["template"]["spec"].get("topologySpreadConstraints")

    assert spread() is None
    assert spread("workers.replicas=3", "workers.spreadOverNodes=true") == [{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": sel},
    }]  # fmt: skip
    assert spread("workers.mode=daemonset", "workers.spreadOverNodes=true") is None
