"""Every scenario file that ships loads and validates with its kind's schema."""

from __future__ import annotations

import pathlib
import typing
from typing import Any

import pytest

from swarmscope.controller.tracers import TRACER_OPTIONS
from swarmscope.core.config import Field
from swarmscope.kinds import KINDS, get_kind, load_scenario
from swarmscope.targets.faults import FAULT_OPTIONS

ROOT = pathlib.Path(__file__).resolve().parent.parent
FILES = sorted((ROOT / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_shipped_scenario_is_valid(path: pathlib.Path) -> None:
    kind, cfg = load_scenario(str(path), [], env={})
    assert kind.name in KINDS and cfg.scenario == kind.name


def test_every_kind_has_a_scenario_file() -> None:
    kinds = {load_scenario(str(f), [], env={})[0].name for f in FILES}
    assert kinds == set(KINDS)


def _declared_type(f: Field) -> object:
    """The Python type a field's value has after validation (what the config class must say)."""
    base: object
    if isinstance(f.type, tuple):
        base = list[f.type[1]]  # type: ignore[valid-type]
    else:
        base = {dict: dict[str, Any], object: Any}.get(f.type, f.type)
    return base | None if f.nullable else base  # type: ignore[operator]


@pytest.mark.parametrize("name", sorted(KINDS))
def test_config_class_declares_every_field_with_its_type(name: str) -> None:
    kind = get_kind(name)
    hints = typing.get_type_hints(kind.config_cls)
    hints.pop("sources"), hints.pop("_keys")
    # Options a tracer or a fault declares next to its code are typed by its own class.
    plugins = [
        *(TRACER_OPTIONS.values() if "tracer" in kind.schema.fields else ()),
        *(FAULT_OPTIONS.values() if "fault" in kind.schema.fields else ()),
    ]
    for cls in plugins:
        hints |= {k: t for k, t in typing.get_type_hints(cls).items() if k not in ("sources", "_keys")}
    want = {k: _declared_type(f) for k, f in kind.schema.fields.items()}
    assert set(hints) == set(want), set(hints) ^ set(want)
    wrong = {k: (hints[k], t) for k, t in want.items() if hints[k] != t}
    assert wrong == {}


def test_config_is_frozen_and_typed_by_kind() -> None:
    kind, cfg = load_scenario(str(ROOT / "scenarios" / "exec_storm.yaml"), ["iterations=3"], env={})
    assert type(cfg) is kind.config_cls and cfg.iterations == 3 and cfg.sources["iterations"] == "--set"
    with pytest.raises(AttributeError, match="frozen"):
        cfg.iterations = 4
    again = kind.schema.load(data=cfg.as_dict(), env={})  # as it crosses the network to a worker
    assert again == cfg and again.replace(iterations=4).iterations == 4 and cfg.iterations == 3
    with pytest.raises(KeyError):
        cfg.replace(no_such_key=1)


def test_the_scenario_file_is_read_once_per_process(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``swarmscope controller`` validates the file, then its Locust plug-in loads it again in
    the same process: from memory, so both see the same content."""
    import swarmscope.kinds as kinds

    f = tmp_path / "s.yaml"
    f.write_text("scenario: exec_storm\niterations: 4\n")
    reads: list[str] = []
    real = kinds.read_text
    monkeypatch.setattr(kinds, "read_text", lambda p: reads.append(p) or real(p))
    kind, cfg = load_scenario(str(f), [], env={})
    f.write_text("scenario: exec_storm\niterations: 9\n")  # changed on disk after the first read
    again = kind.schema.load(file=str(f), env={}, text=kinds.scenario_text(str(f)))
    assert reads == [str(f)] and cfg.iterations == again.iterations == 4


KINDS_LIST = ", ".join(KINDS)


@pytest.mark.slow
def test_a_run_without_a_kind_is_an_error_not_an_exec_storm(tmp_path: pathlib.Path) -> None:
    """Issue 28: `swarmscope run` with no file, or a file with no `scenario:`, ran a 10-iteration
    exec storm. Now each is a configuration error naming the fix; nothing runs."""
    from helpers import run_cli

    f = tmp_path / "mine.yaml"
    f.write_text("nodes: [2]\niterations: 1\n")
    out = tmp_path / "results"
    p = run_cli("run", str(f), "--out", str(out))
    assert p.returncode == 2 and not out.exists()
    assert p.stderr == (
        f"swarmscope: 1 problem(s) in the configuration:\n  - {f}: scenario: the file names no kind: add a "
        f"line `scenario: <kind>`, or --set scenario=<kind> ({KINDS_LIST})\n"
    )
    p = run_cli("run", "--out", str(out))
    assert p.returncode == 2 and not out.exists()
    assert p.stderr == (
        "swarmscope: 1 problem(s) in the configuration:\n  - command line: scenario: no scenario file: give "
        f"one (e.g. scenarios/exec_storm.yaml), or --set scenario=<kind> ({KINDS_LIST})\n"
    )
    p = run_cli("run", str(f), "--set", "scenario=exec_storm", "--explain")  # named on the command line
    assert p.returncode == 0 and p.stdout.startswith("scenario kind exec_storm")
