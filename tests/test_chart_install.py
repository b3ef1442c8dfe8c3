"""Helm chart installs into a real API server (etcd, kube-apiserver, controller-manager,
scheduler, kwok with 3 fake nodes; tests/cluster.py), started once for this module.

    .venv/bin/python -m pytest tests/test_chart_install.py -v -s      # -s shows start timings

Every install uses its own namespace. The Go tools come from `make tools` (tools/k8s/build.sh);
every test here is marked `cluster`. The rendered-only checks are tests/test_chart.py.
"""

from __future__ import annotations

import base64
import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cluster import ROOT, Api, ApiError, Cluster, find_tools
from kill_pod_check import check_kill_pod

CHART = ROOT / "charts" / "swarmscope"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
N_NODES = 3

_ns_counter = itertools.count()


def values_id(p: Path) -> str:
    return p.name.removesuffix("-values.yaml")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster.start(find_tools(), tmp_path_factory.mktemp("cluster"), nodes=N_NODES) as c:
        yield c


def install(cluster: Cluster, *extra: str, name: str = "ss") -> str:
    # Same release name in a new namespace each time: this also proves cluster-scoped objects
    # (ClusterRole/Binding) of two releases do not collide.
    ns = f"t{next(_ns_counter)}"
    cluster.helm(
        "install", name, str(CHART), "-n", ns, "--create-namespace", "--wait", "--timeout", "180s", *extra
    )
    return ns


def assert_probes_on_every_node(api: Api, ns: str, name: str, nodes: list[str]) -> None:
    ds = api.get(f"/apis/apps/v1/namespaces/{ns}/daemonsets/{name}-swarmscope-probes")
    st = ds["status"]
    assert st["desiredNumberScheduled"] == st["numberReady"] == st["currentNumberScheduled"] == len(nodes), st
    sel = "app.kubernetes.io/component=probes"
    pods = api.get(f"/api/v1/namespaces/{ns}/pods?labelSelector={sel}")["items"]
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(nodes)
    assert all(p["status"]["phase"] == "Running" for p in pods)


@pytest.mark.cluster
@pytest.mark.slow
def test_install_default_values(cluster: Cluster) -> None:
    api = cluster.api
    ns = "default-values"
    r = cluster.helm(
        "install", "ss", str(CHART), "-n", ns, "--create-namespace", "--wait", "--timeout", "180s"
    )
    # NOTES.txt: how to reach the UI, the metrics and the traces, with this release's names
    assert f"kubectl -n {ns} port-forward svc/ss-swarmscope-controller 8089:8089" in r.stdout
    assert f"kubectl -n {ns} port-forward svc/ss-swarmscope-jaeger 16686:16686" in r.stdout
    assert "http://127.0.0.1:16686/trace/<trace id>" in r.stdout
    assert "9646/metrics" in r.stdout
    assert_probes_on_every_node(api, ns, "ss", cluster.nodes)

    # the objects the API server stored, not the rendering: capabilities of a real probe pod
    pod = api.get(f"/api/v1/namespaces/{ns}/pods?labelSelector=app.kubernetes.io/component=probes")["items"][
        0
    ]
    sc = pod["spec"]["containers"][0]["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["BPF", "PERFMON"]}
    assert sc["privileged"] is False
    # automountServiceAccountToken=false: no API token volume in the stored probe pod
    assert not [v for v in pod["spec"]["volumes"] if v["name"].startswith("kube-api-access")]

    svc = api.get(f"/api/v1/namespaces/{ns}/services/ss-swarmscope-controller")
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {
        "locust": 5557,
        "grpc": 7001,
        "metrics": 9646,
        "web": 8089,
    }
    assert svc["spec"]["clusterIP"].startswith("10.0.0.")
    jaeger = api.get(f"/api/v1/namespaces/{ns}/services/ss-swarmscope-jaeger")
    assert {p["port"] for p in jaeger["spec"]["ports"]} == {4317, 4318, 16686}

    secret = api.get(f"/api/v1/namespaces/{ns}/secrets/ss-swarmscope-token")
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert len(token) == 43

    for dep in ("controller", "workers", "jaeger"):
        d = api.get(f"/apis/apps/v1/namespaces/{ns}/deployments/ss-swarmscope-{dep}")
        assert d["status"].get("readyReplicas") == d["spec"]["replicas"] == 1, (dep, d["status"])

    # RBAC as the real authorizer evaluates it (SubjectAccessReview)
    def sa(role: str) -> str:
        return f"system:serviceaccount:{ns}:ss-swarmscope-{role}"

    groups = ["system:serviceaccounts", f"system:serviceaccounts:{ns}"]
    assert not api.can(sa("controller"), "list", "nodes", groups=groups)  # namespaced Role only
    assert not api.can(sa("controller"), "watch", "pods", namespace="default", groups=groups)
    assert api.can(sa("controller"), "watch", "pods", namespace=ns, groups=groups)
    assert api.can(sa("controller"), "delete", "pods", namespace=ns, groups=groups)
    assert not api.can(sa("controller"), "delete", "pods", namespace="default", groups=groups)
    assert not api.can(sa("controller"), "delete", "nodes", groups=groups)
    assert not api.can(sa("controller"), "get", "secrets", namespace=ns, groups=groups)
    for role in ("probes", "workers"):
        assert not api.can(sa(role), "list", "pods", namespace=ns, groups=groups)
        assert not api.can(sa(role), "get", "nodes", groups=groups)

    # upgrade keeps the generated token and master key (lookup), so running probes and workers
    # stay authenticated
    master = api.get(f"/api/v1/namespaces/{ns}/secrets/ss-swarmscope-master-key")["data"]
    cluster.helm("upgrade", "ss", str(CHART), "-n", ns, "--wait", "--timeout", "180s")
    secret = api.get(f"/api/v1/namespaces/{ns}/secrets/ss-swarmscope-token")
    assert base64.b64decode(secret["data"]["token"]).decode() == token
    assert api.get(f"/api/v1/namespaces/{ns}/secrets/ss-swarmscope-master-key")["data"] == master


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.parametrize("values", CI_VALUES, ids=values_id)
def test_install_ci_values(cluster: Cluster, values: Path) -> None:
    api = cluster.api
    ns = install(cluster, "-f", str(values))
    assert_probes_on_every_node(api, ns, "ss", cluster.nodes)
    v = yaml.safe_load(values.read_text())
    if v.get("workers", {}).get("mode") == "daemonset":
        ds = api.get(f"/apis/apps/v1/namespaces/{ns}/daemonsets/ss-swarmscope-workers")
        assert ds["status"]["numberReady"] == len(cluster.nodes)
    if "auth" in v:
        secret = api.get(f"/api/v1/namespaces/{ns}/secrets/ss-swarmscope-token")
        assert base64.b64decode(secret["data"]["token"]).decode() == v["auth"]["token"]
    deps = {d["metadata"]["name"] for d in api.get(f"/apis/apps/v1/namespaces/{ns}/deployments")["items"]}
    assert ("ss-swarmscope-jaeger" in deps) == v.get("jaeger", {}).get("enabled", True)
    # Default-deny NetworkPolicies, as the API server stored them.
    pols = api.get(f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies")["items"]
    target = v.get("target", {}).get("enabled", False)
    want = (
        {"default-deny", "controller", "workers", "probes"}
        | ({"jaeger"} if "ss-swarmscope-jaeger" in deps else set())
        | ({"target"} if target else set())
        | ({"target-backends"} if target and v["target"].get("controller") == "traefik" else set())
    )
    assert {x["metadata"]["name"].removeprefix("ss-swarmscope-") for x in pols} == want
    assert not api.get(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles?labelSelector=app.kubernetes.io/instance=ss"
    )["items"]
    if v.get("tls", {}).get("enabled"):
        # mTLS: both certificates, one CA; the upgrade keeps them (running probes stay trusted).
        tls = {
            r: api.get(f"/api/v1/namespaces/{ns}/secrets/ss-swarmscope-tls-{r}")
            for r in ("controller", "probes")
        }
        assert {t["type"] for t in tls.values()} == {"kubernetes.io/tls"}
        assert tls["controller"]["data"]["ca.crt"] == tls["probes"]["data"]["ca.crt"]
        cluster.helm("upgrade", "ss", str(CHART), "-n", ns, "-f", str(values), "--wait", "--timeout", "180s")
        again = api.get(f"/api/v1/namespaces/{ns}/secrets/ss-swarmscope-tls-controller")
        assert again["data"] == tls["controller"]["data"]
        pod = api.get(f"/api/v1/namespaces/{ns}/pods?labelSelector=app.kubernetes.io/component=probes")[
            "items"
        ][0]
        mounts = {m["name"]: m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
        assert mounts["fleet-tls"] == "/var/run/swarmscope-tls"
    if target:
        assert "ss-swarmscope-target" in deps
        # The kill-pod fault strikes from the target worker: its service account may delete
        # pods here (and only because the scenario's fault is kill-pod).
        kill = v["scenario"]["ingress_flood"].get("fault") == "kill-pod"
        assert (
            api.can(f"system:serviceaccount:{ns}:ss-swarmscope-workers", "delete", "pods", namespace=ns)
            == kill
        )
    if target and v["target"].get("controller") == "traefik":  # its Role: Services, Secrets here only
        tsa, gs = f"system:serviceaccount:{ns}:ss-swarmscope-traefik", ["system:serviceaccounts"]
        yes = (("watch", "services", ns), ("list", "secrets", ns))
        no = (("list", "services", "default"), ("delete", "pods", ns))
        assert [api.can(tsa, vb, r, n, gs) for vb, r, n in (*yes, *no)] == [True] * 2 + [False] * 2
        assert api.get(f"/apis/networking.k8s.io/v1/namespaces/{ns}/ingresses/ss-swarmscope-target")
    for extra_ns in v.get("rbac", {}).get("faultNamespaces", []):
        user = f"system:serviceaccount:{ns}:ss-swarmscope-controller"
        assert api.can(user, "delete", "pods", namespace=extra_ns)


@pytest.mark.cluster
@pytest.mark.slow
def test_install_rejects_bad_values_file(cluster: Cluster, tmp_path: Path) -> None:
    bad = tmp_path / "bad-values.yaml"
    bad.write_text("workers:\n  mode: pool\nprobes:\n  hostPid: true\n")
    r = cluster.helm(
        "install", "bad", str(CHART), "-n", "bad", "--create-namespace", "-f", str(bad), check=False
    )
    assert r.returncode != 0
    assert "values don't meet the specifications of the schema" in r.stderr
    assert "'/workers/mode'" in r.stderr and "additional properties 'hostPid'" in r.stderr, r.stderr
    # nothing was created
    assert "bad" not in cluster.helm("list", "-A", "-q").stdout.split()


@pytest.mark.cluster
@pytest.mark.slow
def test_install_invalid_combination_fails(cluster: Cluster) -> None:
    r = cluster.helm(
        "install",
        "combo",
        str(CHART),
        "-n",
        "combo",
        "--create-namespace",
        "--set",
        "serviceMonitor.enabled=true",
        check=False,
    )
    assert r.returncode != 0
    # the real cluster has no Prometheus Operator CRD, and Helm asked it (Capabilities)
    assert "no monitoring.coreos.com/v1 ServiceMonitor CRD" in r.stderr, r.stderr


@pytest.mark.cluster
@pytest.mark.slow
def test_reuse_values_switches_the_kind(cluster: Cluster) -> None:
    """helm upgrade --reuse-values from the default exec storm to an ingress flood: the stored
    scenario is one the ingress flood accepts (its controller crash-looped on the exec storm's
    "unknown key" iterations before the options were kind-scoped; tests/test_chart_kinds.py)."""
    from swarmscope.kinds import get_kind

    ns = install(cluster, "--set", "scenario.exec_storm.iterations=5")
    cluster.helm("upgrade", "ss", str(CHART), "-n", ns, "--reuse-values", "--set", "target.enabled=true",
                 "--set", "scenario.config.scenario=ingress_flood")  # fmt: skip
    text = cluster.api.get(f"/api/v1/namespaces/{ns}/configmaps/ss-swarmscope-scenario")["data"][
        "scenario.yaml"
    ]
    cfg = get_kind("ingress_flood").schema.load(file="scenario.yaml", text=text)
    assert (cfg.scenario, cfg.host) == ("ingress_flood", "http://ss-swarmscope-target:8080")
    # ... and back, with the exec storm's own option kept from the first install.
    cluster.helm(
        "upgrade",
        "ss",
        str(CHART),
        "-n",
        ns,
        "--reuse-values",
        "--set",
        "scenario.config.scenario=exec_storm",
    )
    text = cluster.api.get(f"/api/v1/namespaces/{ns}/configmaps/ss-swarmscope-scenario")["data"][
        "scenario.yaml"
    ]
    assert get_kind("exec_storm").schema.load(file="scenario.yaml", text=text).iterations == 5


SERVICEMONITOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "scope": "Namespaced",
        "names": {"plural": "servicemonitors", "singular": "servicemonitor", "kind": "ServiceMonitor"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                # a stand-in for the Prometheus Operator's CRD: accepts any spec
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}


@pytest.mark.cluster
@pytest.mark.slow
def test_install_servicemonitor_when_crd_present(cluster: Cluster, tmp_path: Path) -> None:
    api = cluster.api
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    api.post(crds, SERVICEMONITOR_CRD)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            conds = api.get(f"{crds}/servicemonitors.monitoring.coreos.com")["status"].get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                break
            time.sleep(0.5)
        ns = "sm"
        # a fresh helm home: its discovery sees the new API (no cache from earlier calls)
        cluster.helm(
            "install", "ss", str(CHART), "-n", ns, "--create-namespace", "--wait", "--timeout", "180s",
            "--set", "serviceMonitor.enabled=true", home=tmp_path,
        )  # fmt: skip
        sms = api.get(f"/apis/monitoring.coreos.com/v1/namespaces/{ns}/servicemonitors")["items"]
        assert [s["metadata"]["name"] for s in sms] == ["ss-swarmscope"]
        assert sms[0]["spec"]["endpoints"][0]["port"] == "metrics"
        # both Services it selects exist and expose a port named "metrics"
        for comp in ("controller", "probes"):
            svc = api.get(f"/api/v1/namespaces/{ns}/services/ss-swarmscope-{comp}")
            assert "metrics" in {p["name"] for p in svc["spec"]["ports"]}
        cluster.helm("uninstall", "ss", "-n", ns, "--wait", home=tmp_path)
    finally:
        api.request("DELETE", f"{crds}/servicemonitors.monitoring.coreos.com")


@pytest.mark.cluster
@pytest.mark.slow
def test_cluster_refuses_privileged_pods(cluster: Cluster) -> None:
    # The API server runs with --allow-privileged=false: that the probe pods were admitted
    # (test_install_*) shows they are not privileged; this shows the guard is really on.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "privileged-probe"},
        "spec": {"containers": [{"name": "c", "image": "i", "securityContext": {"privileged": True}}]},
    }
    with pytest.raises(ApiError) as e:
        cluster.api.post("/api/v1/namespaces/default/pods", pod)
    assert e.value.status == 422
    assert "privileged" in e.value.body


@pytest.mark.cluster
@pytest.mark.slow
def test_kill_pod_fault_deletes_a_real_pod(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ingress scenario's kill-pod through the kubernetes client against this API server
    (tests/kill_pod_check.py): the pod is gone and its ReplicaSet's replacement Running."""
    check_kill_pod(cluster, monkeypatch)
