"""Program parameters: declared next to each program's code, set at start-up or per window.

    from swarmscope.probes.programs.params import parse_options, startup_values
    startup_values("procstat", PARAMS)     # {"procstat.pids": None, ...} from $SWARMSCOPE_PROC_*
    parse_options(PARAMS, {"procstat.pids": "12,34"}, "OpenWindow.options")  # {"procstat.pids": [12, 34]}
    window_options({"map_update.pids": "7"}, ["map_update"], loaded)  # {"map_update": {...: [7]}}
    print(describe_program_params())       # every program, its params, env vars, defaults

Each program module declares ``PARAMS`` (:class:`swarmscope.core.config.Field`, key
``<program>.<param>``; the Field's env var is the start-up source) and ``WINDOW_PARAMS`` (the keys
its ``configure`` accepts per window; the others are start-up only). Caveats: an env var set to
blank counts as unset; every problem names the key (and, at start-up, its env var).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from typing import Any

from swarmscope.core.config import Field, _validate, coerce
from swarmscope.core.errors import ConfigError, ProbeError, Problem


def _value(f: Field, text: str) -> Any:
    """The typed, validated value of ``text`` for ``f``; ValueError with the reason otherwise."""
    v = coerce(f, text, from_text=True)
    reasons = _validate(f, v)
    if reasons:
        raise ValueError("; ".join(reasons))
    return v


def startup_values(
    program: str, fields: Iterable[Field], env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Every param's start-up value: its env var when set (and not blank), else its default."""
    env = os.environ if env is None else env
    out: dict[str, Any] = {}
    for f in fields:
        text = env.get(f.env_var, "")
        if not text.strip():
            out[f.key] = f.default
            continue
        try:
            out[f.key] = _value(f, text)
        except ValueError as e:
            raise ProbeError(f"{program}: ${f.env_var} ({f.key}): {e}") from e
    return out


def parse_options(fields: Iterable[Field], raw: Mapping[str, str], source: str) -> dict[str, Any]:
    """Typed values of the ``raw`` text options; ConfigError naming every bad key."""
    by_key = {f.key: f for f in fields}
    out: dict[str, Any] = {}
    problems: list[Problem] = []
    for key, text in raw.items():
        f = by_key.get(key)
        if f is None:
            problems.append(Problem(source, key, _unknown(key, by_key)))
            continue
        try:
            out[key] = _value(f, text)
        except ValueError as e:
            problems.append(Problem(source, key, str(e)))
    if problems:
        raise ConfigError(problems)
    return out


def _unknown(key: str, known: Iterable[str]) -> str:
    names = sorted(known)
    # Compare the param part only: every key of a program shares its "<program>." prefix.
    by_param = {n.rsplit(".", 1)[-1]: n for n in names}
    hint = difflib.get_close_matches(key.rsplit(".", 1)[-1], list(by_param), n=1, cutoff=0.6)
    return "unknown option" + (
        f" (did you mean {by_param[hint[0]]!r}?)" if hint else f" (known: {', '.join(names) or 'none'})"
    )


def window_options(
    options: Mapping[str, str], programs: Iterable[str], loaded: Mapping[str, object]
) -> dict[str, dict[str, Any]]:
    """One window's options, checked and typed, by program: ``{"procstat": {"procstat.pids": [7]}}``.

    A key must name a program of the closed registry that this window reads, that is loaded and
    has ``configure``, and one of its ``WINDOW_PARAMS``. Raises ConfigError listing every problem.
    """
    from swarmscope.probes.programs.base import PROGRAMS, program_params, window_params

    source = "OpenWindow.options"
    reading = set(programs)
    problems: list[Problem] = []
    raw: dict[str, dict[str, str]] = {}
    for key, text in options.items():
        prog = key.split(".", 1)[0]
        if prog not in PROGRAMS:
            problems.append(Problem(source, key, f"unknown program {prog!r} (known: {', '.join(PROGRAMS)})"))
        elif prog not in reading:
            problems.append(Problem(source, key, f"program {prog} is not read in this window"))
        elif key in (envs := {f.key: f.env_var for f in program_params(prog)}) and key not in window_params(
            prog
        ):
            problems.append(Problem(source, key, f"start-up only (set ${envs[key]} when starting the probe)"))
        elif getattr(loaded.get(prog), "configure", None) is None:
            problems.append(Problem(source, key, f"program {prog} takes no per-window options on this probe"))
        else:
            raw.setdefault(prog, {})[key] = text  # unknown keys are named by parse_options
    out: dict[str, dict[str, Any]] = {}
    for prog, opts in raw.items():
        fields = [f for f in program_params(prog) if f.key in window_params(prog)]
        try:
            out[prog] = parse_options(fields, opts, source)
        except ConfigError as e:
            problems += e.problems
    if problems:
        raise ConfigError(sorted(problems, key=lambda p: p.key))  # map order is not the sender's
    return out


def describe_program_params() -> str:
    """Every registered program with its params: key, type, default, env var, scope, help."""
    from swarmscope.probes.programs.base import DESCRIPTIONS, PROGRAMS, program_params, window_params

    lines: list[str] = []
    for name in PROGRAMS:
        lines.append(f"{name}: {DESCRIPTIONS.get(name, '')}")
        per_window = window_params(name)
        for f in program_params(name):
            typ = f"list of {f.type[1].__name__}" if isinstance(f.type, tuple) else f.type.__name__
            scope = "per window" if f.key in per_window else "start-up"
            lines.append(f"  {f.key} ({typ}, default {f.default!r}, ${f.env_var}, {scope}): {f.help}")
    return "\n".join(lines)
