"""The chart's relays (relays.enabled), rendered with the real helm the chart tests build: the
relay Deployment's wiring and restrictions, the probes dialling relays then controller, the
network policies, the invalid combinations refused; and the generated relay certificate used
for real: a controller fleet with the chart's controller Secret, a `swarmscope relay` with the
relays' Secret, a probe with the probes' Secret, each checking the DNS name the chart dials.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
from fakeprobe import FakeProbe
from helpers import ROOT
from test_chart import CHART, KUBE_VERSION, by_kind, docs, helm_template, one, tools  # noqa: F401
from test_chart_security import _secret_files

from swarmscope.controller.fleet import Fleet
from swarmscope.core.tls import TLSFiles, channel_credentials, channel_options
from swarmscope.v1 import probe_pb2 as pb

ON = ("--set", "relays.enabled=true", "--set", "relays.replicas=3")
CTL = "t-swarmscope-controller.t.svc"
RELAYS = "t-swarmscope-relays.t.svc"


def _container(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.slow
def test_relays_render_wired_and_restricted(tools, tmp_path: Path) -> None:  # noqa: F811
    off = docs(helm_template(tools, tmp_path).stdout)
    assert [o for o in off if o["metadata"]["name"].endswith("-relays")] == []
    args = _container(one(off, "DaemonSet", "-probes"))["args"]
    assert args[args.index("--controller") + 1] == f"{CTL}:7001"

    objs = docs(helm_template(tools, tmp_path, *ON).stdout)
    for o in objs:
        kubernetes_validate.validate(o, KUBE_VERSION, strict=True)
    dep = one(objs, "Deployment", "-relays")
    assert dep["spec"]["replicas"] == 3
    spec, c = dep["spec"]["template"]["spec"], _container(dep)
    assert c["args"][:9] == [
        "relay", "--upstream", f"{CTL}:7001", "--bind", "0.0.0.0:7002",
        "--token-file", "/var/run/swarmscope/token", "--liveness", "5",
    ]  # fmt: skip
    assert c["args"][9:] == ["--window-timeout", "20", "--retries", "60"]
    sc = c["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["runAsNonRoot"] is True and sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert spec["automountServiceAccountToken"] is False
    env = {e["name"]: e for e in c["env"]}
    assert env["SWARMSCOPE_RELAY_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    tls = ["SWARMSCOPE_RELAY_TLS_CERT", "SWARMSCOPE_RELAY_TLS_KEY", "SWARMSCOPE_RELAY_TLS_CLIENT_CA",
           "SWARMSCOPE_TLS_CA", "SWARMSCOPE_TLS_CERT", "SWARMSCOPE_TLS_KEY"]  # fmt: skip
    assert sorted(env) == sorted(["PYTHONDONTWRITEBYTECODE", "SWARMSCOPE_RELAY_ID", *tls])  # mTLS by default
    svc = one(objs, "Service", "-relays")
    assert svc["spec"]["ports"] == [
        {"name": "grpc", "port": 7002, "targetPort": "grpc", "protocol": "TCP", "appProtocol": "grpc"}
    ]
    args = _container(one(objs, "DaemonSet", "-probes"))["args"]
    assert args[args.index("--controller") + 1] == f"{RELAYS}:7002,{CTL}:7001"
    # Network policy: probes -> relays:7002, relays -> controller:7001, nothing else into relays.
    pols = {o["metadata"]["name"]: o["spec"] for o in by_kind(objs, "NetworkPolicy")}
    relay_pol = pols["t-swarmscope-relays"]
    assert [r["ports"] for r in relay_pol["ingress"]] == [[{"protocol": "TCP", "port": 7002}]]
    assert (
        relay_pol["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
        == "probes"
    )
    assert relay_pol["egress"][0]["ports"] == [{"protocol": "TCP", "port": 7001}]
    probe_out = [r["ports"] for r in pols["t-swarmscope-probes"]["egress"]]
    assert [{"protocol": "TCP", "port": 7002}] in probe_out
    ctl_in = [
        p["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
        for r in pols["t-swarmscope-controller"]["ingress"]
        if r["ports"] == [{"protocol": "TCP", "port": 7001}]
        for p in r["from"]
    ]
    assert ctl_in == ["probes", "relays"]


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["probes.enabled=false"], "relays.enabled=true needs probes.enabled=true"),
        (
            ["tls.enabled=true", "tls.controllerSecret=c", "tls.probesSecret=p"],
            "needs relays.tlsSecret",
        ),
        (["relays.windowTimeout=30"], "exclusiveMaximum"),
        (["relays.engine=native"], "additional properties 'engine' not allowed"),
    ],
)
def test_relays_invalid_combinations_fail(tools, tmp_path: Path, sets: list[str], message: str) -> None:  # noqa: F811
    extra = [a for s in sets for a in ("--set", s)]
    r = helm_template(tools, tmp_path, *ON, *extra, check=False)
    assert r.returncode != 0 and message in r.stderr, r.stderr


@pytest.mark.slow
def test_generated_relay_certificate_works_both_ways(tools, tmp_path: Path) -> None:  # noqa: F811
    """The chart's relay certificate, towards probes (mTLS) and the controller (mTLS, its
    server name), with the relay configured by environment only (as the chart does)."""
    values = ("-f", str(CHART / "ci" / "mtls-values.yaml"))
    objs = docs(helm_template(tools, tmp_path, *ON, *values).stdout)
    for o in objs:
        kubernetes_validate.validate(o, KUBE_VERSION, strict=True)
    secret = one(objs, "Secret", "-tls-relays")
    assert secret["data"]["ca.crt"] == one(objs, "Secret", "-tls-controller")["data"]["ca.crt"]
    dep = one(objs, "Deployment", "-relays")
    rendered = {e["name"]: e.get("value") for e in _container(dep)["env"]}
    assert (
        rendered["SWARMSCOPE_RELAY_TLS_CLIENT_CA"]
        == rendered["SWARMSCOPE_TLS_CA"]
        == "/var/run/swarmscope-tls/ca.crt"
    )
    assert {
        "name": "relay-tls",
        "secret": {"secretName": "t-swarmscope-tls-relays", "defaultMode": 0o440},
    } in dep["spec"]["template"]["spec"]["volumes"]
    ctl = _secret_files(one(objs, "Secret", "-tls-controller"), tmp_path / "ctl")
    rly = _secret_files(secret, tmp_path / "rly")
    prb = _secret_files(one(objs, "Secret", "-tls-probes"), tmp_path / "prb")
    fleet = Fleet("chart-token", tls=TLSFiles(cert=ctl["tls.crt"], key=ctl["tls.key"], ca=ctl["ca.crt"]))
    fleet.start()
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        SWARMSCOPE_TOKEN="chart-token",
        SWARMSCOPE_RELAY_ID="relay-0",
        SWARMSCOPE_RELAY_TLS_CERT=rly["tls.crt"],
        SWARMSCOPE_RELAY_TLS_KEY=rly["tls.key"],
        SWARMSCOPE_RELAY_TLS_CLIENT_CA=rly["ca.crt"],
        SWARMSCOPE_TLS_CA=rly["ca.crt"],
        SWARMSCOPE_TLS_CERT=rly["tls.crt"],
        SWARMSCOPE_TLS_KEY=rly["tls.key"],
        SWARMSCOPE_TLS_SERVER_NAME=CTL,
    )
    relay = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "swarmscope",
            "relay",
            "--upstream",
            fleet.address,
            "--bind",
            "127.0.0.1:0",
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert relay.stdout is not None
        port = int(relay.stdout.readline().rsplit(" ", 1)[1])
        files = TLSFiles(cert=prb["tls.crt"], key=prb["tls.key"], ca=prb["ca.crt"], server_name=RELAYS)
        p = FakeProbe(f"127.0.0.1:{port}", "chart-token", "node-1", credentials=channel_credentials(files),
                      options=channel_options(files)).start()  # fmt: skip
        fleet.wait_for_probes(1, timeout_s=20)
        assert [(x.probe_id, x.via) for x in fleet.probes()] == [(p.probe_id, "relay-0")]
        assert fleet.open_window("r", "w", {"node-1": [pb.NodeInfo(name="node-1")]}) == {}
        readings, missing = fleet.close_window("r", "w", timeout_s=20)
        assert missing == [] and [(r.probe_id, r.node) for r in readings] == [(p.probe_id, "node-1")]
        p.stop()
    finally:
        relay.kill()
        relay.wait(10)
        fleet.stop()
