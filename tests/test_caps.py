"""Root's uid without CAP_BPF/CAP_PERFMON (a container, `capsh --drop`): one message naming the
capabilities and how to get them (issue 28: "Failed to compile BPF module", two tracebacks about
run_started). setpriv (util-linux) drops them from the bounding set, so uid 0 runs without."""

from __future__ import annotations

import pathlib
import subprocess

import pytest
from helpers import BIN, ROOT

from swarmscope.core.sys.caps import HOW, missing_bpf_caps

pytestmark = pytest.mark.root  # conftest skips it with "not root" (CI is root)
DROP = ["setpriv", "--bounding-set=-bpf,-perfmon", "--"]


def _swarmscope(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DROP, str(BIN / "swarmscope"), *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_root_has_what_bpf_needs() -> None:
    assert missing_bpf_caps() == []


@pytest.mark.slow
def test_a_run_without_the_capabilities_says_which(tmp_path: pathlib.Path) -> None:
    p = _swarmscope("run", "scenarios/exec_storm.yaml", "--set", "iterations=1", "--out", str(tmp_path))
    assert p.returncode == 3
    lacks = "this process lacks CAP_BPF + CAP_PERFMON"
    assert p.stderr == f"swarmscope: the embedded probe loads eBPF programs and {lacks}: {HOW}.\n"


def test_the_probe_without_the_capabilities_says_which() -> None:
    p = _swarmscope("probe", "--once", "--seconds", "1")
    assert p.returncode == 3
    assert f"missing: the capabilities CAP_BPF + CAP_PERFMON: {HOW}." in p.stderr
    assert "Failed to compile" not in p.stderr and "Traceback" not in p.stderr
