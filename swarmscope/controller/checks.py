"""Checks: pass/fail expressions over report.json that decide a run's exit code (like k6 thresholds).

    checks = parse_checks([("loss_ratio.max < 0.01", "scenarios/x.yaml:12")])   # ConfigError if bad
    results = evaluate(checks, report)      # [{"check", "source", "ok", "values", "message"}]

The language is our own, small and closed (parsed here, never ``eval``)::

    check    := operand OP operand            OP: <  <=  >  >=  ==  !=
    operand  := NUMBER | path [ "@" [NAME "="] NUMBER ]
    path     := NAME ( "." NAME | "[*]" | "[" INT "]" )*

A path is looked up in report.json (docs/report-json.md), with three shorthands so checks read
like the report's figures: a name missing from an object that has ``points`` is looked up in each
of its points (``neighbors.per_neighbor_us`` = ``neighbors.points[*].per_neighbor_us``; at the top
level ``loss_ratio`` = ``points[*]…``); on a sweep point ``generated``, ``kernel``, ``reported``,
``loss_ratio`` and ``tracer_lost`` are its totals, and ``<name>.<stat>`` its summary statistic
(``loss_ratio.max`` = ``points[*].summary.loss_ratio.max``); a name applied to a list applies to
each item. ``@ N`` keeps the values from list items whose swept parameters (``params``, or
``nodes``, ``neighbors``, ``users``, ``rate``, ``step``) include N (``@ nodes=5``: that one).

A path gives a list of values (one per point, step, …); the check holds when the comparison
holds for **every** value (paired item by item when both sides are paths; a single value is
compared with each of the other side's). A missing value (``null``, or nothing matched) fails
the check: a check that cannot be measured must not pass a CI run.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from swarmscope.core.errors import ConfigError, Problem

EXIT_CODE = 99  # k6's exit code for failed thresholds: CI scripts already know it

OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    ">": operator.gt,
}
POINT_NUMBERS = ("generated", "kernel", "reported", "loss_ratio", "tracer_lost")
TAG_KEYS = ("nodes", "neighbors", "users", "rate", "step")

_TOKEN = re.compile(
    r"\s*(?:(?P<num>-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op><=|>=|==|!=|<|>)|(?P<punct>[.\[\]*@=]))"
)


@dataclass(frozen=True)
class Operand:
    number: float | None = None  # a literal
    path: tuple[str | int, ...] = ()  # names, "*" for [*], ints for [i]
    select: tuple[str, float] | None = None  # (param name or "", value) of "@"

    def __str__(self) -> str:
        if self.number is not None:
            return f"{self.number:g}"
        text = ""
        for seg in self.path:
            text += f"[{seg}]" if isinstance(seg, int) or seg == "*" else ("." if text else "") + seg
        if self.select:
            key, val = self.select
            text += f" @ {key + '=' if key else ''}{val:g}"
        return text


@dataclass(frozen=True)
class Check:
    text: str
    source: str
    left: Operand
    op: str
    right: Operand


class _ParseError(ValueError):
    pass


def _tokens(text: str) -> list[tuple[str, str, int]]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            col = pos + len(text[pos:]) - len(text[pos:].lstrip()) + 1
            raise _ParseError(f"unexpected {text[col - 1]!r} at column {col}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind), m.start(kind) + 1))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, str, int]:
        return self.toks[self.i] if self.i < len(self.toks) else ("end", "", len(self.text) + 1)

    def take(self, kind: str, value: str | None = None) -> str:
        k, v, col = self.peek()
        if k != kind or (value is not None and v != value):
            want = repr(value) if value else {"num": "a number", "name": "a name", "op": "a comparison"}[kind]
            got = "the end" if k == "end" else repr(v)
            raise _ParseError(f"expected {want} at column {col}, found {got}")
        self.i += 1
        return v

    def operand(self) -> Operand:
        k, v, col = self.peek()
        if k == "num":
            self.i += 1
            return Operand(number=float(v))
        if k != "name":
            got = "the end" if k == "end" else repr(v)
            raise _ParseError(f"expected a number or a report path at column {col}, found {got}")
        path: list[str | int] = [self.take("name")]
        while self.peek()[1] in (".", "["):
            if self.take("punct") == ".":
                path.append(self.take("name"))
                continue
            k, v, col = self.peek()
            if v == "*":
                self.i += 1
                path.append("*")
            elif k == "num" and re.fullmatch(r"\d+", v):
                self.i += 1
                path.append(int(v))
            else:
                raise _ParseError(f"expected '*' or an index at column {col}")
            self.take("punct", "]")
        select = None
        if self.peek()[1] == "@":
            self.i += 1
            key = ""
            if self.peek()[0] == "name":
                key = self.take("name")
                self.take("punct", "=")
            select = (key, float(self.take("num")))
        return Operand(path=tuple(path), select=select)

    def check(self, source: str) -> Check:
        left = self.operand()
        op = self.take("op")
        right = self.operand()
        k, v, col = self.peek()
        if k != "end":
            raise _ParseError(f"unexpected {v!r} at column {col} after the comparison")
        if left.number is not None and right.number is not None:
            raise _ParseError("compares two numbers: one side must be a report path")
        return Check(self.text.strip(), source, left, op, right)


def parse_check(text: str, source: str = "--check") -> Check:
    """One check; ValueError (with the column) when it is not valid."""
    return _Parser(text).check(source)


def parse_checks(items: Iterable[tuple[str, str]], key: str = "checks") -> list[Check]:
    """Parse (text, location) pairs; every invalid one is reported at once as a ConfigError."""
    out, problems = [], []
    for text, source in items:
        try:
            out.append(parse_check(str(text), source))
        except _ParseError as e:
            problems.append(Problem(source, key, f"{text!r}: {e}"))
    if problems:
        raise ConfigError(problems)
    return out


def item_lines(text: str, key: str = "checks") -> list[int]:
    """1-based lines of the items of the top-level list ``key`` in a YAML text ([] if none)."""
    import yaml

    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return []
    if not isinstance(root, yaml.MappingNode):
        return []
    for k, v in root.value:
        if k.value == key and isinstance(v, yaml.SequenceNode):
            return [item.start_mark.line + 1 for item in v.value]
    return []


def from_config(
    cfg: Any,
    extra: Sequence[str] = (),
    read: Callable[[str], str | None] | None = None,
    shape: Mapping[str, Any] | None = None,
    elsewhere: Mapping[str, str] | None = None,
) -> list[Check]:
    """The run's checks: the config's ``checks`` (each located at its file line when it comes from
    a scenario file, whose text ``read(path)`` gives: the app's once-per-process reader) and
    ``extra`` ones from ``--check``; a ConfigError lists every invalid one, and with ``shape``
    every path the kind's report does not have (``validate``)."""
    items: list[tuple[str, str]] = []
    texts = list(getattr(cfg, "checks", None) or [])
    source = getattr(cfg, "sources", {}).get("checks", "config")
    path, _, line = source.rpartition(":")
    text = read(path) if read is not None and path and line.isdigit() else None
    lines = item_lines(text) if text else []
    for i, t in enumerate(texts):
        where = f"{path}:{lines[i]}" if len(lines) == len(texts) else f"{source} (item {i + 1})"
        items.append((t, where))
    items += [(t, "--check") for t in extra]
    checks = parse_checks(items)
    if shape is not None:
        validate(checks, shape, elsewhere)
    return checks


# -- evaluation ------------------------------------------------------------------------------


@dataclass
class _Value:
    value: Any
    tags: dict[str, float]
    where: str  # e.g. "points[1]", for the message


def _tags(item: Any) -> dict[str, float]:
    if not isinstance(item, Mapping):
        return {}
    tags: dict[str, float] = {}
    raw = item.get("params")
    params: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    for k, v in [*params.items(), *((k, item.get(k)) for k in TAG_KEYS)]:
        if isinstance(v, int | float) and not isinstance(v, bool) and k not in tags:
            tags[k] = float(v)
    return tags


def _is_point(d: Mapping[str, Any]) -> bool:
    return isinstance(d.get("summary"), Mapping) and isinstance(d.get("totals"), Mapping)


def _lookup(v: _Value, name: str, out: list[_Value]) -> None:
    node = v.value
    if isinstance(node, Mapping):
        if name in node:
            out.append(_Value(node[name], v.tags, f"{v.where}.{name}"))
        elif _is_point(node) and name in POINT_NUMBERS:
            stats = dict(node["summary"].get(name) or {})
            out.append(_Value({**stats, "\0": node["totals"].get(name)}, v.tags, f"{v.where}.{name}"))
        elif isinstance(node.get("points"), list) and node["points"]:
            _lookup(_Value(node["points"], v.tags, f"{v.where}.points"), name, out)
        else:
            raise UnknownName(v.where.lstrip(".") or "the report", name, _names(node))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            _lookup(_Value(item, {**v.tags, **_tags(item)}, f"{v.where}[{i}]"), name, out)
    else:
        raise KeyError(f"{v.where.lstrip('.')} is a {type(node).__name__}, it has no {name!r}")


class UnknownName(KeyError):
    """A path names what its object does not have; ``known``: the names it could have used."""

    def __init__(self, where: str, name: str, known: list[str]):
        super().__init__(f"{where} has no {name!r}")
        self.where, self.name, self.known = where, name, known


def _names(node: Mapping[str, Any]) -> list[str]:
    """The names a path can take from ``node``: its keys, and through its points theirs."""
    names = [str(k) for k in node]
    if _is_point(node):
        names += POINT_NUMBERS
    points = node.get("points")
    if isinstance(points, list) and points and isinstance(points[0], Mapping):
        names += _names(points[0])
    return list(dict.fromkeys(names))


def validate(
    checks: Sequence[Check], shape: Mapping[str, Any], elsewhere: Mapping[str, str] | None = None
) -> None:
    """Every path of ``checks`` exists in ``shape`` (a report of the run's kind with one point
    and its sections, kinds.base.Kind.report_shape), checked before the run: a ConfigError lists
    each unknown name with the closest known ones; ``elsewhere`` maps a section name to the
    kind whose reports have it."""
    import difflib

    elsewhere = elsewhere or {}
    problems = []
    for c in checks:
        for operand in (c.left, c.right):
            try:
                resolve(operand, shape)
            except UnknownName as e:
                root = operand.path[:1] == (e.name,)
                where = f"the {shape.get('scenario')} report" if root else e.where
                why = f"{c.text!r}: {where} has no {e.name!r}"
                close = difflib.get_close_matches(e.name, e.known, n=3, cutoff=0.6)
                if root and e.name in elsewhere:
                    why += f" ({e.name!r} is in {elsewhere[e.name]} reports, not this kind's)"
                if close:
                    why += f"; did you mean {' or '.join(close)}?"
                problems.append(Problem(c.source, "checks", why + " (docs/report-json.md)"))
            except (KeyError, IndexError):
                pass  # an index past the shape's one point, a value that is null before any window
    if problems:
        raise ConfigError(problems)


def resolve(operand: Operand, report: Mapping[str, Any]) -> list[_Value]:
    """The values an operand denotes in ``report`` (KeyError when the path does not exist)."""
    if operand.number is not None:
        return [_Value(operand.number, {}, "")]
    values = [_Value(report, {}, "")]
    for seg in operand.path:
        nxt: list[_Value] = []
        for v in values:
            if seg == "*" or isinstance(seg, int):
                if not isinstance(v.value, list):
                    raise KeyError(f"{v.where.lstrip('.') or 'the report'} is not a list")
                items: list[tuple[int, Any]] = (
                    list(enumerate(v.value)) if isinstance(seg, str) else [(seg, v.value[seg])]
                )
                nxt += [_Value(it, {**v.tags, **_tags(it)}, f"{v.where}[{i}]") for i, it in items]
            else:
                _lookup(v, str(seg), nxt)
        values = nxt
    out = []
    for v in values:  # a point's number alone is its total; lists left at the end apply to each
        if isinstance(v.value, Mapping) and "\0" in v.value:
            v = _Value(v.value["\0"], v.tags, v.where)
        if isinstance(v.value, list):
            out += [_Value(x, v.tags, f"{v.where}[{i}]") for i, x in enumerate(v.value)]
        else:
            out.append(v)
    if operand.select:
        key, want = operand.select
        out = [v for v in out if (want in v.tags.values() if not key else v.tags.get(key) == want)]
    return out


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float) or math.isnan(x):
        return None
    return x


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    return "null" if x is None else str(x)


def evaluate_one(check: Check, report: Mapping[str, Any]) -> dict[str, Any]:
    """One check's result: ok, the values it saw, and a message naming what failed."""
    base = {"check": check.text, "source": check.source}
    try:
        left, right = resolve(check.left, report), resolve(check.right, report)
    except (KeyError, IndexError) as e:
        msg = e.args[0] if e.args else str(e)
        return {**base, "ok": False, "values": [], "message": f"no value: {msg}"}
    if not left or not right:
        side = check.left if not left else check.right
        return {**base, "ok": False, "values": [], "message": f"no value: nothing matched {side}"}
    if len(left) != len(right) and 1 not in (len(left), len(right)):
        msg = f"cannot pair {len(left)} values with {len(right)}"
        return {**base, "ok": False, "values": [], "message": msg}
    n = max(len(left), len(right))
    pairs = [(left[i if len(left) > 1 else 0], right[i if len(right) > 1 else 0]) for i in range(n)]
    fn = OPS[check.op]
    values, failed = [], []
    for a, b in pairs:
        x, y = _num(a.value), _num(b.value)
        path_side = a if check.left.number is None else b
        values.append(x if check.left.number is None else y)
        if x is None or y is None:
            failed.append(f"{path_side.where.lstrip('.')}: no value")
        elif not fn(x, y):
            shown = f"{_fmt(x)} {check.op} {_fmt(y)}"
            failed.append(f"{path_side.where.lstrip('.')}: {shown} is false")
    message = (
        "ok"
        if not failed
        else "; ".join(failed[:5]) + (f"; … {len(failed) - 5} more" if len(failed) > 5 else "")
    )
    return {**base, "ok": not failed, "values": values, "message": message}


def evaluate(checks: Sequence[Check], report: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [evaluate_one(c, report) for c in checks]


def render_results(results: Sequence[Mapping[str, Any]]) -> str:
    """One line per check: PASS/FAIL, the expression, its values (and why it failed)."""
    lines = []
    for r in results:
        vals = ", ".join(_fmt(v) for v in r["values"][:8]) + (" …" if len(r["values"]) > 8 else "")
        line = f"{'PASS' if r['ok'] else 'FAIL'}  {r['check']}  value {vals or '-'}"
        if not r["ok"]:
            line += f"  ({r['message']})"
        lines.append(line)
    failed = sum(not r["ok"] for r in results)
    lines.append(f"checks: {len(results) - failed} passed, {failed} failed")
    return "\n".join(lines)


def render_section(name: str, data: Any, report: Mapping[str, Any]) -> Any:
    """report.html: the checks table, failed ones in red (registered as the section's renderer)."""
    from swarmscope.controller.report import Red, _table
    from swarmscope.controller.sections import SectionHTML

    rows = []
    for r in data or []:
        vals = ", ".join(_fmt(v) for v in r["values"][:8]) + (" …" if len(r["values"]) > 8 else "")
        verdict: str = "pass" if r["ok"] else Red("FAIL")
        rows.append([r["check"], verdict, vals or "-", r["source"], "" if r["ok"] else Red(r["message"])])
    return SectionHTML(_table(["check", "result", "values", "declared at", "why"], rows, "checks"))


def failed(results: Sequence[Mapping[str, Any]] | None) -> list[Mapping[str, Any]]:
    return [r for r in results or [] if not r.get("ok")]


__all__ = ["EXIT_CODE", "Check", "evaluate", "failed", "parse_check", "parse_checks", "render_results"]
