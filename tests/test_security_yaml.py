"""Issue 27, finding 5: a scenario file cannot make loading slow or crash it. A 700-byte alias
bomb and 10 kB of nested ``[`` are each one ConfigError naming the bound, within a second,
through the same load as ``swarmscope run --explain``; a file with a few aliases still loads."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ROOT

from swarmscope.core.errors import ConfigError
from swarmscope.kinds import get_kind

BOMB = "\n".join(
    f"{k}: &{k} [{','.join([f'*{p}'] * 9) if p else ','.join(['x'] * 9)}]"
    for p, k in zip(["", "a", "b", "c", "d", "e", "f"], "abcdefg", strict=True)
)


def load_error(tmp_path: Path, text: str) -> str:
    f = tmp_path / "s.yaml"
    f.write_text(text)
    schema = get_kind("exec_storm").schema
    schema.load(env={})  # imports done before the clock starts
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as ei:
        schema.load(file=f, env={})
    assert time.monotonic() - t0 < 1.0
    return str(ei.value)


def test_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    assert len(BOMB) < 700
    assert "expands to more than 100000 values" in load_error(tmp_path, BOMB)


def test_many_aliases_are_refused(tmp_path: Path) -> None:
    text = "a: &a 1\nb: [" + ",".join(["*a"] * 65) + "]\n"
    assert "more than 64 aliases" in load_error(tmp_path, text)


def test_deep_nesting_is_refused_without_recursion_error(tmp_path: Path) -> None:
    assert "nested deeper than 32 levels" in load_error(tmp_path, "a: " + "[" * 5000 + "]" * 5000)


def test_a_few_aliases_still_load(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("base: &w 3\nwindow_s: *w\n")
    with pytest.raises(ConfigError) as ei:  # base is not a key: the aliases themselves are fine
        get_kind("exec_storm").schema.load(file=f, env={})
    assert "base: unknown key" in str(ei.value) and "aliases (" not in str(ei.value)


def test_explain_on_a_bomb_is_one_clear_error(tmp_path: Path) -> None:
    f = tmp_path / "bomb.yaml"
    f.write_text(BOMB)
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "swarmscope", "run", str(f), "--explain"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert "expands to more than 100000 values" in r.stderr + r.stdout
    assert time.monotonic() - t0 < 10
