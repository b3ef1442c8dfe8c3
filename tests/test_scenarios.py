"""Every scenario file that ships loads and validates with its kind's schema."""

from __future__ import annotations

import pathlib

import pytest

from swarmscope.kinds import KINDS, load_scenario

ROOT = pathlib.Path(__file__).resolve().parent.parent
FILES = sorted((ROOT / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_shipped_scenario_is_valid(path: pathlib.Path) -> None:
    kind, cfg = load_scenario(str(path), [], env={})
    assert kind.name in KINDS and cfg["scenario"] == kind.name


def test_every_kind_has_a_scenario_file() -> None:
    kinds = {load_scenario(str(f), [], env={})[0].name for f in FILES}
    assert kinds == set(KINDS)
