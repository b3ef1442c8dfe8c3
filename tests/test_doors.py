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


@pytest.mark.slow
def test_ss_options_are_listed_by_explain_not_by_locusts_help() -> None:
    """Locust answers --help before it imports the locustfile (docs/doors.md quotes the code):
    its help has no --ss-* option, and `swarmscope run <kind>.yaml --explain` lists every key.
    Should Locust list them one day, this fails and the page is to be revisited."""
    import subprocess
    import sys

    from swarmscope.kinds import get_kind

    bin_dir = pathlib.Path(sys.executable).parent
    help_text = subprocess.run(
        [str(bin_dir / "locust"), "-f", "scenarios/exec_storm.py", "--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    assert "--master-bind-port" in help_text and "--ss-" not in help_text
    explain = subprocess.run(
        [str(bin_dir / "swarmscope"), "run", "scenarios/exec_storm.yaml", "--explain"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert explain.returncode == 0, explain.stderr[-2000:]
    lines = explain.stdout.splitlines()
    listed = {line.split()[0] for line in lines if " = " in line and not line[0].isspace()}
    assert listed == set(get_kind("exec_storm").schema.fields)
