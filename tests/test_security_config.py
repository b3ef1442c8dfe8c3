"""Issue 18, findings 8 and 11 (config): NaN and infinity pass no bound, every number and list
has a maximum.

NaN compares false with every bound, so before the fix ``pause_s=nan`` (and ``inf`` wherever
no maximum was set) was accepted. Every numeric field of every kind is tried here, from
``--set``, the environment and a YAML file (``.nan`` / ``.inf``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmscope.core.config import MAX_LIST_ITEMS, Field
from swarmscope.core.errors import ConfigError
from swarmscope.kinds import KINDS, get_kind, load_scenario

NOT_FINITE = ("nan", "NaN", "inf", "-inf", "Infinity", "1e999")


def _numeric(kind: str) -> list[Field]:
    out = []
    for f in get_kind(kind).schema.fields.values():
        t = f.type[1] if isinstance(f.type, tuple) else f.type
        if t in (int, float):
            out.append(f)
    return out


ALL = sorted({(k, f.key) for k in KINDS for f in _numeric(k)})


def test_pause_s_nan_is_refused() -> None:
    with pytest.raises(ConfigError) as ei:
        get_kind("exec_storm").schema.load(env={}, sets=["pause_s=nan"])
    got = [(p.key, p.reason) for p in ei.value.problems]
    assert got == [("pause_s", "must be a finite number, not 'nan'")]


@pytest.mark.parametrize(("kind", "key"), ALL)
def test_not_finite_refused_everywhere(kind: str, key: str, tmp_path: Path) -> None:
    schema = get_kind(kind).schema
    f = schema.fields[key]
    for text in NOT_FINITE:
        with pytest.raises(ConfigError) as ei:
            schema.load(env={}, sets=[f"{key}={text}"])
        assert [p.key for p in ei.value.problems] == [key], (text, ei.value.problems)
        with pytest.raises(ConfigError) as ei:
            schema.load(env={f.env_var: text}, sets=[])
        assert [p.key for p in ei.value.problems] == [key]
    for yaml_value in (".nan", ".inf", "-.inf", "[.nan]"):
        p = tmp_path / "s.yaml"
        p.write_text(f"scenario: {kind}\n{key}: {yaml_value}\n")
        with pytest.raises(ConfigError) as ei:
            load_scenario(str(p), [], env={})
        assert [pr.key for pr in ei.value.problems] == [key], (yaml_value, ei.value.problems)


@pytest.mark.parametrize(("kind", "key"), ALL)
def test_every_number_has_finite_bounds(kind: str, key: str) -> None:
    f = get_kind(kind).schema.fields[key]
    assert f.min is not None and f.max is not None, f"{kind}.{key} needs a min and a max"
    schema = get_kind(kind).schema
    with pytest.raises(ConfigError) as ei:
        schema.load(env={}, sets=[f"{key}={f.max * 10 + 1:.0f}"])
    assert [p.key for p in ei.value.problems] == [key]


def test_named_maxima() -> None:
    # The ones the review named: page_size, batch_size, tracer timeouts, fault_at.
    fields = {k: get_kind(k).schema.fields for k in KINDS}
    assert fields["neighbor_writes"]["page_size"].max == 1_000_000
    assert fields["neighbor_writes"]["batch_size"].max == 1_000_000
    assert fields["exec_storm"]["tracer_ready_timeout_s"].max == 3600
    assert fields["exec_storm"]["tracer_drain_timeout_s"].max == 3600
    assert fields["ingress_flood"]["fault_at"].max == 86400


@pytest.mark.parametrize(("kind", "key"), [("exec_storm", "nodes"), ("ingress_flood", "steps"),
                                           ("neighbor_writes", "neighbors")])  # fmt: skip
def test_number_of_points_and_steps_is_capped(kind: str, key: str) -> None:
    schema = get_kind(kind).schema
    many = ",".join(["2"] * (MAX_LIST_ITEMS + 1))
    with pytest.raises(ConfigError) as ei:
        schema.load(env={}, sets=[f"{key}={many}"])
    assert [(p.key, p.reason) for p in ei.value.problems] == [
        (key, f"has {MAX_LIST_ITEMS + 1} items, more than the maximum {MAX_LIST_ITEMS}")
    ]
    schema.load(env={}, sets=[f"{key}={','.join(['2'] * 3)}"])
