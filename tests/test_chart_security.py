"""The chart's security pieces, rendered (issue 18, findings 2, 3, 11): default-deny
NetworkPolicies, the workers' token and web password wiring, and the mTLS certificates the
chart generates, checked by running the real fleet and a probe over them.

    .venv/bin/python -m pytest tests/test_chart_security.py -v
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from fakeprobe import FakeProbe
from test_chart import CHART, by_kind, docs, helm_template, one, tools  # noqa: F401  (tools: fixture)

from swarmscope.controller.fleet import Fleet
from swarmscope.core.tls import TLSFiles, channel_credentials, channel_options
from swarmscope.v1 import probe_pb2 as pb

pytestmark = [pytest.mark.slow]

SEL = {"app.kubernetes.io/name": "swarmscope", "app.kubernetes.io/instance": "t"}


def sel(component: str) -> dict[str, Any]:
    return {"podSelector": {"matchLabels": {**SEL, "app.kubernetes.io/component": component}}}


def tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def test_network_policy_default_deny(tools, tmp_path: Path) -> None:  # noqa: F811
    objs = docs(helm_template(tools, tmp_path).stdout)
    pols = {
        o["metadata"]["name"].removeprefix("t-swarmscope-"): o["spec"] for o in by_kind(objs, "NetworkPolicy")
    }
    assert set(pols) == {"default-deny", "controller", "workers", "probes", "jaeger"}
    deny = pols["default-deny"]
    assert deny["podSelector"] == {"matchLabels": SEL} and deny["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in deny  # nothing in
    assert deny["egress"] == [{"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}]
    # workers -> master port only; probes -> fleet port only
    assert pols["controller"]["ingress"] == [
        {"from": [sel("workers")], "ports": tcp(5557)},
        {"from": [sel("probes")], "ports": tcp(7001)},
    ]
    assert pols["workers"]["egress"] == [{"to": [sel("controller")], "ports": tcp(5557)}]
    assert pols["workers"]["ingress"] == []
    assert pols["probes"]["egress"] == [
        {"to": [sel("controller")], "ports": tcp(7001)},
        {"to": [sel("jaeger")], "ports": tcp(4317, 4318)},
    ]
    assert pols["probes"]["ingress"] == []
    assert pols["controller"]["egress"] == [{"to": [sel("jaeger")], "ports": tcp(4317, 4318)}]
    assert pols["jaeger"]["ingress"] == [
        {"from": [sel("controller"), sel("probes")], "ports": tcp(4317, 4318)}
    ]
    assert pols["jaeger"]["egress"] == []
    # opt-ins: metrics scrapers, the workers' system under test
    prom = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    objs = docs(
        helm_template(
            tools, tmp_path,
            "--set-json", f"networkPolicy.metricsFrom=[{__import__('json').dumps(prom)}]",
            "--set-json", 'networkPolicy.workerEgress=[{"ports":[{"port":80,"protocol":"TCP"}]}]',
            "--set", "jaeger.enabled=false", "--set", "tracing.enabled=false",
        ).stdout
    )  # fmt: skip
    pols = {
        o["metadata"]["name"].removeprefix("t-swarmscope-"): o["spec"] for o in by_kind(objs, "NetworkPolicy")
    }
    assert "jaeger" not in pols
    assert {"from": [prom], "ports": tcp(9646)} in pols["controller"]["ingress"]
    assert pols["probes"]["ingress"] == [{"from": [prom], "ports": tcp(9647)}]
    assert pols["workers"]["egress"][1] == {"ports": [{"port": 80, "protocol": "TCP"}]}
    assert pols["probes"]["egress"] == [{"to": [sel("controller")], "ports": tcp(7001)}]
    assert not by_kind(
        docs(helm_template(tools, tmp_path, "--set", "networkPolicy.enabled=false").stdout), "NetworkPolicy"
    )


def test_secrets_reach_only_their_roles(tools, tmp_path: Path) -> None:  # noqa: F811
    objs = docs(helm_template(tools, tmp_path).stdout)
    secret = one(objs, "Secret", "-token")
    assert set(secret["data"]) == {"token", "worker-token", "web-password"}
    assert len({base64.b64decode(v) for v in secret["data"].values()}) == 3

    def env(kind: str, suffix: str) -> dict[str, Any]:
        ctr = one(objs, kind, suffix)["spec"]["template"]["spec"]["containers"][0]
        return {e["name"]: e for e in ctr["env"]}

    ctl, wrk, prb = (
        env("Deployment", "-controller"),
        env("Deployment", "-workers"),
        env("DaemonSet", "-probes"),
    )
    key = lambda e: e["valueFrom"]["secretKeyRef"]["key"]  # noqa: E731
    assert key(ctl["SWARMSCOPE_WORKER_TOKEN"]) == key(wrk["SWARMSCOPE_WORKER_TOKEN"]) == "worker-token"
    assert ctl["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert ctl["SWARMSCOPE_WEB_PASSWORD_FILE"]["value"] == "/var/run/swarmscope-web/web-password"
    # workers get neither the probe token nor the web password; probes not the worker token
    assert "SWARMSCOPE_TOKEN" not in wrk and "SWARMSCOPE_WEB_PASSWORD_FILE" not in wrk
    assert "SWARMSCOPE_WORKER_TOKEN" not in prb
    ctr = one(objs, "Deployment", "-controller")["spec"]["template"]["spec"]["containers"][0]
    assert ctr["args"][-2:] == ["--web-host", "127.0.0.1"]
    objs = docs(helm_template(tools, tmp_path, "--set", "controller.webLogin=false").stdout)
    ctr = one(objs, "Deployment", "-controller")["spec"]["template"]["spec"]["containers"][0]
    assert ctr["args"][-1] == "--no-web-login"


def test_master_key_and_node_keys_reach_only_their_holders(tools, tmp_path: Path) -> None:  # noqa: F811
    """Issue 27: the Locust master's secret key is mounted into the controller only (workers get
    its public half, which matches it), and a probe container holds its node's key, made by an
    init container from the probe token, never the token itself."""
    import zmq

    from swarmscope.app import workerauth

    objs = docs(helm_template(tools, tmp_path).stdout)
    master = one(objs, "Secret", "-master-key")
    pem = {k: base64.b64decode(v).decode() for k, v in master["data"].items()}
    assert set(pem) == {"master.key", "master.crt"}
    secret = workerauth.parse_secret(pem["master.key"], "master.key")
    assert zmq.curve_public(secret) == workerauth.parse_public(pem["master.crt"], "master.crt")

    def pod(kind: str, suffix: str) -> dict[str, Any]:
        return dict(one(objs, kind, suffix)["spec"]["template"]["spec"])

    def uses(spec: dict[str, Any], name: str) -> bool:
        return name in __import__("json").dumps(spec)

    ctl, wrk, prb = (
        pod("Deployment", "-controller"),
        pod("Deployment", "-workers"),
        pod("DaemonSet", "-probes"),
    )
    env = {e["name"]: e for e in ctl["containers"][0]["env"]}
    assert env["SWARMSCOPE_MASTER_KEY_FILE"]["value"] == "/var/run/swarmscope-master/master.key"
    (vol,) = [v for v in ctl["volumes"] if v["name"] == "master-key"]
    assert vol["secret"]["items"] == [{"key": "master.key", "path": "master.key"}]
    wenv = {e["name"]: e for e in wrk["containers"][0]["env"]}
    ref = wenv["SWARMSCOPE_MASTER_PUBLIC_KEY"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": master["metadata"]["name"], "key": "master.crt"}
    assert not uses(wrk, "master.key") and not uses(prb, master["metadata"]["name"])
    (init,) = prb["initContainers"]
    probe = prb["containers"][0]
    assert init["args"][:3] == ["node-key", "--node", "$(NODE_NAME)"]
    assert {m["name"] for m in init["volumeMounts"]} == {"token", "node-key"}
    assert "token" not in {m["name"] for m in probe["volumeMounts"]}
    i = probe["args"].index("--node-key-file")
    assert probe["args"][i + 1] == "/var/run/swarmscope-node/key" and "--token-file" not in probe["args"]


def _secret_files(secret: dict[str, Any], d: Path) -> dict[str, str]:
    d.mkdir(parents=True, exist_ok=True)
    out = {}
    for k, v in secret["data"].items():
        (d / k).write_bytes(base64.b64decode(v))
        out[k] = str(d / k)
    return out


def test_generated_mtls_certificates_work_with_the_real_fleet(tools, tmp_path: Path) -> None:  # noqa: F811
    objs = docs(helm_template(tools, tmp_path, "-f", str(CHART / "ci" / "mtls-values.yaml")).stdout)
    ctl_secret, prb_secret = one(objs, "Secret", "-tls-controller"), one(objs, "Secret", "-tls-probes")
    assert ctl_secret["type"] == prb_secret["type"] == "kubernetes.io/tls"
    assert ctl_secret["data"]["ca.crt"] == prb_secret["data"]["ca.crt"]
    ctl = _secret_files(ctl_secret, tmp_path / "ctl")
    prb = _secret_files(prb_secret, tmp_path / "prb")
    # the pods' wiring
    dep = one(objs, "Deployment", "-controller")["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in dep["containers"][0]["env"]}
    assert env["SWARMSCOPE_TLS_CLIENT_CA"] == "/var/run/swarmscope-tls/ca.crt"
    assert {
        "name": "fleet-tls",
        "secret": {"secretName": "t-swarmscope-tls-controller", "defaultMode": 0o440},
    } in dep["volumes"]
    ds = one(objs, "DaemonSet", "-probes")["spec"]["template"]["spec"]
    penv = {e["name"]: e.get("value") for e in ds["containers"][0]["env"]}
    assert penv["SWARMSCOPE_TLS_CA"] == "/var/run/swarmscope-tls/ca.crt"
    assert {
        "name": "fleet-tls",
        "secret": {"secretName": "t-swarmscope-tls-probes", "defaultMode": 0o400},
    } in ds["volumes"]
    # The real fleet with the controller's Secret; a probe with the probes' Secret, checking the
    # name it dials in the chart (the Service's DNS name), gets in; one without a cert does not.
    fleet = Fleet("chart-token", tls=TLSFiles(cert=ctl["tls.crt"], key=ctl["tls.key"], ca=ctl["ca.crt"]))
    fleet.start()
    try:
        name = "t-swarmscope-controller.t.svc"
        files = TLSFiles(cert=prb["tls.crt"], key=prb["tls.key"], ca=prb["ca.crt"], server_name=name)
        p = FakeProbe(fleet.address, "chart-token", "node-1", credentials=channel_credentials(files),
                      options=channel_options(files)).start()  # fmt: skip
        fleet.wait_for_probes(1, timeout_s=10)
        assert fleet.open_window("r", "w", {"node-1": [pb.NodeInfo(name="node-1")]}) == {}
        readings, missing = fleet.close_window("r", "w", timeout_s=10)
        assert missing == [] and [r.node for r in readings] == ["node-1"]
        p.stop()
        anon = TLSFiles(ca=prb["ca.crt"], server_name=name)
        q = FakeProbe(fleet.address, "chart-token", "node-2", credentials=channel_credentials(anon),
                      options=channel_options(anon))  # fmt: skip
        with pytest.raises(Exception, match="UNAVAILABLE"):
            q.register()
        q.stop()
    finally:
        fleet.stop()
