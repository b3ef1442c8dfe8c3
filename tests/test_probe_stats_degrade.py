"""Without CAP_SYS_ADMIN the probe drops run-time statistics, says so, and keeps going.

    .venv/bin/python -m pytest tests/test_probe_stats_degrade.py

The chart's default probe pod has no CAP_SYS_ADMIN, which BPF_ENABLE_STATS needs. The real
kernel decides here: the same call runs once with all of root's capabilities and once under
`setpriv --bounding-set=-sys_admin` (root gets no capability outside the bounding set on exec).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE = """
from swarmscope.probes.cli import enable_stats_or_degrade
from swarmscope.probes.selfmetrics import ProbeSelfMetrics
m = ProbeSelfMetrics()
fd = enable_stats_or_degrade(m)
print("fd", fd is not None)
print(m.registry.render().decode())
"""
LINE = 'swarmscope_probe_feature_available{feature="program_stats"}'


def _run(*prefix: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [*prefix, sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60, env=env
    )


def test_stats_on_with_cap_sys_admin() -> None:
    r = _run()
    assert r.returncode == 0, r.stderr
    assert "fd True" in r.stdout
    assert f"{LINE} 1.0" in r.stdout.splitlines()
    assert "dropped" not in r.stderr


def test_stats_dropped_without_cap_sys_admin() -> None:
    r = _run("setpriv", "--bounding-set=-sys_admin")
    assert r.returncode == 0, r.stderr
    assert "fd False" in r.stdout
    assert f"{LINE} 0.0" in r.stdout.splitlines()
    assert "program run-time statistics dropped" in r.stderr and "CAP_SYS_ADMIN" in r.stderr
