"""The tracer under test: the interface, its result, its scenario keys and the registry.

A *tracer under test* is the system whose exec (or other) events swarmscope checks: it runs
for one measurement window and says how many events it reported per simulated node, plus
the losses it admitted to ("Lost N events", ig's "lost N samples").

    tracer = make_tracer(cfg)            # None when cfg.tracer == "none" -> reported is null
    if tracer:
        tracer.start("w-3", [NodeKey("n1", cgroup_id=4711, comm="ss-n1")])  # returns when tracing
        ...                               # the load runs
        res = tracer.stop()               # res.per_node == {"n1": 4000}, res.lost == 0

Caveats: ``lost`` is what the tracer printed, host-wide for a tracer on one host (it cannot
say whose events it lost). ``None`` means the tracer has no way to say. A tracer whose loss
records name their node (Inspektor Gadget in the cluster: one gadget per node) also gives
``lost_by_node``.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from swarmscope.core.config import Config, Field
from swarmscope.core.errors import ConfigError, Problem

# bpftrace 0.17 prints "Lost 123 events"; ig prints {"type":"warn","message":"lost 123 samples"}.
DEFAULT_LOST_REGEX = r"(?i)\blost (?P<n>\d+) (?:events?|samples?)\b"
DEFAULT_DRAIN_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class NodeKey:
    """How a tracer's line is tied to a simulated node.

    ``cgroup_id`` is the node's cgroup v2 id (what ``bpf_get_current_cgroup_id`` returns);
    ``comm`` is the argv0/file name the node's exec storm uses, for tracers that print only
    the command name (the kernel keeps 15 characters of it).
    """

    name: str
    cgroup_id: int | None = None
    comm: str | None = None


@dataclass
class TracerResult:
    per_node: dict[str, int]  # events reported per node name (every window node present)
    lost: int | None  # sum of the tracer's "lost N" warnings; None: the tracer cannot tell
    unattributed: int  # lines that were neither an event, a loss warning nor a sentinel
    lines: int  # every line read
    warnings: list[str]  # the tracer's own warnings/errors (first ones, deduplicated)
    error: str = ""  # set when the tracer failed mid-window (the counts are then partial)
    other: int = 0  # event lines of processes outside the window's nodes (the rest of the host)
    # End-of-window sentinels the tracer dropped: they are part of ``lost``, not of any node,
    # so "reported + lost - sentinels_lost" is what to set against the kernel count.
    sentinels_lost: int = 0
    # The loss records that named a node, summed by that node (as printed, less the node's drain
    # sentinels among them; the rest of ``lost`` named none). None: its loss records name no node.
    lost_by_node: dict[str, int] | None = None
    # A drain run on every node by its probe (ig-cluster), per node: its CPUs, those with a drain
    # sentinel back in that node's stream ("seen"), the sentinels its tracer dropped ("dropped",
    # in sentinels_lost, not in lost_by_node) and when its last CPU was drained, in seconds from the
    # close ("s"). None: no such drain.
    drained: dict[str, dict[str, float]] | None = None

    @property
    def reported(self) -> int:
        return sum(self.per_node.values())


class TracerUnderTest(Protocol):
    name: str

    def start(self, window_id: str, nodes: list[NodeKey]) -> None:
        """Start tracing for a window; return only once the tracer really sees events."""
        ...

    def stop(self) -> TracerResult:
        """Flush (nudge every CPU), stop the tracer and return what it reported."""
        ...


class TracerConfig(Config):
    """The tracer-under-test options, typed (the exec storm's config class extends this one)."""

    tracer: str
    tracer_command: Any | None
    tracer_match: str | None
    tracer_json_field: str | None
    tracer_lost_regex: str
    tracer_ready_timeout_s: float
    tracer_drain_timeout_s: float
    tracer_read_rate: float | None
    tracer_stall_s: float
    tracer_pipe_bytes: int | None


# factory(cfg, sentinel): sentinel is the binary exec'ed for readiness and drain (None: default).
TracerFactory = Callable[[TracerConfig, str | None], TracerUnderTest]

# name -> factory(cfg). Adapters register themselves on import (see controller/tracers/__init__).
TRACERS: dict[str, TracerFactory] = {}
# name -> its cross-check, for the adapters that declare options of their own.
_CHECKS: dict[str, Callable[[Mapping[str, Any]], list[tuple[str, str]]]] = {}
# name -> the typed class of its own options (a Config subclass declaring their types).
TRACER_OPTIONS: dict[str, type[Config]] = {}


def register_tracer(
    name: str,
    fields: Sequence[Field] = (),
    options: type[Config] | None = None,
    check: Callable[[Mapping[str, Any]], list[tuple[str, str]]] | None = None,
) -> Callable[[TracerFactory], TracerFactory]:
    """Register an adapter: its factory, and the options it declares next to its code
    (``fields``, typed by ``options``; ``check`` runs when the scenario picks this tracer).
    Every kind with a tracer under test takes the fields through ``TRACER_FIELDS``."""

    def deco(fn: TracerFactory) -> TracerFactory:
        TRACERS[name] = fn
        TRACER_FIELDS.extend(f for f in fields if f.key not in {g.key for g in TRACER_FIELDS})
        if options is not None:
            TRACER_OPTIONS[name] = options
        if check is not None:
            _CHECKS[name] = check
        return fn

    return deco


def make_tracer(
    cfg: TracerConfig, *, sentinel: str | os.PathLike[str] | None = None
) -> TracerUnderTest | None:
    """Build the tracer the config names, or None for ``tracer: none`` (reported stays null).

    ``sentinel`` is the trivial binary exec'ed for readiness and drain (default ``/bin/true``;
    the worker's tiny static binary is faster).
    """
    import swarmscope.controller.tracers  # noqa: F401  (registers the adapters)

    kind = cfg.tracer or "none"
    if kind == "none":
        return None
    factory = TRACERS.get(kind)
    if factory is None:
        known = ", ".join(["none", *sorted(TRACERS)])
        raise ConfigError([Problem("config", "tracer", f"{kind!r} is not one of {known}")])
    return factory(cfg, os.fspath(sentinel) if sentinel is not None else None)


# What a tracer under test inherits from the controller's environment: only what finding a
# program, its locale and its temp directory need (and, for our own Python agents, where the
# package and BCC's headers are). Never SWARMSCOPE_TOKEN or anything else of ours (issue 18).
TRACER_ENV_KEEP = (
    "PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TERM",
    "PYTHONPATH", "BCC_KERNEL_SOURCE",
)  # fmt: skip


def tracer_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The explicit environment of a tracer under test: the kept variables, then ``extra``."""
    env = {k: os.environ[k] for k in TRACER_ENV_KEEP if k in os.environ}
    env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    env.update(extra or {})
    return env


def command_argv(value: Any) -> list[str]:
    """``tracer_command`` as argv: a list is taken as is, a string is split like a shell would."""
    if isinstance(value, str):
        return shlex.split(value)
    return [str(v) for v in value]


def _check_command(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as e:
            return f"cannot be split into arguments: {e}"
        return None if argv else "must not be empty"
    if isinstance(value, list) and value and all(isinstance(v, str | int | float) for v in value):
        return None
    return "must be a command line (string) or a non-empty list of arguments"


def _check_regex(value: Any) -> str | None:
    if value is None:
        return None
    try:
        rx = re.compile(value)
    except re.error as e:
        return f"is not a valid regular expression: {e}"
    if not {"cgroup", "comm", "node"} & set(rx.groupindex):
        return "needs a named group (?P<cgroup>…), (?P<comm>…) or (?P<node>…) to attribute events"
    return None


def _check_lost_regex(value: Any) -> str | None:
    if value == "":
        return None  # the tracer never reports losses: lost is null
    try:
        rx = re.compile(value)
    except re.error as e:
        return f"is not a valid regular expression: {e}"
    if "n" not in rx.groupindex and rx.groups < 1:
        return "needs a group capturing the number lost: (?P<n>\\d+)"
    return None


TRACER_FIELDS: list[Field] = [
    Field(
        "tracer",
        str,
        "none",
        "tracer under test",
        choices=("none",),  # the registry's names are added by the package (tracers/__init__.py)
    ),
    Field(
        "tracer_command",
        object,
        None,
        "the tracer's command line (string, shell-split) or argv list; presets fill it",
        check=_check_command,
        nullable=True,
    ),
    Field(
        "tracer_match",
        str,
        None,
        "regex for one event line, with a named group cgroup, comm or node that attributes it",
        check=_check_regex,
        nullable=True,
    ),
    Field(
        "tracer_json_field",
        str,
        None,
        "instead of tracer_match, for JSON lines: dotted path of the attributing field",
        nullable=True,
    ),
    Field(
        "tracer_lost_regex",
        str,
        DEFAULT_LOST_REGEX,
        'regex of the tracer\'s loss warning; group n (or the first) is the number lost; "" = none',
        check=_check_lost_regex,
    ),
    Field("tracer_ready_timeout_s", float, 60.0, "wait this long for the tracer to trace", min=0.1, max=3600),
    Field(
        "tracer_drain_timeout_s",
        float,
        DEFAULT_DRAIN_TIMEOUT_S,
        "wait this long for the end-of-window sentinels",
        min=0.1,
        max=3600,
    ),
    Field(
        "tracer_read_rate",
        float,
        None,
        "transport pressure: read the tracer's output at most this many lines/s (null: full speed)",
        min=1,
        max=1e9,
        nullable=True,
    ),
    Field(
        "tracer_stall_s",
        float,
        0.0,
        "transport pressure: stop reading the tracer's output this long once it is ready",
        min=0,
        max=3600,
    ),
    Field(
        "tracer_pipe_bytes",
        int,
        None,
        "size of the pipe the tracer writes into (null: the kernel's default, 64 KiB)",
        min=4096,
        max=1 << 30,
        nullable=True,
    ),
]


def tracer_config(**values: Any) -> TracerConfig:
    """A validated tracer config from keyword values (code and tests; runs load a scenario)."""
    from swarmscope.core.config import Schema

    cfg = Schema(TRACER_FIELDS, [tracer_cross_check], TracerConfig).load(data=values, env={})
    assert isinstance(cfg, TracerConfig)
    return cfg


def tracer_cross_check(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Schema cross-check: the generic ``command`` tracer needs a command and a way to match."""
    problems: list[tuple[str, str]] = []
    if values.get("tracer") == "command":
        if not values.get("tracer_command"):
            problems.append(("tracer_command", "is required when tracer is 'command'"))
        if not values.get("tracer_match") and not values.get("tracer_json_field"):
            problems.append(("tracer_match", "tracer 'command' needs tracer_match or tracer_json_field"))
    check = _CHECKS.get(str(values.get("tracer")))
    if check is not None:
        problems += check(values)
    if values.get("tracer_match") and values.get("tracer_json_field"):
        problems.append(("tracer_json_field", "give tracer_match or tracer_json_field, not both"))
    return problems
