"""Each door refuses, at start and with the reason, a kind it cannot run (docs/architecture.md):
no traceback, no half-started run."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_controller_refuses_a_kind_without_a_locustfile_with_its_reason() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "swarmscope", "controller", "--scenario", "scenarios/ebpf_cost.yaml"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 3, r.stderr
    assert r.stderr.strip() == (
        "swarmscope: swarmscope controller does not run the ebpf_cost scenario: it runs embedded only: "
        "third-party eBPF tools started on the one machine it measures "
        "(run it with: swarmscope run scenarios/ebpf_cost.yaml)"
    )
