"""Helm chart tests, rendered only: lint, strict offline schema validation, values and wiring.

    .venv/bin/python -m pytest tests/test_chart.py -v

Needs helm only (`make tools`). The installs into a real API server are tests/test_chart_install.py.
"""

from __future__ import annotations

import itertools
import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cluster import ROOT, Tools, find_tools, helm_env

CHART = ROOT / "charts" / "swarmscope"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
KUBE_VERSION = "1.36.0"
N_NODES = 3


@pytest.fixture(scope="session")
def tools() -> Tools:
    return find_tools(need=("helm",))  # rendering needs helm only


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
