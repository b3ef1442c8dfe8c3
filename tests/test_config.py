"""Configuration precedence and validation (defaults < file < env < --set; all errors at once)."""

import pathlib

import pytest

from swarmscope.core.config import Field, Schema, list_of
from swarmscope.core.errors import ConfigError

SCHEMA = Schema(
    [
        Field("iterations", int, 10, "windows per point", min=1),
        Field("nodes", list_of(int), [2], "node counts", min=1, max=64),
        Field("burst_s", float, 1.0, "burst length", min=0.01, max=60),
        Field("tracer.kind", str, "none", "tracer", choices=("none", "command")),
    ]
)


def test_precedence(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("iterations: 5\nnodes: [3, 4]\nburst_s: 2\n")
    cfg = SCHEMA.load(file=f, env={"SWARMSCOPE_NODES": "7", "SWARMSCOPE_BURST_S": "3"}, sets=["nodes=2,5"])
    assert cfg.iterations == 5 and cfg.sources["iterations"] == f"{f}:1"
    assert cfg.burst_s == 3.0 and cfg.sources["burst_s"] == "env SWARMSCOPE_BURST_S"
    assert cfg.nodes == [2, 5] and cfg.sources["nodes"] == "--set"
    assert cfg.as_dict()["tracer.kind"] == "none" and cfg.sources["tracer.kind"] == "default"


def test_every_problem_is_listed(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("iterations: 0\nnodes: [2, x]\ntracer: {kind: dtrace}\nburts_s: 1\n")
    with pytest.raises(ConfigError) as ei:
        SCHEMA.load(file=f, env={}, sets=["burst_s=fast"])
    keys = {(p.key, p.source) for p in ei.value.problems}
    assert ("iterations", f"{f}:1") in keys  # file:line of the key
    assert ("nodes", f"{f}:2") in keys
    assert ("tracer.kind", f"{f}:3") in keys
    assert ("burts_s", f"{f}:4") in keys
    assert ("burst_s", "--set") in keys
    assert len(ei.value.problems) == 5
    assert "did you mean 'burst_s'" in str(ei.value)


def test_not_a_mapping(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "list.yaml"
    f.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must be a YAML mapping"):
        SCHEMA.load(file=f, env={})


@pytest.mark.slow
def test_a_problem_names_the_option_it_came_from() -> None:
    """Issue 28: an error in `--ss-iterations` (locust -f) or `--tracer` (tracer-check) was
    labelled `--set`; each names its own option now, and plain --set keys stay `--set`."""
    import subprocess

    from helpers import BIN, ROOT, run_cli

    cmd = [str(BIN / "locust"), "-f", "scenarios/exec_storm.py", "--headless", "-t", "2s"]
    p = subprocess.run([*cmd, "--ss-iterations", "x"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    said = (
        "swarmscope: 1 problem(s) in the configuration:\n  - --ss-iterations: iterations: must be an integer"
    )
    assert f"{said}, not 'x'\n" in p.stderr
    p = run_cli("tracer-check", "--tracer", "nope", "--set", "tracer_stall_s=x")
    assert p.returncode == 2
    choices = "'none', 'bpftrace', 'command', 'ig', 'ig-cluster', 'prometheus', 'stream'"
    assert p.stderr == (
        "swarmscope: 2 problem(s) in the configuration:\n"
        "  - --set: tracer_stall_s: must be a number, not 'x'\n"
        f"  - --tracer: tracer: 'nope' is not one of {choices}\n"
    )
