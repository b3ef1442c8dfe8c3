"""The registry of scenario kinds: every kind registers here, in one place, by name.

    kind = get_kind("exec_storm")
    kind, cfg = load_scenario("scenarios/exec_storm.yaml", ["nodes=2,5"])   # read once, validated

A kind is a package of its own (``swarmscope.kinds.<name>``) with a :class:`~swarmscope.kinds.base.Kind`
subclass called ``KIND``; it is imported only when asked for, so ``swarmscope --help`` stays
light. The scenario file names its kind (``scenario: exec_storm``); ``--set scenario=`` and
``$SWARMSCOPE_SCENARIO`` may name it too (the usual precedence).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import Any

from swarmscope.core.config import read_text
from swarmscope.core.errors import ConfigError, Problem

# name -> module defining KIND. Add a line when a new kind ships.
KINDS: dict[str, str] = {
    "exec_storm": "swarmscope.kinds.exec_storm",
    "ingress_flood": "swarmscope.kinds.ingress_flood",
    "neighbor_writes": "swarmscope.kinds.neighbor_writes",
    "flow_storm": "swarmscope.kinds.flow_storm",
    "ebpf_cost": "swarmscope.kinds.ebpf_cost",
}


def get_kind(name: str, source: str = "scenario") -> Any:
    """The registered kind ``name`` (a swarmscope.kinds.base.Kind)."""
    if name not in KINDS:
        raise ConfigError(
            [Problem(source, "scenario", f"unknown scenario kind {name!r}; known: {', '.join(KINDS)}")]
        )
    return importlib.import_module(KINDS[name]).KIND


def register_all_renderers() -> None:
    """Every kind's report section renderers, from the code (``swarmscope report``)."""
    for name in KINDS:
        get_kind(name).register_renderers()


def kind_name(
    path: str | None, sets: list[str], env: Mapping[str, str] | None = None, text: str | None = None
) -> str:
    """The kind a run will use: --set scenario=, else $SWARMSCOPE_SCENARIO, else the file's
    (``text``: its content, when read already)."""
    import yaml

    from swarmscope.core import yamlsafe

    for s in reversed(sets):
        if s.startswith("scenario="):
            return s.split("=", 1)[1]
    from_env = (env if env is not None else os.environ).get("SWARMSCOPE_SCENARIO", "")
    if from_env:
        return from_env
    if path:
        try:
            # Bounded (aliases, depth): a bomb is the schema load's located error, not a hang here.
            raw = yamlsafe.load(text if text is not None else read_text(path)) or {}
        except (OSError, yaml.YAMLError):
            return "exec_storm"  # any kind's schema load reports the read/parse problem, located
        if isinstance(raw, dict) and raw.get("scenario"):
            return str(raw["scenario"])
        return _no_kind(path, "the file names no kind: add a line `scenario: <kind>`")
    return _no_kind("command line", "no scenario file: give one (e.g. scenarios/exec_storm.yaml)")


def _no_kind(source: str, what: str) -> str:
    """A run must name its kind: no default, so a forgotten line is not a silent exec storm."""
    from swarmscope.core.errors import ConfigError, Problem

    kinds = ", ".join(KINDS)
    raise ConfigError([Problem(source, "scenario", f"{what}, or --set scenario=<kind> ({kinds})")])


# path -> content: a process reads its scenario file once (``swarmscope controller`` validates it,
# then the Locust plug-in in the same process loads it again from here, not from the disk).
_TEXTS: dict[str, str] = {}


def scenario_text(path: str) -> str | None:
    """The scenario file's content, read once per process (None: unreadable; the schema load
    then reports the problem with its location)."""
    if path not in _TEXTS:
        try:
            _TEXTS[path] = read_text(path)
        except OSError:
            return None
    return _TEXTS[path]


def load_scenario(path: str | None, sets: list[str], env: Mapping[str, str] | None = None) -> tuple[Any, Any]:
    """Read the scenario file once: its kind, then its values through that kind's schema."""
    text = scenario_text(path) if path else None
    kind = get_kind(kind_name(path, sets, env, text), path or "scenario")
    return kind, kind.schema.load(file=path, env=env, sets=sets, text=text)
