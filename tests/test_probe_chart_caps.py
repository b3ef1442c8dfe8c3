"""The real probe with exactly the capabilities the chart gives its container, as the chart runs it.

    .venv/bin/python -m pytest tests/test_probe_chart_caps.py

The capability list is read from the rendered chart (``helm template``: the probe DaemonSet's
``securityContext.capabilities.add``), for the default values and for each feature flag that
adds one. The probe then runs under ``setpriv --bounding-set -all,+<those>`` (root keeps only
the bounding set across exec; the chart drops ALL and adds these) with ``--metrics-port``, as
the chart's container args do, as the external probe of a real ``swarmscope run``. It must
start, load its programs, count every exec exactly, and say whether per-program statistics
are available: only with SYS_ADMIN (BPF_ENABLE_STATS), otherwise dropped and reported 0.
"""

from __future__ import annotations

import os
import pathlib
import re
import secrets
import shutil
import subprocess
import time
import urllib.request

import pytest
from helpers import BIN, ROOT, free_port, load_report, only_run_dir
from test_chart import Tools, docs, helm_template, one, tools  # noqa: F401  (tools: fixture)

pytestmark = [
    pytest.mark.root,
    pytest.mark.bpf,
    pytest.mark.slow,
]

# Feature flags that add a capability; xdp needs the
# host network, as the chart's validation says.
FEATURES = {
    "default": [],
    "xdp": ["probes.features.xdp=true", "probes.hostNetwork=true"],
    "netlink": ["probes.features.netlink=true"],
    "programStats": ["probes.features.programStats=true"],
}
STATS = 'swarmscope_probe_feature_available{feature="program_stats"}'
CAP_BITS = {"SYS_ADMIN": 21, "NET_ADMIN": 12, "PERFMON": 38, "BPF": 39}


def chart_caps(
    tools: Tools,  # noqa: F811
    tmp: pathlib.Path,
    sets: list[str],
) -> list[str]:
    args = [a for s in sets for a in ("--set", s)]
    ds = one(docs(helm_template(tools, tmp, *args).stdout), "DaemonSet", "-probes")
    (c,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "probe"]
    sc = c["securityContext"]["capabilities"]
    assert sc["drop"] == ["ALL"], sc
    assert "--metrics-port" in c["args"], c["args"]  # as the chart runs it
    return list(sc["add"])


def cap_eff(pid: int) -> set[str]:
    line = next(
        ln for ln in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("CapEff:")
    )
    bits = int(line.split()[1], 16)
    return {name for name, bit in CAP_BITS.items() if bits >> bit & 1} | (
        {"OTHER"} if bits & ~sum(1 << b for b in CAP_BITS.values()) else set()
    )


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return str(r.read().decode())


@pytest.mark.parametrize("feature", list(FEATURES))
def test_probe_with_the_charts_capabilities(feature: str, tools: Tools, tmp_path: pathlib.Path) -> None:  # noqa: F811
    caps = chart_caps(tools, tmp_path, FEATURES[feature])
    assert {"BPF", "PERFMON"} <= set(caps) and set(caps) <= set(CAP_BITS), caps
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is installed by tools/setup.sh"
    token = tmp_path / "token"
    token.write_text(secrets.token_hex(16) + "\n")
    host = f"caps-{feature}-{secrets.token_hex(3)}"
    grpc_port, locust_port, metrics_port = free_port(), free_port(), free_port()
    out = tmp_path / "results"
    run = subprocess.Popen(
        [
            str(BIN / "swarmscope"), "run", "scenarios/exec_storm.yaml",
            "--set", "mode=distributed", "--set", "workers=1", "--set", "probe=external",
            "--set", "expect_probes=1", "--set", f"token_file={token}",
            "--set", f"grpc_bind=127.0.0.1:{grpc_port}", "--set", f"master_bind=127.0.0.1:{locust_port}",
            "--set", "nodes=1", "--set", "iterations=2", "--set", "burst_s=0.3", "--set", "pause_s=0",
            "--out", str(out),
        ],
        cwd=ROOT, env={**os.environ, "SWARMSCOPE_NODE_HOST": host}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    bounding = "-all," + ",".join(f"+{c.lower()}" for c in caps)
    with open(tmp_path / "probe.log", "wb") as log:
        probe = subprocess.Popen(
            [setpriv, "--bounding-set", bounding, str(BIN / "swarmscope"), "probe",
             "--controller", f"127.0.0.1:{grpc_port}", "--token-file", str(token), "--node", host,
             "--metrics-port", str(metrics_port), "--metrics-bind", "127.0.0.1"],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    metrics, effective = "", set()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and probe.poll() is None and run.poll() is None:
            try:
                text = scrape(metrics_port)
                effective = cap_eff(probe.pid)
            except OSError:
                time.sleep(0.2)
                continue
            if 'program="exec_count"' in text or not metrics:
                metrics = text  # the last scrape with its programs loaded
            time.sleep(0.2)
        _, err = run.communicate(timeout=120)
    finally:
        if probe.poll() is None:
            probe.terminate()
        probe.wait(30)
        if run.poll() is None:
            run.kill()
            run.wait(10)
    plog = (tmp_path / "probe.log").read_text(errors="replace")
    assert run.returncode == 0, err[-3000:] + "\n--- probe:\n" + plog[-3000:]
    # The probe ran with exactly the chart's capabilities, no more.
    assert effective == set(caps), (effective, caps)
    # It counted every exec of the node exactly, in every window.
    its = load_report(only_run_dir(out))["points"][0]["iterations"]
    assert len(its) == 2
    for it in its:
        (n,) = it["per_node"]
        assert n["missing"] == [] and n["generated"] == n["kernel"] > 0, n
    # Its programs were loaded (its /metrics lists them and their maps: with only the chart's
    # capabilities it reads its own maps through the fds it holds) and it said whether
    # per-program statistics are available.
    runs = [
        float(v)
        for v in re.findall(
            r'^swarmscope_probe_program_run_count_total\{[^}]*program="exec_count"[^}]*\} (\S+)$',
            metrics,
            re.M,
        )
    ]
    assert runs, metrics[-3000:]
    assert re.search(
        r'^swarmscope_probe_map_max_entries\{map="exec_count",program="exec_count"\} 65536.0$', metrics, re.M
    ), metrics[-3000:]
    has_stats = "SYS_ADMIN" in caps
    assert f"{STATS} {1.0 if has_stats else 0.0}" in metrics.splitlines(), metrics[-2000:]
    assert ("program run-time statistics dropped" in plog) is not has_stats, plog[-2000:]
    if has_stats:  # stats on: its own program's runs are counted
        assert max(runs) > 0, metrics[-2000:]
