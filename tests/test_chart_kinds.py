"""The chart's scenario values are kind-scoped: a kind switch renders a config the kind accepts.

    .venv/bin/python -m pytest tests/test_chart_kinds.py -v      # helm template only: seconds

The bug (issue 16): the chart's default scenario kept the exec storm's options (iterations,
burst_s, concurrency) in ``scenario.config``, so ``helm upgrade --reuse-values --set
scenario.config.scenario=ingress_flood`` handed them to an ingress flood, whose controller then
crash-looped on "unknown key". Now each kind's options sit in ``scenario.<kind>`` and only the
chosen kind's are rendered. The rendered scenario.yaml is loaded here with the kind's real
schema (the controller's own check at start). The real ``--reuse-values`` upgrade against an
API server is in tests/test_chart.py (test_reuse_values_switches_the_kind).
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import ROOT, Tools, find_tools, helm_env

from swarmscope.kinds import get_kind

CHART = ROOT / "charts" / "swarmscope"


@pytest.fixture(scope="module")
def tools() -> Tools:
    return find_tools(need=("helm",))  # rendering needs helm only


def _template(tools: Tools, tmp: Path, *sets: str) -> subprocess.CompletedProcess[str]:
    args = list(itertools.chain.from_iterable(("--set", s) for s in sets))
    return subprocess.run(
        [str(tools.helm), "template", "t", str(CHART), "-n", "t", *args],
        env=helm_env(tmp), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _scenario(tools: Tools, tmp: Path, *sets: str) -> tuple[str, dict[str, Any]]:
    r = _template(tools, tmp, *sets)
    assert r.returncode == 0, r.stderr
    (cm,) = [
        d
        for d in yaml.safe_load_all(r.stdout)
        if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == "t-swarmscope-scenario"
    ]
    text = cm["data"]["scenario.yaml"]
    return text, dict(yaml.safe_load(text))


def test_generated_parts_follow_the_code() -> None:
    """The schema's and the template's option lists are the kinds' fields (tools/chart_kinds.py)."""
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "chart_kinds.py"), "--check"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow
def test_kind_switch_leaves_the_exec_storm_options_behind(tools: Tools, tmp_path: Path) -> None:
    text, cfg = _scenario(tools, tmp_path)
    assert cfg == {"scenario": "exec_storm", "out": "/var/lib/swarmscope/results",
                   "iterations": 10, "burst_s": 1, "concurrency": 2}  # fmt: skip
    get_kind("exec_storm").schema.load(file="scenario.yaml", text=text)
    # What --reuse-values gives: the chart's defaults plus the one --set that switches the kind.
    text, cfg = _scenario(tools, tmp_path, "scenario.config.scenario=ingress_flood", "target.enabled=true",
                          "scenario.ingress_flood.steps={3}")  # fmt: skip
    assert cfg == {
        "scenario": "ingress_flood", "out": "/var/lib/swarmscope/results", "steps": [3],
        "host": "http://t-swarmscope-target:8080", "allow_hosts": ["t-swarmscope-target"],
        "fault_namespace": "t",
        "fault_selector": "app.kubernetes.io/name=swarmscope,app.kubernetes.io/instance=t,"
        "app.kubernetes.io/component=target",
    }  # fmt: skip
    loaded = get_kind("ingress_flood").schema.load(file="scenario.yaml", text=text)  # no unknown key
    assert loaded.steps == [3.0]
    # ... and back: the ingress flood's options stay in their section.
    text, cfg = _scenario(
        tools, tmp_path, "scenario.ingress_flood.steps={3}", "scenario.exec_storm.iterations=4"
    )
    assert cfg["iterations"] == 4 and "steps" not in cfg
    get_kind("exec_storm").schema.load(file="scenario.yaml", text=text)


def test_a_float_given_with_set_renders_and_loads(tools: Tools, tmp_path: Path) -> None:
    """helm's --set types integers only: burst_s=0.3 reaches the schema as the string "0.3".
    The chart takes it (its schema: a number or a decimal string) and the controller's loader
    reads it as 0.3; a string that is no number is refused at render (MISPLACED below)."""
    text, cfg = _scenario(tools, tmp_path, "scenario.exec_storm.burst_s=0.3")
    assert cfg["burst_s"] == "0.3"
    assert get_kind("exec_storm").schema.load(file="scenario.yaml", text=text).burst_s == 0.3


MISPLACED = [
    (
        ["scenario.config.iterations=3"],
        "scenario.config.iterations is an option of the exec_storm scenario: "
        "set it as scenario.exec_storm.iterations",
    ),
    (
        ["scenario.config.scenario=ingress_flood", "scenario.config.burst_s=1"],
        "scenario.config.burst_s is not an option of the ingress_flood scenario (it is one of "
        "exec_storm's: under scenario.exec_storm): remove it",
    ),
    (
        ["scenario.config.bogus=1"],
        "scenario.config.bogus is not an option of the exec_storm scenario: remove it",
    ),
    # Every problem at once.
    (
        ["scenario.config.fault=kill-pod", "scenario.config.iterations=3"],
        "scenario.config.fault is not an option of the exec_storm scenario (it is one of ingress_flood's: "
        "under scenario.ingress_flood): remove it; scenario.config.iterations is an option",
    ),
    # The schema: a kind's section takes that kind's options only, with their types.
    (["scenario.ingress_flood.iterations=3"], "at '/scenario/ingress_flood': additional properties"),
    (["scenario.exec_storm.iterations=many"], "at '/scenario/exec_storm/iterations': got string"),
    (["scenario.exec_storm.burst_s=1s"], "at '/scenario/exec_storm/burst_s': '1s' does not match pattern"),
    (["scenario.ingress_flood.fault=kill-it"], "at '/scenario/ingress_flood/fault': value must be one of"),
]


@pytest.mark.parametrize(("sets", "message"), MISPLACED, ids=lambda x: str(x))
def test_misplaced_options_fail_at_render(
    tools: Tools, tmp_path: Path, sets: list[str], message: str
) -> None:
    r = _template(tools, tmp_path, *sets)
    assert r.returncode != 0, f"{sets} was accepted"
    assert message in r.stderr, r.stderr
