"""Configuration: one schema per scenario, one written-down precedence, every error at once.

Precedence, lowest to highest::

    field defaults  <  scenario file (YAML)  <  SWARMSCOPE_* environment  <  CLI (--set KEY=VALUE)

Each :class:`Field` declares its key, type, default, help and environment variable in one
place (the env var is ``SWARMSCOPE_`` + the key upper-cased with dots as ``_``, unless given).
Nested YAML maps are flattened to dotted keys (``tracer: {kind: command}`` is ``tracer.kind``).

    schema = Schema([Field("iterations", int, 10, "windows per point", min=1)])
    cfg = schema.load(file="scenarios/exec_storm.yaml", sets=["iterations=30"])
    cfg.iterations  # 30

Validation collects every problem (file, key, reason) and raises one :class:`ConfigError`
listing them all, like k6's ``Validate() []error``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from swarmscope.core.errors import ConfigError, Problem

ENV_PREFIX = "SWARMSCOPE_"
# Longest list a field takes unless it says otherwise: a sweep of more points or steps than
# this is a typo, and each item costs windows, processes or memory.
MAX_LIST_ITEMS = 1000

# Field types: a Python type, or ("list", item_type) for lists.
ListOf = tuple[str, type]


def list_of(item: type) -> ListOf:
    return ("list", item)


@dataclass(frozen=True)
class Field:
    key: str
    type: type | ListOf
    default: Any
    help: str
    env: str | None = None
    choices: tuple[Any, ...] | None = None
    min: float | None = None
    max: float | None = None
    check: Callable[[Any], str | None] | None = None  # returns a reason when invalid
    nullable: bool = False
    max_items: int = MAX_LIST_ITEMS  # list fields: at most this many items

    @property
    def env_var(self) -> str:
        return self.env or ENV_PREFIX + self.key.upper().replace(".", "_").replace("-", "_")


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _coerce_scalar(typ: type, value: Any, from_text: bool) -> Any:
    if value is None:
        raise ValueError("is empty")
    if typ is bool:
        if isinstance(value, bool):
            return value
        if from_text and str(value).strip().lower() in _TRUE | _FALSE:
            return str(value).strip().lower() in _TRUE
        raise ValueError(f"must be true or false, not {_short(value)}")
    if typ is int:
        if isinstance(value, bool):
            raise ValueError(f"must be an integer, not {_short(value)}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if from_text or isinstance(value, str):
            try:
                return int(str(value).strip())
            except ValueError:
                pass
        raise ValueError(f"must be an integer, not {_short(value)}")
    if typ is float:
        if isinstance(value, bool):
            raise ValueError(f"must be a number, not {_short(value)}")
        out: float | None = None
        try:
            if isinstance(value, int | float):
                out = float(value)
            elif from_text or isinstance(value, str):
                out = float(str(value).strip())
        except (ValueError, OverflowError):
            out = None
        if out is None:
            raise ValueError(f"must be a number, not {_short(value)}")
        # NaN compares false with every bound (so min/max would let it through) and infinity
        # is no duration or rate: neither is a number a scenario may use.
        if not math.isfinite(out):
            raise ValueError(f"must be a finite number, not {_short(value)}")
        return out
    if typ is str:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return str(value)
        raise ValueError(f"must be a string, not {_short(value)}")
    if typ is dict:
        if isinstance(value, dict):
            return dict(value)
        raise ValueError(f"must be a mapping, not {_short(value)}")
    if typ is object:  # any YAML value (e.g. "a string or a list"); the field's check validates it
        return value
    raise TypeError(f"unsupported field type {typ}")


def _short(value: Any, limit: int = 60) -> str:
    """A value for an error message, cut short (a fuzzed or pasted value can be huge)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def coerce(f: Field, value: Any, from_text: bool = False) -> Any:
    """Convert ``value`` to the field's type; raise ValueError with a reason."""
    if value is None or (from_text and f.nullable and str(value).strip().lower() in {"null", "none", ""}):
        if f.nullable:
            return None
        raise ValueError("must not be empty")
    if isinstance(f.type, tuple):
        item = f.type[1]
        if from_text and isinstance(value, str):
            parts = [p for p in (s.strip() for s in value.split(",")) if p]
        elif isinstance(value, list | tuple):
            parts = list(value)
        else:
            parts = [value]
        out = []
        for i, p in enumerate(parts):
            try:
                out.append(_coerce_scalar(item, p, from_text))
            except ValueError as e:
                raise ValueError(f"item {i}: {e}") from None
        return out
    return _coerce_scalar(f.type, value, from_text)


def _validate(f: Field, value: Any) -> list[str]:
    if value is None:
        return []
    reasons: list[str] = []
    items = value if isinstance(f.type, tuple) else [value]
    if isinstance(f.type, tuple) and not items:
        reasons.append("must not be an empty list")
    if isinstance(f.type, tuple) and len(items) > f.max_items:
        return [f"has {len(items)} items, more than the maximum {f.max_items}"]
    for v in items:
        if isinstance(v, float) and not math.isfinite(v):
            reasons.append(f"{v!r} is not a finite number")  # a default or an object field's value
            continue
        if f.choices is not None and v not in f.choices:
            reasons.append(f"{v!r} is not one of {', '.join(map(repr, f.choices))}")
        if f.min is not None and isinstance(v, int | float) and v < f.min:
            reasons.append(f"{v!r} is below the minimum {f.min:g}")
        if f.max is not None and isinstance(v, int | float) and v > f.max:
            reasons.append(f"{v!r} is above the maximum {f.max:g}")
    if f.check is not None and not reasons:
        r = f.check(value)
        if r:
            reasons.append(r)
    return reasons


def host_port(v: Any) -> str | None:
    """Field check: ``host:port`` (host may be empty or an IP or a name; port 0-65535)."""
    host, sep, port = str(v).rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        return f"must be host:port with a port 0-65535, not {_short(v)}"
    if any(c.isspace() for c in host):
        return f"the host must not contain spaces, not {_short(v)}"
    return None


def flatten(data: Mapping[str, Any], prefix: str = "", known: Iterable[str] = ()) -> dict[str, Any]:
    """Flatten nested maps to dotted keys, except where a key is itself a known field."""
    known_set = set(known)
    out: dict[str, Any] = {}
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and key not in known_set:
            out.update(flatten(v, key + ".", known_set))
        else:
            out[key] = v
    return out


class Config:
    """A validated configuration: frozen, read by attribute (``cfg.iterations``).

    Which keys exist is the schema's; a subclass only declares the attributes' types for mypy
    (``iterations: int``), and tests keep each kind's class equal to its schema. ``sources``
    says where each value came from (for ``--explain``). A config crosses the network as
    :meth:`as_dict` and is validated again on the other side (``schema.load(data=..., env={})``).
    """

    sources: dict[str, str]
    _keys: tuple[str, ...]

    def __init__(self, values: Mapping[str, Any], sources: Mapping[str, str] | None = None):
        object.__setattr__(self, "_keys", tuple(values))
        object.__setattr__(self, "sources", dict(sources or {}))
        for k, v in values.items():
            object.__setattr__(self, k, v)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"config is frozen: cannot set {key!r} (use .replace)")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"config is frozen: cannot delete {key!r}")

    def as_dict(self) -> dict[str, Any]:
        """The values by key (what a report stores and what the master sends to workers)."""
        return {k: getattr(self, k) for k in self._keys}

    def replace(self, **changes: Any) -> Any:
        """A copy with ``changes`` (keys must exist; no validation: for code and tests)."""
        unknown = set(changes) - set(self._keys)
        if unknown:
            raise KeyError(f"not config keys: {', '.join(sorted(unknown))}")
        srcs = {**self.sources, **dict.fromkeys(changes, "replace")}
        return type(self)({**self.as_dict(), **changes}, srcs)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.as_dict() == other.as_dict()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]  # values may be lists

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items())
        return f"{type(self).__name__}({body})"


class Schema:
    """A set of fields; :meth:`load` applies the precedence and validates everything."""

    def __init__(
        self,
        fields: Iterable[Field],
        cross_checks: Iterable[Callable[[dict[str, Any]], list[tuple[str, str]]]] = (),
        cls: type[Config] = Config,
    ):
        self.fields: dict[str, Field] = {}
        for f in fields:
            if f.key in self.fields:
                raise ValueError(f"duplicate field {f.key}")
            if f.key in _RESERVED:
                raise ValueError(f"field {f.key} shadows a Config attribute")
            self.fields[f.key] = f
        self.cross_checks = list(cross_checks)
        self.cls = cls

    def extend(self, fields: Iterable[Field]) -> Schema:
        return Schema([*self.fields.values(), *fields], self.cross_checks, self.cls)

    def load(
        self,
        file: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        sets: Iterable[str] = (),
        data: Mapping[str, Any] | None = None,
        text: str | None = None,
        set_labels: Mapping[str, str] | None = None,
    ) -> Config:
        """``text`` is the file's content when the caller has read it already (the file is
        read once per run); ``file`` still names it in every problem's location. ``set_labels``
        names the option a ``sets`` key came from (``{"iterations": "--ss-iterations"}``), so a
        problem and ``--explain`` name it instead of ``--set``."""
        problems: list[Problem] = []
        values = {k: f.default for k, f in self.fields.items()}
        sources = dict.fromkeys(self.fields, "default")

        layers: list[tuple[str, dict[str, Any], bool]] = []
        key_lines: dict[str, int] = {}
        if file is not None:
            # Imported here: the probe on every node uses Field but never reads YAML (~1.4 MiB).
            import yaml

            from swarmscope.core import yamlsafe

            path = os.fspath(file)
            try:
                if text is None:
                    text = read_text(path)
                raw = yamlsafe.load(text)  # aliases, depth and expansion bounded
            except OSError as e:
                raise ConfigError([Problem(path, "-", f"cannot read: {e.strerror}")]) from e
            except yaml.YAMLError as e:
                mark = getattr(e, "problem_mark", None)
                where = f"{path}:{mark.line + 1}" if mark else path
                raise ConfigError([Problem(where, "-", f"not valid YAML: {e}")]) from e
            if raw is None:
                raw = {}
            if not isinstance(raw, dict):
                raise ConfigError([Problem(path, "-", "must be a YAML mapping of keys to values")])
            layers.append((path, flatten(raw, known=self.fields), False))
            key_lines = _key_lines(text, self.fields)
        if data:
            layers.append(("arguments", flatten(data, known=self.fields), False))
        env = os.environ if env is None else env
        env_layer = {k: env[f.env_var] for k, f in self.fields.items() if f.env_var in env}
        if env_layer:
            layers.append(("env", env_layer, True))
        set_layer: dict[str, Any] = {}
        for s in sets:
            if "=" not in s:
                problems.append(Problem("--set", s, "must be KEY=VALUE"))
                continue
            k, v = s.split("=", 1)
            set_layer[k.strip()] = v
        if set_layer:
            layers.append(("--set", set_layer, True))

        for source, layer, from_text in layers:
            for key, raw_value in layer.items():
                f = self.fields.get(key)
                src = f"env {f.env_var}" if (source == "env" and f) else source
                if source == "--set" and set_labels:
                    src = set_labels.get(key, src)
                if key in key_lines and source == os.fspath(file or ""):
                    src = f"{source}:{key_lines[key]}"  # file:line, where the key is written
                if f is None:
                    hint = _closest(key, self.fields)
                    problems.append(
                        Problem(src, key, "unknown key" + (f" (did you mean {hint!r}?)" if hint else ""))
                    )
                    continue
                try:
                    values[key] = coerce(f, raw_value, from_text)
                    sources[key] = src
                except ValueError as e:
                    problems.append(Problem(src, key, str(e)))

        for key, f in self.fields.items():
            for reason in _validate(f, values[key]):
                problems.append(Problem(sources[key], key, reason))
        if not problems:
            for check in self.cross_checks:
                for key, reason in check(values):
                    problems.append(Problem(sources.get(key, "config"), key, reason))
        if problems:
            raise ConfigError(problems)
        return self.cls(values, sources)

    def describe(self) -> str:
        """A table of every option: key, env var, default, help (for ``--help`` and the README)."""
        rows = [
            f"  {f.key:<24} {f.env_var:<36} default {f.default!r}\n      {f.help}"
            for f in self.fields.values()
        ]
        return "\n".join(rows)


_RESERVED = frozenset({"sources", "as_dict", "replace", "_keys"})


def read_text(path: str) -> str:
    """The file's text; OSError when it cannot be read, ConfigError when it is not UTF-8."""
    with open(path, encoding="utf-8") as fh:
        try:
            return fh.read()
        except UnicodeDecodeError as e:  # found by fuzzing: was a traceback
            raise ConfigError([Problem(path, "-", f"not UTF-8 text (byte {e.start}): {e.reason}")]) from e


def _key_lines(text: str, known: Mapping[str, Any]) -> dict[str, int]:
    """Dotted key -> 1-based line of the key in the YAML text (for error locations)."""
    import yaml

    from swarmscope.core import yamlsafe

    try:
        root = yamlsafe.compose(text)
    except yaml.YAMLError:
        return {}
    out: dict[str, int] = {}

    def walk(node: Any, prefix: str) -> None:
        if not isinstance(node, yaml.MappingNode):
            return
        for k, v in node.value:
            key = f"{prefix}{k.value}"
            out[key] = k.start_mark.line + 1
            if key not in known:
                walk(v, key + ".")

    walk(root, "")
    return out


def _closest(key: str, known: Mapping[str, Any]) -> str | None:
    import difflib

    m = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return m[0] if m else None
