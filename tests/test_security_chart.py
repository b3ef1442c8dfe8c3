"""Issue 27, finding 5, the chart's defaults: mTLS on the probe fleet unless turned off, and a
hostNetwork probe's /metrics on the node's IP, not on every interface of the node.

(That the generated certificates work with the real fleet: tests/test_chart_security.py.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from test_chart import CHART, docs, helm_template, one, tools  # noqa: F401  (tools: fixture)


def _env(ctr: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in ctr.get("env", [])}


def test_mtls_is_the_default(tools, tmp_path: Path) -> None:  # noqa: F811
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert values["tls"]["enabled"] is True
    assert schema["properties"]["tls"]["properties"]["enabled"]["default"] is True
    objs = docs(helm_template(tools, tmp_path).stdout)
    ctl = _env(one(objs, "Deployment", "-controller")["spec"]["template"]["spec"]["containers"][0])
    probe = _env(one(objs, "DaemonSet", "-probes")["spec"]["template"]["spec"]["containers"][0])
    tls = "/var/run/swarmscope-tls"
    assert {k: v for k, v in ctl.items() if k.startswith("SWARMSCOPE_TLS")} == {
        "SWARMSCOPE_TLS_CERT": f"{tls}/tls.crt", "SWARMSCOPE_TLS_KEY": f"{tls}/tls.key",
        "SWARMSCOPE_TLS_CLIENT_CA": f"{tls}/ca.crt",  # a client CA: mutual, not server-only
    }  # fmt: skip
    assert {k: v for k, v in probe.items() if k.startswith("SWARMSCOPE_TLS")} == {
        "SWARMSCOPE_TLS_CA": f"{tls}/ca.crt", "SWARMSCOPE_TLS_CERT": f"{tls}/tls.crt",
        "SWARMSCOPE_TLS_KEY": f"{tls}/tls.key",
    }  # fmt: skip
    secrets = {
        o["metadata"]["name"] for o in objs if o["kind"] == "Secret" and o.get("type") == "kubernetes.io/tls"
    }
    assert secrets == {"t-swarmscope-tls-controller", "t-swarmscope-tls-probes"}
    # Off only when asked.
    objs = docs(helm_template(tools, tmp_path, "--set", "tls.enabled=false").stdout)
    ctl = _env(one(objs, "Deployment", "-controller")["spec"]["template"]["spec"]["containers"][0])
    assert not [k for k in ctl if k.startswith("SWARMSCOPE_TLS")]


def _probe(helm: Any, tmp_path: Path, *sets: str) -> dict[str, Any]:
    args = [a for s in sets for a in ("--set", s)]
    objs = docs(helm_template(helm, tmp_path, *args).stdout)
    return one(objs, "DaemonSet", "-probes")["spec"]["template"]["spec"]["containers"][0]


def _metrics_bind(ctr: dict[str, Any]) -> str:
    args = ctr["args"]
    return str(args[args.index("--metrics-bind") + 1])


def test_host_network_probe_metrics_listen_on_the_node_ip_only(tools, tmp_path: Path) -> None:  # noqa: F811
    ctr = _probe(tools, tmp_path, "probes.hostNetwork=true")
    assert _metrics_bind(ctr) == "$(HOST_IP)"  # expanded by the kubelet from the env below
    assert _env(ctr)["HOST_IP"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    # In the pod's own network namespace every address is the pod's: 0.0.0.0 there.
    ctr = _probe(tools, tmp_path)
    assert _metrics_bind(ctr) == "0.0.0.0"
    assert "HOST_IP" not in _env(ctr)
