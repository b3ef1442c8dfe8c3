"""Each door refuses, at start and with the reason, a kind it cannot run (docs/architecture.md):
no traceback, no half-started run."""

from __future__ import annotations

import pathlib

import pytest

from swarmscope.app.commands import roles
from swarmscope.core.errors import SetupError

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_controller_refuses_a_kind_without_a_locustfile_with_its_reason(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every shipped kind has its locustfile (docs/doors.md): a scenario directory without
    ebpf_cost's stands in for a kind that has none."""
    monkeypatch.setattr(roles, "SCENARIO_DIR", tmp_path)
    with pytest.raises(SetupError) as e:
        roles._load(str(ROOT / "scenarios" / "ebpf_cost.yaml"))
    assert str(e.value) == (
        "swarmscope controller does not run the ebpf_cost scenario: it has no locustfile "
        f"(scenarios/ebpf_cost.py) (run it with: swarmscope run {ROOT / 'scenarios' / 'ebpf_cost.yaml'})"
    )
