"""Helm chart tests: lint, strict offline schema validation, and installs into a real API server.

    .venv/bin/python -m pytest tests/test_chart.py -v -s      # -s shows build/start timings

The cluster (etcd, kube-apiserver, controller-manager, scheduler, kwok with 3 fake nodes; see
tests/cluster.py) starts once per session. Every install uses its own namespace. The Go
tools come from `make tools` (tools/k8s/build.sh); the install tests are marked `cluster`.
"""

from __future__ import annotations

import base64
import itertools
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cluster import ROOT, Api, ApiError, Cluster, Tools, find_tools, helm_env
from kill_pod_check import check_kill_pod

CHART = ROOT / "charts" / "swarmscope"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
KUBE_VERSION = "1.36.0"
N_NODES = 3


_ns_counter = itertools.count()


@pytest.fixture(scope="session")
def tools() -> Tools:
    return find_tools(need=("helm",))  # rendering needs helm only


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster.start(find_tools(), tmp_path_factory.mktemp("cluster"), nodes=N_NODES) as c:
        yield c


def helm_template(
    tools: Tools, tmp: Path, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [
            str(tools.helm),
            "template",
            "t",
            str(CHART),
            "--namespace",
            "t",
            "--kube-version",
            KUBE_VERSION,
            *args,
        ],
        env=helm_env(tmp),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check and r.returncode != 0:
        raise AssertionError(f"helm template {args} failed:\n{r.stderr}")
    return r


def docs(rendered: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(rendered) if d]


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    found = [o for o in by_kind(objs, kind) if o["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, f"expected one {kind} *{suffix}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


def values_id(p: Path) -> str:
    return p.name.removesuffix("-values.yaml")


def test_every_value_has_a_comment() -> None:
    """Each key in values.yaml has a comment line above it or a trailing comment; the entries
    of a documented example payload (resources, seccompProfile) are covered by its comment."""
    payload = {"resources", "seccompProfile"}
    lines = (CHART / "values.yaml").read_text().splitlines()
    stack: list[tuple[int, str]] = []
    missing = []
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)([A-Za-z_][\w-]*):", line)
        if not m:
            continue
        indent, key = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parents = [k for _, k in stack]
        stack.append((indent, key))
        if payload & set(parents) or "#" in line.split(":", 1)[1]:
            continue
        above = next((x.strip() for x in reversed(lines[:i]) if x.strip()), "")
        if not above.startswith("#"):
            missing.append(".".join([*parents, key]))
    assert not missing, f"values without a comment: {missing}"


# --- offline: lint, schema, rendering -------------------------------------------------------


def test_ci_values_exist() -> None:
    names = {values_id(p) for p in CI_VALUES}
    assert {"minimal", "daemonset-workers", "jaeger-enabled"} <= names


@pytest.mark.slow
@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: values_id(v) if v else "default")
def test_lint_and_validate_strict(tools: Tools, tmp_path: Path, values: Path | None) -> None:
    extra = ["-f", str(values)] if values else []
    lint = subprocess.run(
        [str(tools.helm), "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, *extra],
        env=helm_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "0 chart(s) failed" in lint.stdout
    objs = docs(helm_template(tools, tmp_path, *extra).stdout)
    assert objs
    for o in objs:
        # strict: unknown fields are errors too (a typo'd securityContext key would be caught)
        kubernetes_validate.validate(o, KUBE_VERSION, strict=True)


def test_strict_validation_catches_unknown_fields() -> None:
    # negative control for test_lint_and_validate_strict: strict mode does reject a typo
    ctr = {"name": "c", "image": "i", "securityContext": {"privilegd": False}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {"containers": [ctr]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, KUBE_VERSION, strict=True)
    del ctr["securityContext"]
    kubernetes_validate.validate(pod, KUBE_VERSION, strict=True)


def test_probe_pod_capabilities_and_mounts(tools: Tools, tmp_path: Path) -> None:
    objs = docs(helm_template(tools, tmp_path).stdout)
    ds = one(objs, "DaemonSet", "-probes")
    pod = ds["spec"]["template"]["spec"]
    ctr = pod["containers"][0]
    sc = ctr["securityContext"]
    assert sc["privileged"] is False
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["BPF", "PERFMON"]}
    assert pod["hostPID"] is False and pod["hostNetwork"] is False
    assert pod["automountServiceAccountToken"] is False
    mounts = {m["mountPath"]: m for m in ctr["volumeMounts"]}
    for path in ("/sys/kernel/tracing", "/sys/fs/cgroup", "/lib/modules", "/usr/src"):
        assert mounts[path]["readOnly"] is True, path
    # The probe pins its programs (bpffs) and claims its pin directories on the node, so the
    # next probe there sweeps what a killed one left; nothing else is writable but /tmp.
    assert sc["readOnlyRootFilesystem"] is True
    writable = {p for p, m in mounts.items() if not m.get("readOnly")}
    assert writable == {"/sys/fs/bpf", "/run/swarmscope/owners", "/tmp"}, writable
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols[mounts["/run/swarmscope/owners"]["name"]]["hostPath"] == {
        "path": "/run/swarmscope/owners",
        "type": "DirectoryOrCreate",
    }
    assert vols[mounts["/sys/fs/bpf"]["name"]]["hostPath"] == {"path": "/sys/fs/bpf", "type": "Directory"}
    assert ctr["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert ctr["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in ctr["env"]
    assert ctr["args"][:2] == ["probe", "--controller"]
    assert ctr["args"][2] == "t-swarmscope-controller.t.svc:7001"
    # The probe binds its metrics to loopback unless told: the pod's IP is where the kubelet's
    # health checks and Prometheus reach it.
    assert ctr["args"][3:] == [
        "--node-key-file", "/var/run/swarmscope-node/key", "--metrics-port", "9647",
        "--metrics-bind", "0.0.0.0", "--retries", "60",
    ]  # fmt: skip
    assert ctr["resources"]["limits"]["memory"]


def test_probe_features_add_only_what_they_need(tools: Tools, tmp_path: Path) -> None:
    objs = docs(helm_template(tools, tmp_path, "-f", str(CHART / "ci" / "probe-features-values.yaml")).stdout)
    pod = one(objs, "DaemonSet", "-probes")["spec"]["template"]["spec"]
    sc = pod["containers"][0]["securityContext"]
    assert sc["capabilities"]["add"] == ["BPF", "PERFMON", "NET_ADMIN", "SYS_ADMIN"]
    assert sc["privileged"] is False
    # the API refuses allowPrivilegeEscalation=false together with SYS_ADMIN
    assert sc["allowPrivilegeEscalation"] is True
    assert pod["hostPID"] is True and pod["hostNetwork"] is True
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert not mounts["/sys/fs/bpf"].get("readOnly")  # the loader pins there
    assert mounts["/sys/kernel/tracing"]["readOnly"] is True
    # netlink alone adds NET_ADMIN and nothing else
    objs = docs(helm_template(tools, tmp_path, "--set", "probes.features.netlink=true").stdout)
    sc = one(objs, "DaemonSet", "-probes")["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert sc["capabilities"]["add"] == ["BPF", "PERFMON", "NET_ADMIN"]


def test_controller_wiring(tools: Tools, tmp_path: Path) -> None:
    objs = docs(helm_template(tools, tmp_path).stdout)
    svc = one(objs, "Service", "-controller")
    assert {(p["name"], p["port"]) for p in svc["spec"]["ports"]} == {
        ("locust", 5557),
        ("grpc", 7001),
        ("metrics", 9646),
        ("web", 8089),
    }
    ctr = one(objs, "Deployment", "-controller")["spec"]["template"]["spec"]["containers"][0]
    assert ctr["args"] == [
        "controller",
        "--scenario",
        "/etc/swarmscope/scenario.yaml",
        "--locust-port",
        "5557",
        "--grpc-port",
        "7001",
        "--metrics-port",
        "9646",
        "--web-port",
        "8089",
        "--web-host",
        "127.0.0.1",
    ]
    env = {e["name"]: e for e in ctr["env"]}
    assert env["SWARMSCOPE_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "t-swarmscope-token",
        "key": "token",
    }
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == "http://t-swarmscope-jaeger.t.svc:4317"
    assert env["OTEL_SERVICE_NAME"]["value"] == "swarmscope-controller"
    jaeger = one(objs, "Service", "-jaeger")
    assert {p["port"] for p in jaeger["spec"]["ports"]} == {4317, 4318, 16686}
    # the scenario ConfigMap is the file the controller reads
    cm = one(objs, "ConfigMap", "-scenario")
    assert yaml.safe_load(cm["data"]["scenario.yaml"])["scenario"] == "exec_storm"
    # workers connect to the controller's Locust port and know their node
    w = one(objs, "Deployment", "-workers")["spec"]["template"]["spec"]
    assert w["containers"][0]["args"] == [
        "worker",
        "--controller",
        "t-swarmscope-controller.t.svc",
        "--locust-port",
        "5557",
        "--kind",
        "exec_storm",
    ]
    assert w["automountServiceAccountToken"] is False
    # http/protobuf goes to Jaeger's OTLP/HTTP port
    objs = docs(helm_template(tools, tmp_path, "--set", "otel.protocol=http/protobuf").stdout)
    env = {
        e["name"]: e
        for e in one(objs, "Deployment", "-controller")["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"].endswith(":4318")


def test_rbac_is_least_privilege_in_render(tools: Tools, tmp_path: Path) -> None:
    objs = docs(helm_template(tools, tmp_path).stdout)
    # Namespaced only (issue 18, finding 11): no ClusterRole, no ClusterRoleBinding.
    assert not by_kind(objs, "ClusterRole") and not by_kind(objs, "ClusterRoleBinding")
    (role,) = by_kind(objs, "Role")
    assert role["metadata"]["namespace"] == "t"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]}
    ]
    sas = {o["metadata"]["name"]: o for o in by_kind(objs, "ServiceAccount")}
    assert sas["t-swarmscope-probes"]["automountServiceAccountToken"] is False
    assert sas["t-swarmscope-workers"]["automountServiceAccountToken"] is False
    assert sas["t-swarmscope-controller"]["automountServiceAccountToken"] is True


def test_servicemonitor_needs_crd_or_force(tools: Tools, tmp_path: Path) -> None:
    r = helm_template(tools, tmp_path, "--set", "serviceMonitor.enabled=true", check=False)
    assert r.returncode != 0
    assert "no monitoring.coreos.com/v1 ServiceMonitor CRD" in r.stderr
    for extra in (
        ["--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"],
        ["--set", "serviceMonitor.force=true"],
    ):
        objs = docs(helm_template(tools, tmp_path, "--set", "serviceMonitor.enabled=true", *extra).stdout)
        (sm,) = by_kind(objs, "ServiceMonitor")
        assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert not by_kind(docs(helm_template(tools, tmp_path).stdout), "ServiceMonitor")


BAD_VALUES = [
    # (--set arguments, text the error must contain: where, and what is wrong)
    (["workers.mode=pool"], "at '/workers/mode': value must be one of 'deployment', 'daemonset'"),
    (["probes.privileged=true"], "at '/probes': additional properties 'privileged' not allowed"),
    (["controller.ports.grpc=70000"], "at '/controller/ports/grpc': maximum"),
    (["workers.replicas=-1"], "at '/workers/replicas': minimum"),
    (["otel.protocol=thrift"], "at '/otel/protocol': value must be one of"),
    (["image.pullPolicy=Sometimes"], "at '/image/pullPolicy': value must be one of"),
]

BAD_COMBINATIONS = [
    (["workers.mode=daemonset", "workers.replicas=3"], "leave workers.replicas unset"),
    (["jaeger.enabled=false"], "tracing.enabled=true needs somewhere to send traces"),
    (["otel.endpoint=http://x:4317"], "jaeger.enabled=true and otel.endpoint are both set"),
    (["probes.features.xdp=true"], "probes.hostNetwork=true"),
    (["auth.token=0123456789abcdefXYZ", "auth.existingSecret=s"], "mutually exclusive"),
    (["controller.ports.web=7001"], "four different ports"),
    (["tls.enabled=true", "tls.controllerSecret=x"], "tls.controllerSecret and tls.probesSecret go together"),
]


@pytest.mark.parametrize(("sets", "message"), BAD_VALUES + BAD_COMBINATIONS, ids=lambda x: str(x))
def test_bad_values_rejected_clearly(tools: Tools, tmp_path: Path, sets: list[str], message: str) -> None:
    args = list(itertools.chain.from_iterable(("--set", s) for s in sets))
    r = helm_template(tools, tmp_path, *args, check=False)
    assert r.returncode != 0, f"{sets} was accepted"
    assert message in r.stderr, r.stderr
    if (sets, message) in BAD_VALUES:
        assert "values don't meet the specifications of the schema" in r.stderr, r.stderr


# --- real API server ------------------------------------------------------------------------


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
