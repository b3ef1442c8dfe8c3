"""The chart's tracing wiring: probe and worker pods export to the chart's Jaeger (or
otel.endpoint) like the controller. (NOTES.txt, printed by a real install, is checked in
test_chart.py's test_install_default_values.)

Rendered with the real helm the chart tests build.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_chart import Tools, docs, helm_env, helm_template, one, tools  # noqa: F401


def env_of(obj: dict) -> dict[str, dict]:
    return {e["name"]: e for e in obj["spec"]["template"]["spec"]["containers"][0]["env"]}


@pytest.mark.slow
def test_probes_and_workers_get_the_otlp_endpoint(tools: Tools, tmp_path: Path) -> None:  # noqa: F811
    objs = docs(helm_template(tools, tmp_path).stdout)
    for kind, suffix in (("DaemonSet", "-probes"), ("Deployment", "-workers"), ("Deployment", "-controller")):
        env = env_of(one(objs, kind, suffix))
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == "http://t-swarmscope-jaeger.t.svc:4317", suffix
        assert env["OTEL_EXPORTER_OTLP_PROTOCOL"]["value"] == "grpc"
    objs = docs(
        helm_template(
            tools, tmp_path, "--set", "jaeger.enabled=false", "--set", "otel.endpoint=http://c.m:4318",
            "--set", "otel.protocol=http/protobuf",
        ).stdout
    )  # fmt: skip
    for kind, suffix in (("DaemonSet", "-probes"), ("Deployment", "-workers")):
        env = env_of(one(objs, kind, suffix))
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == "http://c.m:4318"
        assert env["OTEL_EXPORTER_OTLP_PROTOCOL"]["value"] == "http/protobuf"
    # Tracing off: no export from probes and workers, and not the SDK's off switch either (their
    # spans still go back to the controller's trace.json).
    objs = docs(
        helm_template(
            tools, tmp_path, "--set", "tracing.enabled=false", "--set", "jaeger.enabled=false"
        ).stdout
    )
    for kind, suffix in (("DaemonSet", "-probes"), ("Deployment", "-workers")):
        env = env_of(one(objs, kind, suffix))
        assert not {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SDK_DISABLED"} & set(env)
